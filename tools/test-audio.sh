#!/usr/bin/env bash
# Fetches real music for Earmark's end-to-end tests from two Debian packages (downloaded, never
# installed) and converts it into a small test set:
#
#   $DIR/reference/*.flac|*.ogg   6 tracks (≥ 60 s each) that tests put into a catalog
#   $DIR/negative/*.flac|*.ogg    2 tracks of other music that must not match them
#   $DIR/speech/*.flac             real recorded speech (telephone prompts, 8 kHz) that must not match either
#   $DIR/babble/babble.flac        60 s of six espeak-ng talkers at once (babble noise to mix over music)
#   $DIR/SOURCES.tsv               where every file came from
#   $DIR/READY                     written last, when everything above is complete (first line: set version)
#
# DIR is $EARMARK_TEST_AUDIO, else ~/.cache/earmark-test-audio. Idempotent: with a READY of this
# set version present it only prints DIR. Downloads about 24 MB (pingus-data 11.7 MB, asc-music
# 10.3 MB, asterisk-core-sounds-en-gsm 2.4 MB); the finished set is about 50 MB. Needs apt-get (root only if the package lists must be
# refreshed), dpkg-deb, ffmpeg, xmp, faketime, espeak-ng and flock (tools/setup.sh installs them).
#
# The set is the same, sample for sample, every time it is built: the tests assert exact offsets and
# match events, and tracker players vary some notes at random (Impulse Tracker's random volume and
# pan variation). ffmpeg's libopenmpt seeds that variation from the system's random device, so it is
# not used; xmp (libxmp) seeds it from the clock, which faketime holds still while it renders.
# Prints DIR on standard output; progress and errors go to standard error.
set -euo pipefail

home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
DIR=${EARMARK_TEST_AUDIO:-$home/.cache/earmark-test-audio}
# Bump when the set changes; a folder made by another version is rebuilt.
SET_VERSION="earmark-test-audio 5"

ready() { [ -f "$DIR/READY" ] && [ "$(head -n 1 "$DIR/READY")" = "$SET_VERSION" ]; }

if ready; then
  echo "$DIR"
  exit 0
fi

for tool in apt-get dpkg-deb ffmpeg ffprobe flock espeak-ng xmp faketime; do
  command -v "$tool" >/dev/null || { echo "test-audio.sh: $tool is missing (run tools/setup.sh)" >&2; exit 1; }
done

mkdir -p "$DIR"
# Several test processes may ask at once: one prepares, the others wait for it.
exec 9>"$DIR/.lock"
flock -w 900 9 || { echo "test-audio.sh: timed out waiting for $DIR/.lock" >&2; exit 1; }
if ready; then
  echo "$DIR"
  exit 0
fi

work=$(mktemp -d "$DIR/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
# apt-get download, run as root into a folder its _apt user cannot write, warns and downloads
# without its sandbox; the warning lands in download.log.
cd "$work"

REFERENCE_PACKAGE=pingus-data   # tracker music (GPL), rendered by xmp
NEGATIVE_PACKAGE=asc-music      # MP3 soundtrack of Advanced Strategic Command
SPEECH_PACKAGE=asterisk-core-sounds-en-gsm   # voice prompts recorded by Allison Smith (CC-BY-SA-3.0)

log() { echo "test-audio.sh: $*" >&2; }

download() {
  if apt-get download "$@" >download.log 2>&1; then return 0; fi
  # Fresh machines may have no package lists yet.
  if [ "$(id -u)" -ne 0 ]; then
    cat download.log >&2
    log "apt-get download failed; refresh the package lists as root (apt-get update) and retry"
    return 1
  fi
  log "refreshing package lists"
  apt-get -o DPkg::Lock::Timeout=900 update -q >update.log 2>&1 || { cat update.log >&2; return 1; }
  apt-get download "$@" >download.log 2>&1 || { cat download.log >&2; return 1; }
}

log "downloading $REFERENCE_PACKAGE, $NEGATIVE_PACKAGE and $SPEECH_PACKAGE into $DIR (about 24 MB)"
download "$REFERENCE_PACKAGE" "$NEGATIVE_PACKAGE" "$SPEECH_PACKAGE"
for pkg in "$REFERENCE_PACKAGE" "$NEGATIVE_PACKAGE" "$SPEECH_PACKAGE"; do
  deb=$(ls "$work"/"${pkg}"_*.deb)
  dpkg-deb -x "$deb" "$work/root"
  dpkg-deb -W --showformat='${Package}\t${Version}\n' "$deb" >>versions.txt
done

mkdir -p out/reference out/negative out/speech
printf 'file\tpackage\tsource\tstart_s\tduration_s\n' >out/SOURCES.tsv

# convert SRC DEST START MAXLEN PACKAGE [MINLEN [ORIGIN]]: decodes with ffmpeg, writes FLAC (source
# rate/channels) or Ogg Vorbis (44.1 kHz), insists on at least MINLEN (default 60) seconds of audio and
# records ORIGIN (default SRC) as the source.
convert() {
  local src=$1 dest=$2 start=$3 maxlen=$4 pkg=$5 minlen=${6:-60} origin=${7:-$1}
  local codec
  case "$dest" in
    *.flac) codec=(-c:a flac) ;;
    *.ogg) codec=(-ar 44100 -c:a libvorbis -q:a 6) ;;
    *) log "unknown target format: $dest"; return 1 ;;
  esac
  ffmpeg -nostdin -hide_banner -loglevel error -ss "$start" -i "$src" -t "$maxlen" -vn -map_metadata -1 \
    "${codec[@]}" "$dest"
  local dur
  dur=$(ffprobe -v error -show_entries format=duration -of csv=p=0 "$dest")
  if ! awk -v d="$dur" -v m="$minlen" 'BEGIN { exit !(d >= m) }'; then
    log "$dest is only $dur s long (need ≥ $minlen s)"
    return 1
  fi
  printf '%s\t%s\t%s\t%s\t%.2f\n' "${dest#out/}" "$pkg" "${origin#root}" "$start" "$dur" >>out/SOURCES.tsv
}

# module NAME DEST: plays pingus-data's NAME.it once (at most 100 s) into a 48 kHz stereo WAV, with the
# clock frozen so that its random variation is the same on every build, then converts that.
mkdir -p rendered
module() {
  local src=root/usr/share/games/pingus/data/music/$1.it wav=rendered/$1.wav
  faketime -f '2020-01-01 00:00:00' xmp --norc --nocmd --quiet --driver wav --frequency 48000 --time 100 \
    --output-file "$wav" "$src" >xmp.log 2>&1 || { cat xmp.log >&2; return 1; }
  [ -s "$wav" ] || { log "xmp rendered nothing from $src"; return 1; }
  convert "$wav" "$2" 0 100 "$REFERENCE_PACKAGE" 60 "$src"
}
module pingus-3 out/reference/pingus-3.ogg
module pingus-4 out/reference/pingus-4.flac
module pingus-5 out/reference/pingus-5.ogg
module pingus-6 out/reference/pingus-6.flac
module sorcerer out/reference/sorcerer.flac
module goin_march out/reference/goin_march.ogg

asc=root/usr/share/games/asc/music
convert "$asc/frontiers.mp3" out/negative/frontiers.ogg 30 90 "$NEGATIVE_PACKAGE"
convert "$asc/machine_wars.mp3" out/negative/machine_wars.flac 30 90 "$NEGATIVE_PACKAGE"

prompts=root/usr/share/asterisk/sounds/en_US_f_Allison
convert "$prompts/demo-instruct.gsm" out/speech/demo-instruct.flac 0 100 "$SPEECH_PACKAGE" 60
convert "$prompts/priv-callee-options.gsm" out/speech/priv-callee-options.flac 0 100 "$SPEECH_PACKAGE" 30

# Babble: six synthetic talkers (voice, speed, text differ) summed, each repeated to fill 60 s.
mkdir -p out/babble talkers
voices=(en-gb en-us en+f2 en-us+m4 en+f5 en+m3)
texts=(
  "The train to the coast leaves at half past nine, so we should pack the bags tonight and sleep early."
  "Could you tell me where the museum is? I think I took the wrong turn after the bridge near the market."
  "Numbers for the third quarter look better than expected, although shipping costs rose again in March."
  "My grandmother grew tomatoes, beans and tall yellow sunflowers behind the old stone house every summer."
  "Please remember to switch off the lights, lock the back door and feed the cat before you go to work."
  "After the rain stopped, the children ran outside to jump in the puddles and look for snails on the path."
)
inputs=()
for i in "${!voices[@]}"; do
  espeak-ng -v "${voices[$i]}" -s $((140 + 9 * i)) -w "talkers/$i.wav" "${texts[$i]} ${texts[$(( (i + 1) % 6 ))]}"
  inputs+=(-stream_loop -1 -i "talkers/$i.wav")
done
ffmpeg -nostdin -hide_banner -loglevel error "${inputs[@]}" \
  -filter_complex "amix=inputs=${#voices[@]}:duration=longest:normalize=0" -t 60 -ac 1 -ar 44100 -c:a flac out/babble/babble.flac
printf '%s\t%s\t%s\t%s\t%s\n' babble/babble.flac espeak-ng "six talkers: ${voices[*]}" 0 60 >>out/SOURCES.tsv
dpkg-query -W --showformat='${Package}\t${Version}\n' espeak-ng xmp libxmp4 faketime >>versions.txt

cp versions.txt out/PACKAGES.txt
rm -f "$DIR/READY"
rm -rf "$DIR/reference" "$DIR/negative" "$DIR/speech" "$DIR/babble"
mv out/reference out/negative out/speech out/babble out/SOURCES.tsv out/PACKAGES.txt "$DIR/"
{ echo "$SET_VERSION"; date -u +%Y-%m-%dT%H:%M:%SZ; } >"$DIR/READY"
log "ready"
echo "$DIR"
