#!/usr/bin/env bash
# Music-metadata benchmark: key on Bach chorales (music21's corpus, rendered with FluidSynth) and
# beats, downbeats and tempo on MIDI files from Debian packages (rendered the same way), with the
# ground truth from the scores (tools/music-data.sh builds and caches the set); with --instruments,
# instrument activity and pace on multi-part MIDI files rendered as a mix and per instrument family
# alone (tools/instrument-data.sh builds and caches that set; the sound model comes from
# tools/fetch-model.sh).
#
#   tools/music-bench.sh                  # key, rhythm, and structure on medleys of the public corpus
#                                         # (when tools/bench.sh has built it; --seed S,S… picks the draws)
#   tools/music-bench.sh --verbose        # also every piece that is not exactly right
#   tools/music-bench.sh --metre          # beats, downbeats, tempo and time signature on the metre set
#                                         # (tools/metre-data.sh: the rhythm set with its time signatures and
#                                         # chorales re-barred in 2/4 ... 12/8); more options go to the bench
#   tools/music-bench.sh --sections       # sections inside songs (tools/section-data.sh: songs in song forms built
#                                         # from chorales, with their sections and labels); per half, even tuned
#   tools/music-bench.sh --instruments    # instrument activity and pace; more options after it go to
#                                         # earmark-music-bench (--subset even|odd, --sweep, --no-solos,
#                                         # --verbose, --limit N; --head PATH|labels: another instrument
#                                         # head, or YAMNet's label scores; the shipped head is trained on the
#                                         # even pieces, so --subset odd is the held-out figure)
#
# EARMARK_SCRATCH: the build folder (default .build/tools).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scratch=${EARMARK_SCRATCH:-.build/tools}
bash tools/setup.sh </dev/null
if [ "${1:-}" = --metre ]; then
  shift
  set -- --data "$(bash tools/metre-data.sh </dev/null)" "$@"
elif [ "${1:-}" = --sections ]; then
  shift
  set -- --data "$(bash tools/section-data.sh </dev/null)" "$@"
elif [ "${1:-}" = --instruments ]; then
  shift
  data=$(bash tools/instrument-data.sh </dev/null)
  model=$(bash tools/fetch-model.sh </dev/null)
  set -- --instruments "$data" --model "$model" "$@"
else
  data=$(bash tools/music-data.sh </dev/null)
  # Structure is scored on medleys of the public corpus when tools/bench.sh has built it.
  corpus=${EARMARK_CORPUS:-$HOME/.cache/earmark-corpus}/corpus/public
  if [ -f "$corpus/manifest.tsv" ] && [[ " $* " != *" --corpus "* ]]; then set -- --corpus "$corpus" "$@"; fi
  set -- --data "$data" "$@"
fi
swift build -c release --scratch-path "$scratch" --product earmark-music-bench 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]' || true
bench="$(swift build -c release --scratch-path "$scratch" --show-bin-path)/earmark-music-bench"
"$bench" "$@"
