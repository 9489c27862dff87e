#!/usr/bin/env bash
# Accuracy / speed / size benchmark on the public corpus of ../shared/corpus (real music from
# Debian packages). Builds the corpus and a query set once (cached under ~/.cache/earmark-corpus),
# then runs the release build of earmark-bench, which indexes every public track and runs every query.
#
#   tools/bench.sh                 # full query set: 23 clips per track (≥ 40 per cell), 300 negatives
#   PER_TRACK=3 NEGATIVES=60 tools/bench.sh   # a quick draw
#   tools/bench.sh --open          # extra earmark-bench flags (see earmark-bench --help)
#   SKEW=1 tools/bench.sh          # then also speed ±5 % and ±10 % clips (tools/make_skew_queries.py)
#   FUZZ_SECONDS=600 tools/bench.sh   # then also every fuzz target for that long (tools/fuzz.sh; CI runs 60 s)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=${EARMARK_CORPUS:-$HOME/.cache/earmark-corpus}
SHARED=${EARMARK_SHARED:-../shared}
PER_TRACK=${PER_TRACK:-23}
NEGATIVES=${NEGATIVES:-300}
QUERIES=$ROOT/queries/bench-$PER_TRACK-$NEGATIVES

bash tools/setup.sh </dev/null
need=()
for p in libchromaprint-tools espeak-ng python3-numpy; do
  dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || need+=("$p")
done
python3 -c 'import numpy' 2>/dev/null && need=("${need[@]/python3-numpy}")
if [ -n "${need[*]// /}" ]; then
  apt-get -o DPkg::Lock::Timeout=900 update -q && apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends ${need[*]}
fi
[ -f "$ROOT/corpus/public/manifest.tsv" ] || python3 "$SHARED/corpus/build_corpus.py" --set all --root "$ROOT"
[ -f "$QUERIES/queries.tsv" ] || python3 "$SHARED/corpus/make_queries.py" --corpus "$ROOT/corpus/public" \
  --negative "$ROOT/corpus/negative" --out "$QUERIES" --per-track "$PER_TRACK" --negatives "$NEGATIVES"
swift build -c release --scratch-path .build/tools --product earmark-bench 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]' || true
bench="$(swift build -c release --scratch-path .build/tools --show-bin-path)/earmark-bench"
"$bench" --corpus "$ROOT/corpus/public" --queries "$QUERIES" "$@"
if [ "${SKEW:-0}" = 1 ]; then
  SKEWQ=$ROOT/queries/skew-10s-2
  [ -f "$SKEWQ/queries.tsv" ] || EARMARK_SHARED_CORPUS="$SHARED/corpus" python3 tools/make_skew_queries.py \
    --corpus "$ROOT/corpus/public" --out "$SKEWQ" --durations 10 --per-track 2 --negatives 0
  echo "== speed ±5 % and ±10 % (10-s clips)"
  "$bench" --corpus "$ROOT/corpus/public" --queries "$SKEWQ" --reuse "$@"
fi
if [ -n "${FUZZ_SECONDS:-}" ]; then
  echo "== fuzz targets, $FUZZ_SECONDS s each"
  bash tools/fuzz.sh --seconds "$FUZZ_SECONDS" </dev/null
fi
