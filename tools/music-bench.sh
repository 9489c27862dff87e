#!/usr/bin/env bash
# Music-metadata benchmark: key on Bach chorales (music21's corpus, rendered with FluidSynth) and
# beats, downbeats and tempo on MIDI files from Debian packages (rendered the same way), with the
# ground truth from the scores (tools/music-data.sh builds and caches the set).
#
#   tools/music-bench.sh             # everything
#   tools/music-bench.sh --verbose   # also every piece that is not exactly right
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh </dev/null
data=$(bash tools/music-data.sh </dev/null)
swift build -c release --scratch-path .build/tools --product earmark-music-bench 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]' || true
bench="$(swift build -c release --scratch-path .build/tools --show-bin-path)/earmark-music-bench"
"$bench" --data "$data" "$@"
