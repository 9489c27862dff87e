#!/usr/bin/env bash
# API fuzzing of `earmark serve` with schemathesis (PyPI), against docs/openapi.yaml; not run by CI.
# Installs schemathesis into a venv under ~/.cache/earmark-schemathesis (once), builds the debug
# program (assertions on), starts a throwaway server on a free loopback port over a fresh catalog of
# two real tracks (tools/test-audio.sh), with a write token so that writes are exercised too, and
# runs schemathesis for SERVE_FUZZ_SECONDS (default 180) with the check `not_a_server_error`, in its
# examples, fuzzing and stateful phases (SERVE_FUZZ_PHASES): its coverage phase stops with an internal
# error of schemathesis 4.32.5 on POST /v1/match ("AST constructor recursion depth mismatch", raised
# while it builds test data, before any request is sent).
# Fails when any answer was a 5xx, when schemathesis found another failure or could not run, when
# the server died, or when `catalog check` fails on the catalog afterwards.
# SERVE_FUZZ_SEED (default 1) makes a run repeatable; SCHEMATHESIS_VERSION pins another version.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=${SERVE_FUZZ_SECONDS:-180}
seed=${SERVE_FUZZ_SEED:-1}
phases=${SERVE_FUZZ_PHASES:-examples,fuzzing,stateful}
version=${SCHEMATHESIS_VERSION:-4.32.5}
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
venv=$home/.cache/earmark-schemathesis/venv

if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "version $version$"; then
    echo "== installing schemathesis $version into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "schemathesis==$version"
fi

audio=$(bash tools/test-audio.sh </dev/null)
echo "== building (debug)" >&2
swift build --product earmark 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]|^(Compiling|Write|Building|Emitting|Linking|Planning)|swift-distributed-tracing|CMakeLists' >&2 || true
earmark=$(swift build --show-bin-path)/earmark

tmp=$(mktemp -d)
server=
cleanup() {
    [ -n "$server" ] && kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
catalog=$tmp/fuzz.earcat
ls "$audio"/reference/* | head -n 2 | xargs "$earmark" catalog add --catalog "$catalog" >/dev/null
head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$tmp/write.token"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Caps above schemathesis's concurrency, so that no 503 busy is counted as a server error.
TMPDIR=$tmp "$earmark" serve --catalog "$catalog" --host 127.0.0.1 --port "$port" --token-file "$tmp/write.token" \
    --max-concurrent 16 --max-body-mb 20 2>"$tmp/serve.log" &
server=$!
for _ in $(seq 150); do
    grep -q "listening on" "$tmp/serve.log" && break
    kill -0 "$server" 2>/dev/null || { cat "$tmp/serve.log" >&2; exit 2; }
    sleep 0.2
done
grep -q "listening on" "$tmp/serve.log" || { echo "serve-fuzz: the server did not start" >&2; cat "$tmp/serve.log" >&2; exit 2; }

echo "== schemathesis $version, $seconds s, seed $seed, against http://127.0.0.1:$port (pid $server)" >&2
status=0
# From the scratch folder, where schemathesis keeps its cache (.schemathesis/).
spec=$(pwd)/docs/openapi.yaml
(cd "$tmp" && "$venv/bin/schemathesis" run "$spec" --url "http://127.0.0.1:$port" \
    --header "Authorization: Bearer $(cat "$tmp/write.token")" \
    --checks not_a_server_error --max-time "$seconds" --seed "$seed" --workers 2 --phases "$phases" \
    --request-timeout 60 --suppress-health-check all --no-color \
    --report ndjson --report-ndjson-path "$tmp/events.ndjson") || status=$?

alive=yes
kill -0 "$server" 2>/dev/null || alive=no
fivexx=$(python3 - "$tmp/events.ndjson" <<'EOF'
import collections, json, sys
statuses = collections.Counter()
def walk(node):
    if isinstance(node, dict):
        response = node.get("response")
        if isinstance(response, dict) and isinstance(response.get("status_code"), int):
            statuses[response["status_code"]] += 1
        for value in node.values():
            walk(value)
    elif isinstance(node, list):
        for value in node:
            walk(value)
for line in open(sys.argv[1]):
    try:
        walk(json.loads(line))
    except ValueError:
        pass
print(" ".join(f"{code}:{n}" for code, n in sorted(statuses.items())), file=sys.stderr)
print(sum(n for code, n in statuses.items() if code >= 500))
EOF
) || fivexx=unknown
if [ "$alive" = yes ]; then
    kill -TERM "$server"
    wait "$server" || { echo "serve-fuzz: the server exited with $? after SIGTERM" >&2; status=1; }
    server=
fi
check=ok
"$earmark" catalog check --catalog "$catalog" >/dev/null 2>&1 || check=failed
echo "== responses by status above; 5xx: $fivexx; server alive at the end: $alive; catalog check: $check; schemathesis exit: $status" >&2
if grep -Eiq "fatal error|crash|assertion" "$tmp/serve.log"; then
    echo "serve-fuzz: the server log reports a crash:" >&2
    grep -Ei "fatal error|crash|assertion" "$tmp/serve.log" | head >&2
    status=1
fi
[ "$alive" = yes ] && [ "$check" = ok ] && [ "$fivexx" = 0 ] && [ "$status" = 0 ]
