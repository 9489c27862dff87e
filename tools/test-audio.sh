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
# refreshed), dpkg-deb, ffmpeg (with libopenmpt, as Debian's is) and flock.
# Prints DIR on standard output; progress and errors go to standard error.
set -euo pipefail

home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
DIR=${EARMARK_TEST_AUDIO:-$home/.cache/earmark-test-audio}
# Bump when the set changes; a folder made by another version is rebuilt.
SET_VERSION="earmark-test-audio 4"

ready() { [ -f "$DIR/READY" ] && [ "$(head -n 1 "$DIR/READY")" = "$SET_VERSION" ]; }

if ready; then
  echo "$DIR"
  exit 0
fi

for tool in apt-get dpkg-deb ffmpeg ffprobe flock espeak-ng; do
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

REFERENCE_PACKAGE=pingus-data   # tracker music (GPL), rendered by ffmpeg's libopenmpt
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

# convert SRC DEST START MAXLEN PACKAGE [MINLEN]: decodes with ffmpeg, writes FLAC (source rate/channels)
# or Ogg Vorbis (44.1 kHz), and insists on at least MINLEN (default 60) seconds of audio.
convert() {
  local src=$1 dest=$2 start=$3 maxlen=$4 pkg=$5 minlen=${6:-60}
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
  printf '%s\t%s\t%s\t%s\t%.2f\n' "${dest#out/}" "$pkg" "${src#root}" "$start" "$dur" >>out/SOURCES.tsv
}

music=root/usr/share/games/pingus/data/music
convert "$music/pingus-3.it" out/reference/pingus-3.ogg 0 100 "$REFERENCE_PACKAGE"
convert "$music/pingus-4.it" out/reference/pingus-4.flac 0 100 "$REFERENCE_PACKAGE"
convert "$music/pingus-5.it" out/reference/pingus-5.ogg 0 100 "$REFERENCE_PACKAGE"
convert "$music/pingus-6.it" out/reference/pingus-6.flac 0 100 "$REFERENCE_PACKAGE"
convert "$music/sorcerer.it" out/reference/sorcerer.flac 0 100 "$REFERENCE_PACKAGE"
convert "$music/goin_march.it" out/reference/goin_march.ogg 0 100 "$REFERENCE_PACKAGE"

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
dpkg-query -W --showformat='${Package}\t${Version}\n' espeak-ng >>versions.txt

cp versions.txt out/PACKAGES.txt
rm -f "$DIR/READY"
rm -rf "$DIR/reference" "$DIR/negative" "$DIR/speech" "$DIR/babble"
mv out/reference out/negative out/speech out/babble out/SOURCES.tsv out/PACKAGES.txt "$DIR/"
{ echo "$SET_VERSION"; date -u +%Y-%m-%dT%H:%M:%SZ; } >"$DIR/READY"
log "ready"
echo "$DIR"
