#!/usr/bin/env bash
# Installs the Debian packages Earmark needs to build and test (idempotent; run as root).
# Quiet when everything is already present. Non-interactive (fine under CI=true, no stdin).
set -euo pipefail

PACKAGES=(
  pkg-config libfftw3-dev libsndfile1-dev libsqlite3-dev libsoxr-dev libopus-dev libogg-dev libmpg123-dev
  libpulse-dev pulseaudio pulseaudio-utils libebur128-dev libopenblas-dev zlib1g-dev python3 python3-venv
  sox libsox-fmt-all ffmpeg sqlite3 ca-certificates espeak-ng xmp faketime
  chromium python3-websocket   # tools/browser-test.py: the page of `earmark serve` in headless Chromium, over CDP
  asterisk-core-sounds-en asterisk-core-sounds-en-wav   # speech tests: real telephone prompts and their transcripts
  postgresql-15   # EarmarkCatalogPostgresTests: throwaway servers (initdb, pg_ctl in /usr/lib/postgresql/15/bin); the system cluster is not used
)

missing=()
for p in "${PACKAGES[@]}"; do
  # "install ok installed" only: a removed package whose config files remain does not count.
  status=$(dpkg -s "$p" 2>/dev/null || true)
  if [[ $status != *"Status: install ok installed"* ]]; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: missing packages: ${missing[*]}; run as root (or: sudo $0)" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "setup.sh: installing ${missing[*]}"
apt-get -o DPkg::Lock::Timeout=900 update -q
apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends "${missing[@]}" </dev/null
