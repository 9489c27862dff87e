#!/usr/bin/env bash
# Peak memory of fingerprinting a 3-minute and a 3-hour file (real music from the test-audio set,
# concatenated with sox into one FLAC). Decoding streams in chunks, so the two should be close:
# only the signature's peaks grow with the length (every peak of rank < 100, kept for the deep
# matching pass: about 4 MB per hour; catalog add keeps only those of rank < 36).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
audio=$(bash tools/test-audio.sh </dev/null)
swift build -c release --scratch-path .build/tools --product earmark 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]' || true
earmark=$(swift build -c release --scratch-path .build/tools --show-bin-path)/earmark
tmp=${TMPDIR:-/tmp}/earmark-memcheck
mkdir -p "$tmp"
first=$(ls "$audio"/reference/* | head -1)
[ -f "$tmp/3min.flac" ] || sox "$first" -c 2 -r 44100 "$tmp/3min.flac" repeat 1 trim 0 180
if [ ! -f "$tmp/3h.flac" ]; then
  # 3 h = 10,800 s: the reference tracks, repeated until long enough.
  # Inputs differ in rate and channels, so each is converted first.
  i=0
  for src in "$audio"/reference/*; do sox "$src" -c 2 -r 44100 "$tmp/part$i.flac"; i=$((i + 1)); done
  list=()
  while [ ${#list[@]} -lt 140 ]; do list+=("$tmp"/part*.flac); done
  sox "${list[@]}" "$tmp/3h.flac" trim 0 10800
  rm -f "$tmp"/part*.flac
fi
for f in 3min 3h; do
  /usr/bin/time -f "$f: %e s wall, peak RSS %M KB" "$earmark" signature "$tmp/$f.flac" -o "$tmp/$f.earsig" >/dev/null
done
