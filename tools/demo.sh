#!/usr/bin/env bash
# Quick start: installs what is missing, builds Earmark, builds a demo catalog from real music
# (tracks of Debian's pingus-data, fetched by tools/test-audio.sh) and identifies a noisy,
# MP3-compressed 10-second clip cut from one of them. Idempotent; run as root on Debian 12.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash tools/setup.sh </dev/null
audio=$(bash tools/test-audio.sh </dev/null)
echo "== building (release)"
swift build -c release --scratch-path .build/tools --product earmark 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]' || true
earmark=$(swift build -c release --scratch-path .build/tools --show-bin-path)/earmark
catalog=catalogs/demo.earcat

echo "== earmark catalog add $audio/reference"
"$earmark" catalog add "$audio/reference" --catalog "$catalog"
"$earmark" catalog stats --catalog "$catalog"

# A degraded query: 10 s from 40 s into the third reference track, pink noise at about 5 dB SNR, MP3 at 64 kbit/s.
track=$(ls "$audio"/reference/* | sed -n 3p)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sox "$track" -r 44100 -c 1 -b 16 "$tmp/cut.wav" trim 40 10
rms=$(sox "$tmp/cut.wav" -n stat 2>&1 | awk '/RMS +amplitude/ {print $3}')
sox -R -n -r 44100 -c 1 -b 16 "$tmp/noise.wav" synth 10 pinknoise
nrms=$(sox "$tmp/noise.wav" -n stat 2>&1 | awk '/RMS +amplitude/ {print $3}')
vol=$(python3 -c "print($rms / $nrms / 10 ** (5 / 20))")
sox -m "$tmp/cut.wav" -v "$vol" "$tmp/noise.wav" "$tmp/noisy.wav"
ffmpeg -v error -y -i "$tmp/noisy.wav" -b:a 64k "$tmp/clip.mp3"
echo "== earmark match clip.mp3   (cut from $(basename "$track") at 40 s, pink noise 5 dB SNR, MP3 64 kbit/s)"
"$earmark" match "$tmp/clip.mp3" --catalog "$catalog"

here=$(pwd)
cat <<NEXT

== what to try next
The program is $earmark and the demo catalog is $here/$catalog.
  # identify any clip (a file in any format ffmpeg reads, or a .earsig):
  $earmark match YOUR-CLIP.wav --catalog $here/$catalog
  # listen to the microphone (or a stream: --input FILE or --input -) and name what plays:
  $earmark listen --catalog $here/$catalog
  # put earmark on your PATH with man pages and completions, and make this catalog the default:
  bash tools/install.sh && export EARMARK_CATALOG=$here/$catalog
NEXT
