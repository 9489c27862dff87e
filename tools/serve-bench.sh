#!/usr/bin/env bash
# Load benchmark of `earmark serve`, on loopback only; not run by CI. Builds the release program
# (scratch path $SERVE_BENCH_SCRATCH, default .build/bench), builds a catalog of real music as tools/demo.sh does (the reference
# tracks of tools/test-audio.sh), cuts degraded 10-s clips and 30-s streams from those tracks, starts
# `earmark serve` on a free loopback port and drives it with tools/serve-bench.py:
#
#   POST /v1/match at 1, 8 and 32 concurrent clients: matches/s, p50/p99 latency, errors, server RSS
#   before and after SERVE_BENCH_REQUESTS requests (default 10000, split between the three levels)
#   GET /v1/listen: SERVE_BENCH_STREAMS (default 50) WebSocket listeners at once, streaming real music
#   at real time for SERVE_BENCH_STREAM_SECONDS (default 30): server CPU per stream, time to first match
#
# Bounded: each match level stops after SERVE_BENCH_LEVEL_SECONDS (default 180) whatever the count,
# and the whole run after SERVE_BENCH_TIMEOUT seconds (default 1200). The server gets
# --max-concurrent 64 so that 32 clients are served, not refused; 503s would be counted as errors.
# Exits 1 when any request failed or matched the wrong track. The client runs on the same machine
# and takes CPU from the server, so on a small machine the figures are a floor.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

requests=${SERVE_BENCH_REQUESTS:-10000}
streams=${SERVE_BENCH_STREAMS:-50}
stream_seconds=${SERVE_BENCH_STREAM_SECONDS:-30}
level_seconds=${SERVE_BENCH_LEVEL_SECONDS:-180}
timeout_s=${SERVE_BENCH_TIMEOUT:-1200}
scratch=${SERVE_BENCH_SCRATCH:-.build/bench}

audio=$(bash tools/test-audio.sh </dev/null)
echo "== building (release, $scratch)" >&2
swift build -c release --scratch-path "$scratch" --product earmark 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]|^(Compiling|Write|Building|Emitting|Linking|Planning)' >&2 || true
earmark=$(swift build -c release --scratch-path "$scratch" --show-bin-path)/earmark
[ -x "$earmark" ] || { echo "serve-bench: no $earmark" >&2; exit 2; }

work=$scratch/serve-bench
mkdir -p "$work"
catalog=$work/demo.earcat
if [ ! -f "$work/catalog.done" ]; then
    rm -f "$catalog"*
    echo "== earmark catalog add $audio/reference" >&2
    "$earmark" catalog add "$audio/reference" --catalog "$catalog" >&2
    touch "$work/catalog.done"
fi

# Clips: 10 s at 20 s and at 40 s into each reference track, pink noise at 10 dB SNR, MP3 at 64 kbit/s
# (named TRACKFILE@START.mp3). Streams: 30 s from 10 s into each track, 16 kHz mono s16le.
if [ ! -f "$work/clips.done" ]; then
    echo "== cutting clips and streams" >&2
    rm -rf "$work/clips" "$work/pcm"
    mkdir -p "$work/clips" "$work/pcm"
    tmp=$(mktemp -d)
    for track in "$audio"/reference/*; do
        name=$(basename "$track")
        for start in 20 40; do
            sox "$track" -r 44100 -c 1 -b 16 "$tmp/cut.wav" trim "$start" 10
            rms=$(sox "$tmp/cut.wav" -n stat 2>&1 | awk '/RMS +amplitude/ {print $3}')
            sox -R -n -r 44100 -c 1 -b 16 "$tmp/noise.wav" synth 10 pinknoise
            nrms=$(sox "$tmp/noise.wav" -n stat 2>&1 | awk '/RMS +amplitude/ {print $3}')
            vol=$(python3 -c "print($rms / $nrms / 10 ** (10 / 20))")
            sox -m "$tmp/cut.wav" -v "$vol" "$tmp/noise.wav" "$tmp/noisy.wav"
            ffmpeg -v error -y -i "$tmp/noisy.wav" -b:a 64k "$work/clips/$name@$start.mp3"
        done
        sox "$track" -r 16000 -c 1 -b 16 -e signed-integer -L -t raw "$work/pcm/$name.raw" trim 10 30
    done
    rm -rf "$tmp"
    touch "$work/clips.done"
fi

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$work/serve.log
"$earmark" serve --catalog "$catalog" --host 127.0.0.1 --port "$port" --max-concurrent 64 --max-streams 64 2>"$log" &
server=$!
trap 'kill -TERM "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    grep -q "listening on" "$log" && break
    kill -0 "$server" 2>/dev/null || { cat "$log" >&2; exit 2; }
    sleep 0.2
done
grep -q "listening on" "$log" || { echo "serve-bench: the server did not start" >&2; cat "$log" >&2; exit 2; }
echo "== $(uname -m), $(nproc) cores, $(git rev-parse --short HEAD); server pid $server on port $port; " \
     "$(ls "$work/clips" | wc -l) clips, $(ls "$work/pcm" | wc -l) streams" >&2
"$earmark" catalog stats --catalog "$catalog" >&2 || true

status=0
timeout --signal=TERM "$timeout_s" python3 tools/serve-bench.py --port "$port" --pid "$server" \
    --clips "$work/clips" --pcm "$work/pcm" --requests "$requests" --max-seconds "$level_seconds" \
    --streams "$streams" --stream-seconds "$stream_seconds" --json "$work/result.json" || status=$?
echo "(figures also in $work/result.json; server log $log)" >&2
exit "$status"
