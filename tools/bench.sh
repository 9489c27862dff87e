#!/usr/bin/env bash
# Accuracy / speed / size benchmark on the public corpus of ../shared/corpus (real music from
# Debian packages). Builds the corpus and a query set once (cached under ~/.cache/earmark-corpus),
# then runs the release build of earmark-bench, which indexes every public track and runs every query.
#
#   tools/bench.sh                 # full query set: 23 clips per track (≥ 40 per cell), 300 negatives
#   PER_TRACK=3 NEGATIVES=60 tools/bench.sh   # a quick draw
#   tools/bench.sh --open          # extra earmark-bench flags (see earmark-bench --help)
#   SKEW=1 tools/bench.sh          # then also speed ±5 %, ±10 %, tempo ±10 %, pitch ±1 semitone clips (tools/make_skew_queries.py)
#   FUZZ_SECONDS=600 tools/bench.sh   # then also every fuzz target for that long (tools/fuzz.sh; CI runs 60 s)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/corpus.sh
PER_TRACK=${PER_TRACK:-23}
NEGATIVES=${NEGATIVES:-300}

corpus_ready
QUERIES=$(corpus_queries "$PER_TRACK" "$NEGATIVES")
swift build -c release --scratch-path .build/tools --product earmark-bench 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]' || true
bench="$(swift build -c release --scratch-path .build/tools --show-bin-path)/earmark-bench"
"$bench" --corpus "$ROOT/corpus/public" --queries "$QUERIES" "$@"
if [ "${SKEW:-0}" = 1 ]; then
  SKEWQ=$(corpus_skew_queries)
  echo "== speed ±5 % and ±10 %, tempo ±10 %, pitch ±1 semitone (10-s clips)"
  "$bench" --corpus "$ROOT/corpus/public" --queries "$SKEWQ" --reuse "$@"
fi
if [ -n "${FUZZ_SECONDS:-}" ]; then
  echo "== fuzz targets, $FUZZ_SECONDS s each"
  bash tools/fuzz.sh --seconds "$FUZZ_SECONDS" </dev/null
fi
