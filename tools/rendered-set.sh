# Shared steps of tools/music-data.sh and tools/instrument-data.sh (sourced, not run): fetching Debian
# packages, installing the synthesizer and sound font, and the pinned Python venv.
# The sourcing script defines log and die and sets RENDER_PACKAGES, SOUNDFONT, VENV, PY, PY_PINS and
# PY_IMPORTS (the modules the venv must import, as in "import mido, numpy"), and runs in its work folder.

apt_refresh() {
  [ "$(id -u)" -eq 0 ] || return 1
  log "refreshing the package lists"
  apt-get -o DPkg::Lock::Timeout=900 update -q >update.log 2>&1 || { cat update.log >&2; return 1; }
}

# apt-get download, run as root into a folder its _apt user cannot write, warns and downloads
# without its sandbox; the warning lands in download.log.
download() {
  if apt-get download "$@" >download.log 2>&1; then return 0; fi
  # Fresh machines may have no package lists yet.
  apt_refresh || { cat download.log >&2; die "apt-get download $* failed (as root, apt-get update may help)"; }
  apt-get download "$@" >download.log 2>&1 || { cat download.log >&2; die "apt-get download $* failed"; }
}

# unpack_debs TSV PKG…: unpacks each PKG_*.deb that download left in $work into $work/root/PKG,
# appends "package<TAB>version<TAB>deb bytes" to TSV and deletes the .deb.
unpack_debs() {
  local tsv=$1 pkg debs
  shift
  for pkg in "$@"; do
    debs=("$work/${pkg}"_*.deb)
    [ -f "${debs[0]}" ] || die "apt-get download left no .deb for $pkg"
    mkdir -p "$work/root/$pkg"
    dpkg-deb -x "${debs[0]}" "$work/root/$pkg" || die "cannot unpack ${debs[0]}"
    printf '%s\t%s\n' "$(dpkg-deb -W --showformat='${Package}\t${Version}' "${debs[0]}")" "$(stat -c %s "${debs[0]}")" >>"$tsv"
    rm -f "${debs[0]}"
  done
}

installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

# The synthesizer and the sound font.
ensure_render_packages() {
  local missing=() p
  for p in "${RENDER_PACKAGES[@]}"; do installed "$p" || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || die "missing packages: ${missing[*]}; install them as root (apt-get install ${missing[*]})"
    log "installing ${missing[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}" </dev/null >apt.log 2>&1; then
      apt_refresh || true
      apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}" </dev/null >>apt.log 2>&1 ||
        { cat apt.log >&2; die "apt-get install ${missing[*]} failed"; }
    fi
  fi
  command -v fluidsynth >/dev/null || die "fluidsynth is not on PATH"
  [ -f "$SOUNDFONT" ] || die "$SOUNDFONT is missing (package fluid-soundfont-gm)"
}

# The venv is kept across rebuilds of the set and rebuilt when the pins change.
venv_ready() {
  [ -x "$PY" ] && [ "$(cat "$VENV/.earmark-pins" 2>/dev/null)" = "${PY_PINS[*]}" ] &&
    "$PY" -c "import $PY_IMPORTS" 2>/dev/null
}

make_venv() {
  local base=${EARMARK_PYTHON:-python3} version
  command -v "$base" >/dev/null || die "$base not found (install python3 >= 3.11, or set EARMARK_PYTHON)"
  version=$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) ||
    die "$base does not run (set EARMARK_PYTHON to a Python 3.11 or newer)"
  "$base" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    die "$base is Python $version; 3.11 or newer is needed (set EARMARK_PYTHON)"
  rm -rf "$VENV"
  log "creating the Python venv $VENV"
  if ! "$base" -m venv "$VENV" >venv.log 2>&1; then
    rm -rf "$VENV"
    [ "$(id -u)" -eq 0 ] || { cat venv.log >&2; die "'$base -m venv' failed; install python3-venv"; }
    log "installing python3-venv with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=900 install -y -q python3-venv </dev/null >apt.log 2>&1 ||
      { apt_refresh || true; apt-get -o DPkg::Lock::Timeout=900 install -y -q python3-venv </dev/null >>apt.log 2>&1; } ||
      { cat apt.log >&2; die "apt-get install python3-venv failed"; }
    "$base" -m venv "$VENV" >venv.log 2>&1 || { cat venv.log >&2; rm -rf "$VENV"; die "'$base -m venv' failed"; }
  fi
  log "installing ${#PY_PINS[@]} pinned packages from PyPI (${PY_PINS[*]:0:2} …)"
  if ! PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 "$PY" -m pip install -q --no-deps --only-binary=:all: \
      "${PY_PINS[@]}" >pip.log 2>&1; then
    cat pip.log >&2
    rm -rf "$VENV"
    die "pip install failed"
  fi
  "$PY" -c "import $PY_IMPORTS" 2>pyimport.log || { cat pyimport.log >&2; rm -rf "$VENV"; die "the venv cannot import $PY_IMPORTS"; }
  echo "${PY_PINS[*]}" >"$VENV/.earmark-pins"
}
