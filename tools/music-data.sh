#!/usr/bin/env bash
# Builds Earmark's evaluation set for music analysis: rendered music with ground truth for
# (1) KEY detection and (2) BEAT / DOWNBEAT / TEMPO tracking.
#
#   key    The Bach chorales of the music21 corpus (PyPI music21, pinned below; about 400 files,
#          .mxl/.xml/.krn). Every score that parses and has Soprano/Alto/Tenor/Bass parts is kept once:
#          a .krn with the same name as a MusicXML file, and any score whose vocal parts repeat an
#          earlier one note for note, are skipped as duplicates; bwv846 (a piano prelude) is no
#          chorale. Only the vocal parts are played (the instrumental parts of cantata settings are
#          dropped), as a string quartet: Soprano and Alto Violin (GM 41), Tenor Viola (GM 42), Bass
#          Cello (GM 43), each part on its own MIDI channel, velocity 90, repeats not expanded, grace
#          notes left out (music21 writes them as notes that never end), at the
#          score's first numeric metronome mark, else 80 quarter notes per minute (no chorale in
#          music21 10.5.1 has a numeric mark, so all play at 80).
#          The key (truth) comes from the score, not from a key-finding algorithm. The evidence:
#            signature  the key signature of the vocal parts (the most common one; the soprano of
#                       bwv4.8 and bwv62.6 disagrees with the three other parts)
#            encoded    the mode written in the MusicXML (<mode>): "minor" in any part with that
#                       signature wins, else "major". The corpus marks minor deliberately (often only in
#                       the soprano part) while "major" is also what the notation program wrote by default
#                       into parts, so a bare "major" is weak evidence. No mode at all: no encoded key.
#            final      the root of the final chord (the last note of every vocal part; music21's
#                       chord root), spelled as in the score; first: the same for the first notes.
#          Rules, first match wins (M and m: the major and the relative minor tonic of the signature):
#            encoded                the encoded key's tonic is the final root                    high
#            final-chord            no mode encoded; the final root is M (major) or m (minor)     high
#            final-chord-over-major encoded major, final root m: minor on m                        medium
#            relative-major-frame   encoded minor, first and final root M: major on M              medium
#            dorian-signature       final root a fourth above m (a minor key written with one flat
#                                   too few, e.g. G minor with one flat): minor on the final root  medium
#            phrygian-ending        final root a fifth above m (a half cadence on the dominant,
#                                   e.g. A minor ending on E major): minor on m                   medium
#            mixolydian-signature   first and final root a fifth above M (e.g. G major written
#                                   without a sharp): major on that root                          medium
#            half-cadence-ending    final root a fifth above M, first root not: the encoded key,
#                                   else M major                                                  low
#            encoded-unconfirmed    the encoded key, nothing above applies (e.g. a minor chorale
#                                   ending on its relative major)                                 low
#            final-root-only        no mode and nothing above: the final root, minor if its chord is
#                                   minor, else major                                             low
#          With music21 10.5.1 (406 chorales, 213 major, 193 minor): encoded 323, dorian-signature 36,
#          phrygian-ending 24, final-chord-over-major 7, mixolydian-signature 6, encoded-unconfirmed 5,
#          half-cadence-ending 4, relative-major-frame 1 (the build prints and READY records the counts).
#          The 20 chorale analyses in the corpus (choraleAnalyses/riemenschneider*.rntxt, by human
#          analysts) are compared with the truth in key/crosscheck.tsv (editions may be transposed).
#
#   beats  MIDI files shipped in Debian packages (BEAT_PACKAGES below; downloaded with apt-get download,
#          never installed), each played with its own General MIDI programs. Truth from the tempo map,
#          the time signatures and the notes of the file (parsed with PyPI mido, pinned below), never
#          from a beat tracker: the file's grid has bars at tick 0 and at every time-signature change
#          (MIDI's 4/4 when the file has none); a beat is every denominator note (quarter in 4/4, 3/4,
#          5/4, 6/4, 2/4; eighth in 2/8, 3/8, 4/8), except in compound meters (numerator a multiple of 3
#          above 3 and denominator 8 or more: 6/8, 9/8, 12/8, 6/16), where it is the dotted note of
#          three denominator notes.
#          Bar phase: the bar lines are moved by a whole number of beats when the parts agree that
#          the music's bars start elsewhere. Sequencers do not always put the music on the file's
#          grid: the example songs of MMA (package mma) start one beat in, so their parts enter on
#          beat 2 of the file's 4/4 bar (later parts: beat 2 of a later bar); some Band-in-a-Box
#          files of simutrans-data enter on beat 3. Every part (a track's notes on one MIDI channel)
#          votes with its entry, its first note-on, for the beat of the file's bar it lies on
#          (within 1/8 beat; an entry between beats, such as an eighth-note pickup, does not vote).
#          The beat with at least 2/3 of the votes, and at least 2 votes, is the music's downbeat:
#          bar_phase = its distance in beats from the file's downbeat (0 to beats per bar - 1);
#          without such a majority the file's grid stands (bar_phase 0). The entries of a piece
#          arrange its parts, so they mark bars better than any single note: a melody's pickup is
#          one vote against the accompaniment's downbeat entries. The same phase holds in every
#          time-signature section (MMA writes its song's own time signature one beat in, so those
#          sections start on the music's downbeat and vote phase 0). With the packages below it
#          moves 37 of the 146 files: 27 of mma (phase 1), 9 of simutrans-data (01, 02, 04, 06, 08:
#          phase 1; 22, 24, 35, 36: phase 2) and openttd-openmsx's train_filled_with_cash (phase 1).
#          Known misses: files whose parts do not agree keep the file's grid (mma's chords: one
#          part; midinote and volumes: parts split), and a bar of another length that the file does
#          not mark (MMA's Truncate) moves the bars after it.
#          Beats before the first note onset (lead-in) and after the last note ends are dropped;
#          position 1 is a downbeat.
#          A file is skipped when it is unreadable, has fewer than 64 notes, lasts (to its last note)
#          under 20 s or over 6 min, repeats another file note for note (or has the name of an earlier
#          file of its package: a variant), has an irregular meter (5/8, 7/8, 7/16, 8/8, ...: uneven
#          beats that one beat per note cannot describe), or its notes do not sit on
#          its own grid: fewer than 60 % of the onsets lie within 1/48 quarter note (after a shift of
#          at most 1/48) of a sixteenth or eighth-triplet position (chance: 37.5 %), or a larger shift
#          fits clearly better (the grid is offset from the music). These are played-in files whose
#          tempo map does not describe the music. At most 150 files, taken round-robin over the
#          packages so that no single package dominates. Tempo: bpm = 60 / median inter-beat interval
#          of the truth; qpm = the tempo map's median quarter notes per minute over the music.
#
# Rendering: FluidSynth (Debian fluidsynth, FluidR3_GM.sf2 of fluid-soundfont-gm; reverb and chorus
# on, gain 0.2) to 32-bit float, then sox -R: mono (mean of the channels), peak normalised to -1 dBFS,
# 16-bit with TPDF dither (fixed seed); the trailing part below -60 dBFS is cut. Leading silence is
# kept, so beat times are the MIDI file's own times (FluidSynth plays them within 1.5 ms). FluidSynth
# gets each MIDI file as mido re-encodes it (the same events; FluidSynth silently stops early on some
# original files that mido reads), with one more track: All Notes Off on every channel at the file's
# end, All Sound Off 2 s later (a note that is never released would otherwise make it render forever).
# A beat file whose rendering ends before 90 % of its music is skipped.
#
# Output (DIR is $EARMARK_MUSIC_DATA, else ~/.cache/earmark-music-data):
#   DIR/key/*.wav            44.1 kHz mono 16-bit
#   DIR/key/midi/*.mid       the MIDI that was rendered
#   DIR/key/manifest.tsv     path, tonic (C, C#, Db, ... as spelled in the score), mode (major|minor),
#                            source (music21 corpus path), duration_s, rule, confidence, signature,
#                            encoded_key, final_root, parts
#   DIR/key/crosscheck.tsv   the human Roman-numeral analyses of the corpus against the truth
#   DIR/key/skipped.tsv      corpus files not used, and why
#   DIR/beats/*.wav          44.1 kHz mono 16-bit
#   DIR/beats/*.beats        time_s<TAB>position_in_bar, one beat a line (1 = downbeat)
#   DIR/beats/midi/*.mid     the MIDI that was rendered (decompressed copy of the package's file)
#   DIR/beats/manifest.tsv   path, beats_path, bpm, meter (e.g. 4/4; "3/4,4/4" when it changes),
#                            package, source (path in the package), duration_s, qpm, bpm_min, bpm_max,
#                            tempo_changes, meter_source (file|default), first_beat_s, beats, downbeats,
#                            grid_fit, bar_phase (beats the bar lines are moved from the file's grid)
#   DIR/beats/skipped.tsv    MIDI files of the packages not used, and why
#   DIR/SOURCES.tsv          every source: package, version, origin, used_for, files, licences, copyright
#   DIR/README.txt           this description with the counts of the build
#   DIR/venv/                Python venv with the pinned music21, mido and their dependencies
#   DIR/READY                written last (line 1: set version, line 2: build time, then counts; last:
#                            "beats truth: N", the BEATS_TRUTH version of the beat truth, none for 1)
#
# Deterministic: sorted inputs, pinned Python packages (installed from wheels, no dependency
# resolution), fixed Debian packages (versions in SOURCES.tsv), FluidSynth and sox -R are repeatable.
# Idempotent: with a READY of this set version it only prints DIR; when only its beat truth is older
# than BEATS_TRUTH, it re-derives the *.beats files, the manifest columns from them and README.txt from
# DIR/beats/midi in about a minute (the audio is kept; it checks that every beat time and every other
# column stays as it was). Safe to run concurrently (flock on DIR/.lock). Downloads about 45 MB of
# Debian packages and 62 MB of wheels; installs fluidsynth and fluid-soundfont-gm (150 MB) with
# apt-get when missing (root only). The set is about 3.3 GB (WAV), the venv 330 MB. Takes about
# 15 minutes on 2 cores (most of it FluidSynth). Needs apt-get, dpkg-deb, python3 >= 3.11 with venv
# (or $EARMARK_PYTHON), sox, flock and PyPI.
# Prints DIR on standard output; progress and errors go to standard error.
set -euo pipefail

SET_VERSION="earmark-music-data 1"
# Version of the beat truth (the *.beats files and the manifest columns from them), recorded in READY.
# A ready set with an older one gets its truth re-derived from its MIDI copies; the audio is kept.
# 1: bars from the file's grid; 2: moved by the bar phase.
BEATS_TRUTH=2
PROG=music-data.sh

# Exact versions of everything in the venv (pip install --no-deps), so every machine builds the same.
PY_PINS=(music21==10.5.1 mido==1.3.3
         chardet==7.7.0 joblib==1.6.0 jsonpickle==4.1.4 more-itertools==11.2.1 webcolors==25.10.0
         numpy==2.4.6 requests==2.34.2 certifi==2026.10.18 charset-normalizer==3.5.2 idna==3.20
         urllib3==2.8.0 matplotlib==3.11.2 contourpy==1.3.3 cycler==0.12.1 fonttools==4.68.0
         kiwisolver==1.5.1 packaging==26.3 pillow==13.0.0 pyparsing==3.3.3 python-dateutil==4.0.0
         cloudpickle==3.1.2 tzdata==2026.6)
# Debian packages with MIDI music (game soundtracks, MMA's accompaniment examples, piano lessons).
BEAT_PACKAGES=(simutrans-data openttd-openmsx freedink-data mma pianobooster playmidi
               kobodeluxe-data liquidwar-data pangzero pinball-table-hurd-data)
# Installed (not only downloaded): the synthesizer and its General MIDI sound font.
RENDER_PACKAGES=(fluidsynth fluid-soundfont-gm)
SOUNDFONT=/usr/share/sounds/sf2/FluidR3_GM.sf2

usage() {
  cat <<EOF
usage: tools/$PROG [--verify | --help]

Builds (once) and prints the folder of Earmark's music-analysis evaluation set: Bach chorales
from the music21 corpus with their keys (DIR/key) and MIDI files from Debian packages with beat,
downbeat and tempo truth (DIR/beats), all rendered with FluidSynth to 44.1 kHz mono WAV.

  (no option)  build the set unless it is ready; print its folder
  --verify     check a ready set (manifests, WAV headers and durations, beat files); print its folder
  --help       this text

Environment:
  EARMARK_MUSIC_DATA   the folder (default ~/.cache/earmark-music-data)
  EARMARK_PYTHON       the Python (>= 3.11) for the venv (default python3)

The header of this script describes the truth, the rules and the layout; DIR/README.txt too.
EOF
}

mode=build
case "${1:-}" in
  "") ;;
  --verify) mode=verify ;;
  -h|--help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
[ $# -le 1 ] || { usage >&2; exit 2; }

home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
DIR=${EARMARK_MUSIC_DATA:-$home/.cache/earmark-music-data}
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac
VENV=$DIR/venv
PY=$VENV/bin/python

log() { echo "$PROG: $*" >&2; }
die() { echo "$PROG: error: $*" >&2; exit 1; }
# shellcheck source=tools/rendered-set.sh
. "$(dirname "${BASH_SOURCE[0]}")/rendered-set.sh"

ready() { [ -f "$DIR/READY" ] && [ "$(sed -n 1p "$DIR/READY")" = "$SET_VERSION" ]; }
# The set's beat truth is of version BEATS_TRUTH (a READY without the line is of version 1).
truth_current() { [ "$(sed -n 's/^beats truth: \([0-9]*\).*/\1/p' "$DIR/READY")" = "$BEATS_TRUTH" ]; }

# verify_set DIR: manifests, WAV files (44.1 kHz mono 16-bit, duration as listed) and beat files agree;
# prints the counts to standard error. Standard library only.
verify_set() {
  python3 - "$1" <<'PY'
import os, sys, wave
d = sys.argv[1]
bad = []
def rows(path, header):
    with open(path, encoding="utf-8") as f:
        h = f.readline().rstrip("\n").split("\t")
        if h[:len(header)] != header:
            bad.append(f"{path}: header {h[:len(header)]}")
        return h, [dict(zip(h, line.rstrip("\n").split("\t"))) for line in f if line.strip()]
def check_wav(path, dur):
    try:
        with wave.open(path) as w:
            if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, 44100):
                bad.append(f"{path}: {w.getnchannels()} ch, {8 * w.getsampwidth()} bit, {w.getframerate()} Hz")
            real = w.getnframes() / w.getframerate()
            if abs(real - float(dur)) > 0.01:
                bad.append(f"{path}: {real:.3f} s, manifest says {dur}")
            return real
    except (OSError, EOFError, wave.Error, ValueError) as e:
        bad.append(f"{path}: {e}")
    return 0.0
TONICS = {n + a for n in "ABCDEFG" for a in ("", "#", "b", "##", "bb")}
_, key = rows(os.path.join(d, "key", "manifest.tsv"), ["path", "tonic", "mode", "source", "duration_s"])
modes = {"major": 0, "minor": 0}
for r in key:
    if r.get("tonic") not in TONICS: bad.append(f"{r.get('path')}: tonic {r.get('tonic')!r}")
    if r.get("mode") not in modes: bad.append(f"{r.get('path')}: mode {r.get('mode')!r}")
    else: modes[r["mode"]] += 1
    check_wav(r["path"], r["duration_s"])
_, beats = rows(os.path.join(d, "beats", "manifest.tsv"),
                ["path", "beats_path", "bpm", "meter", "package", "source", "duration_s"])
nbeats = 0
for r in beats:
    real = check_wav(r["path"], r["duration_s"])
    try:
        with open(r["beats_path"], encoding="utf-8") as f:
            b = [line.split("\t") for line in f.read().splitlines()]
        t = [float(x[0]) for x in b]; p = [int(x[1]) for x in b]
    except (OSError, ValueError, IndexError) as e:
        bad.append(f"{r['beats_path']}: {e}"); continue
    nbeats += len(t)
    if len(t) < 16 or any(b2 <= a for a, b2 in zip(t, t[1:])) or t[0] < 0 or t[-1] > real + 1e-3:
        bad.append(f"{r['beats_path']}: {len(t)} beats, not increasing or outside the audio")
    if min(p) < 1 or 1 not in p: bad.append(f"{r['beats_path']}: positions {sorted(set(p))[:8]}")
    if not 20 <= real <= 400: bad.append(f"{r['path']}: {real:.1f} s")
for sub, n in (("key", len(key)), ("beats", len(beats))):
    on_disk = {f for f in os.listdir(os.path.join(d, sub)) if f.endswith(".wav")}
    if len(on_disk) != n: bad.append(f"{sub}: {len(on_disk)} WAV files, {n} in the manifest")
if len(key) < 300: bad.append(f"only {len(key)} chorales (want at least 300)")
if len(beats) < 40: bad.append(f"only {len(beats)} beat files (want at least 40)")
print(f"music-data.sh: key {len(key)} chorales ({modes['major']} major, {modes['minor']} minor); "
      f"beats {len(beats)} files, {nbeats} beats", file=sys.stderr)
for b in bad[:20]: print(f"music-data.sh: BAD {b}", file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

if [ "$mode" = verify ]; then
  ready || die "no ready set of version '$SET_VERSION' in $DIR (run tools/$PROG first)"
  truth_current || die "the beat truth in $DIR predates version $BEATS_TRUTH (run tools/$PROG to update it)"
  verify_set "$DIR" || exit 1
  echo "$DIR"
  exit 0
fi

if ready && truth_current; then
  echo "$DIR"
  exit 0
fi

for tool in apt-get dpkg-deb dpkg-query sox flock; do
  command -v "$tool" >/dev/null || die "$tool is missing (run tools/setup.sh)"
done

mkdir -p "$DIR"
# Several processes may ask at once: one builds, the others wait for it.
exec 9>"$DIR/.lock"
flock -w 3600 9 || die "timed out waiting for $DIR/.lock"
if ready && truth_current; then
  echo "$DIR"
  exit 0
fi
# A ready set whose beat truth is older: only the truth is re-derived (update_truth in build.py).
truth_only=0
ready && truth_only=1

started=$(date +%s)
work=$(mktemp -d "$DIR/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
export TMPDIR=$work/tmp   # music21 and sox scratch files go away with the work folder
mkdir -p "$TMPDIR"

PY_IMPORTS="music21, mido"
[ "$truth_only" = 1 ] || ensure_render_packages
venv_ready || make_venv

if [ "$truth_only" = 0 ]; then
  log "building the music-analysis set (version '$SET_VERSION') in $DIR"
  log "downloading ${BEAT_PACKAGES[*]}"
  download "${BEAT_PACKAGES[@]}"
  printf 'package\tversion\tdeb_bytes\n' >packages.tsv
  unpack_debs packages.tsv "${BEAT_PACKAGES[@]}"
  for pkg in "${RENDER_PACKAGES[@]}"; do
    printf '%s\t0\n' "$(dpkg-query -W -f='${Package}\t${Version}' "$pkg")" >>packages.tsv
  done
  log "downloaded $(awk -F'\t' 'NR > 1 { s += $3 } END { printf "%.1f", s / 1e6 }' packages.tsv) MB"
fi

cat >build.py <<'PY'
# Builds DIR/key and DIR/beats (see the header of tools/music-data.sh). Runs in the venv.
import bisect, collections, glob, gzip, hashlib, io, json, multiprocessing, os, re
import statistics, subprocess, sys, time, wave

WORK, FINAL, SOUNDFONT = sys.argv[1:4]
PACKAGES = sys.argv[4].split()
RENDER_PACKAGES = sys.argv[5].split()
ROOT = os.path.join(WORK, "root")
STAGE = os.path.join(WORK, "out")
JOBS = max(1, min(4, os.cpu_count() or 1))
RATE = 44100
T0 = time.monotonic()

# Key set
DEFAULT_QPM = 80.0
PROGRAMS = {"soprano": 40, "alto": 40, "tenor": 41, "bass": 42}   # GM Violin, Violin, Viola, Cello (0-based)
VOICES = ("soprano", "alto", "tenor", "bass")
# Beat set
MIN_S, MAX_S, MIN_NOTES, MAX_FILES = 20.0, 360.0, 64, 150
GRID_48 = (0, 12, 16, 24, 32, 36, 48)   # sixteenths and eighth triplets, in 48ths of a quarter note
MIN_FIT = 0.60
# Bar phase (see the header): a part's entry votes when it lies within PHASE_TOL beat of a beat; a phase
# wins with at least PHASE_SHARE of the votes and PHASE_MIN_VOTES of them.
PHASE_TOL, PHASE_SHARE, PHASE_MIN_VOTES = 1 / 8, 2 / 3, 2
MIDI_EXT = (".mid", ".midi", ".kar", ".mid.gz", ".midi.gz", ".kar.gz")


class Fail(Exception):
    pass


def log(msg):
    print(f"music-data.sh: [{time.monotonic() - T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout=None):
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Fail(f"{' '.join(cmd)} did not finish in {timeout} s")
    if p.returncode != 0:
        raise Fail(f"{' '.join(cmd)} failed (exit {p.returncode}): {p.stderr.decode(errors='replace').strip()[-500:]}")
    return p.stdout


def playable(data):
    """The MIDI file as FluidSynth gets it: re-encoded by mido (the parser of the truth; FluidSynth
    silently stops on some files that mido reads, e.g. freedink-data's 104.mid), plus one track that
    sends All Notes Off on every channel at the file's last tick and All Sound Off 2 s later
    (FluidSynth renders forever while a note that was never released sustains)."""
    import mido
    mf = load_midi(data)
    end = max(sum(msg.time for msg in tr) for tr in mf.tracks)
    t, us = 0, 500000
    for msg in mido.merge_tracks(mf.tracks):
        t += msg.time
        if msg.type == "set_tempo":
            us = msg.tempo
    tail = max(1, round(2.0 * 1e6 / us * mf.ticks_per_beat))
    off = mido.MidiTrack()
    for ch in range(16):
        off.append(mido.Message("control_change", channel=ch, control=123, value=0, time=end if ch == 0 else 0))
    for ch in range(16):
        off.append(mido.Message("control_change", channel=ch, control=120, value=0, time=tail if ch == 0 else 0))
    off.append(mido.MetaMessage("end_of_track", time=0))
    if mf.type == 0:
        mf.type = 1
    mf.tracks.append(off)
    buf = io.BytesIO()
    mf.save(file=buf)
    return buf.getvalue()


def render(mid, wav):
    """FluidSynth -> float WAV -> sox -R: mono, peak -1 dBFS, 16 bit; trailing part below -60 dBFS cut.
    Returns the duration in seconds."""
    tmp, play = wav + ".f32.wav", wav + ".play.mid"
    try:
        with open(mid, "rb") as f:
            data = playable(f.read())
        with open(play, "wb") as f:
            f.write(data)
        run(["fluidsynth", "-n", "-i", "-q", "-R", "1", "-C", "1", "-g", "0.2", "-r", str(RATE),
             "-O", "float", "-T", "wav", "-F", tmp, SOUNDFONT, play], timeout=1200)
        run(["sox", "-V1", "-R", tmp, "-b", "16", "-e", "signed-integer", wav, "channels", "1", "gain", "-n", "-1"])
    finally:
        for x in (tmp, play):
            if os.path.exists(x):
                os.remove(x)
    import numpy as np
    with wave.open(wav) as w:
        n = w.getnframes()
        x = np.frombuffer(w.readframes(n), dtype="<i2")
    loud = np.flatnonzero(np.abs(x.astype(np.int32)) > 32768 * 10 ** (-60 / 20))
    if len(loud) == 0:
        raise Fail(f"{mid} rendered to silence")
    end = int(loud[-1]) + 1
    if end < n:
        with wave.open(wav, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(x[:end].tobytes())
    return end / RATE


def fmt(x, nd=3):
    return f"{x:.{nd}f}"


def reason_kind(reason):
    """A skip reason without its particulars, for counting: 'only 46 notes' -> 'only N notes'."""
    r = reason.split(":")[0]
    return "duplicate" if r.startswith("duplicate") else re.sub(r"\d+(\.\d+)?", "N", r)


def write_tsv(path, header, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\t".join(header) + "\n")
        for r in rows:
            f.write("\t".join(str(r.get(h, "")) for h in header) + "\n")


# ------------------------------------------------------------------ key set
def spelled(name):
    """music21 pitch name (B-, F#, E--) -> B b, F#, Ebb."""
    return name.replace("-", "b")


def voice_of(part_name, index, unnamed):
    name = (part_name or "").strip().lower()
    for v in VOICES:
        if name.startswith(v):
            return v
    if unnamed:
        return VOICES[index]
    return None


def chorale_prepare(args):
    """Parses one corpus file, finds its key by the rules and writes its MIDI. Returns a dict."""
    path, rel, midi_dir = args
    from music21 import chord, converter, key, midi as m21midi
    import mido
    out = {"source": rel, "id": os.path.splitext(os.path.basename(rel))[0]}
    try:
        score = converter.parse(path, forceSource=True)
    except Exception as e:   # music21 raises many kinds
        out["skip"] = f"does not parse: {type(e).__name__}: {str(e)[:120]}"
        return out
    parts = list(score.parts)
    unnamed = len(parts) == 4 and not any((p.partName or "").strip() for p in parts)
    vocal = [(voice_of(p.partName, i, unnamed), p) for i, p in enumerate(parts)]
    vocal = [(v, p) for v, p in vocal if v]
    if {v for v, _ in vocal} != set(VOICES):
        out["skip"] = "not a chorale: no Soprano, Alto, Tenor and Bass parts (" + \
            ", ".join((p.partName or "?").replace("\r", " ") for p in parts) + ")"
        return out
    # Fingerprint of the vocal parts (duplicates are skipped by the caller).
    h = hashlib.sha1()
    for _, p in vocal:
        for n in p.flatten().notes:
            h.update(f"{float(n.offset):.4f}:{','.join(str(x.midi) for x in n.pitches)}:{float(n.quarterLength):.4f};".encode())
        h.update(b"|")
    out["fingerprint"] = h.hexdigest()

    # Evidence: signature, encoded mode, final chord.
    first_ks = []
    for v, p in vocal:
        ks = p.recurse().getElementsByClass(key.KeySignature)
        first_ks.append((v, ks[0] if ks else None))
    sharps = [k.sharps for _, k in first_ks if k is not None]
    if not sharps:
        sig = 0
    else:
        counts = collections.Counter(sharps).most_common()
        top = [s for s, c in counts if c == counts[0][1]]
        bass_ks = next((k for v, k in first_ks if v == "bass" and k is not None), None)
        sig = bass_ks.sharps if len(top) > 1 and bass_ks is not None and bass_ks.sharps in top else top[0]
    # The mode as written, in any part (instrumental ones too) with that signature.
    modes = []
    for p in parts:
        pks = p.recurse().getElementsByClass(key.KeySignature)
        if pks and isinstance(pks[0], key.Key) and pks[0].sharps == sig and pks[0].mode in ("major", "minor"):
            modes.append(pks[0].mode)
    encoded = "minor" if "minor" in modes else "major" if "major" in modes else None
    ks = key.KeySignature(sig)
    M, m = ks.asKey("major").tonic, ks.asKey("minor").tonic
    firsts, finals = [], []
    for _, p in vocal:
        notes = list(p.flatten().notes)
        if notes:
            firsts.extend(notes[0].pitches)
            finals.extend(notes[-1].pitches)
    if not finals:
        out["skip"] = "no notes"
        return out
    fc = chord.Chord(finals)
    root = fc.root()
    rpc = root.pitchClass
    first = chord.Chord(firsts).root()
    enc_tonic = ks.asKey(encoded).tonic if encoded else None

    def iv(a, b):   # semitones from pitch b up to pitch class a
        return (a - b.pitchClass) % 12

    if encoded and enc_tonic.pitchClass == rpc:
        tonic, mode, rule, conf = enc_tonic.name, encoded, "encoded", "high"
    elif encoded is None and rpc == M.pitchClass:
        tonic, mode, rule, conf = M.name, "major", "final-chord", "high"
    elif encoded is None and rpc == m.pitchClass:
        tonic, mode, rule, conf = m.name, "minor", "final-chord", "high"
    elif encoded == "major" and rpc == m.pitchClass:
        tonic, mode, rule, conf = m.name, "minor", "final-chord-over-major", "medium"
    elif encoded == "minor" and rpc == M.pitchClass and first.pitchClass == rpc:
        tonic, mode, rule, conf = M.name, "major", "relative-major-frame", "medium"
    elif iv(rpc, m) == 5:
        tonic, mode, rule, conf = root.name, "minor", "dorian-signature", "medium"
    elif iv(rpc, m) == 7:
        tonic, mode, rule, conf = m.name, "minor", "phrygian-ending", "medium"
    elif iv(rpc, M) == 7 and first.pitchClass == rpc:
        tonic, mode, rule, conf = root.name, "major", "mixolydian-signature", "medium"
    elif iv(rpc, M) == 7:
        tonic, mode = (enc_tonic.name, encoded) if encoded else (M.name, "major")
        rule, conf = "half-cadence-ending", "low"
    elif encoded:
        tonic, mode, rule, conf = enc_tonic.name, encoded, "encoded-unconfirmed", "low"
    else:
        q = fc.quality
        tonic, mode, rule, conf = root.name, "minor" if q == "minor" else "major", "final-root-only", "low"
    out.update(tonic=spelled(tonic), mode=mode, rule=rule, confidence=conf, signature=str(sig),
               encoded_key=f"{spelled(enc_tonic.name)} {encoded}" if encoded else "-",
               first_root=spelled(first.name), final_root=f"{spelled(root.name)} {fc.quality}",
               parts=",".join(v for v, _ in vocal))

    # Tempo: the first numeric metronome mark, else the default.
    from music21 import tempo
    qpm = DEFAULT_QPM
    for mm in score.flatten().getElementsByClass(tempo.MetronomeMark):
        if mm.number is not None:
            qpm = float(mm.getQuarterBPM())
            break
    out["qpm"] = qpm

    # MIDI: music21 writes one track per part (after a conductor track); then every part gets its own
    # channel and its program, and the conductor one tempo.
    # Grace notes (zero duration) are not played: music21 writes them as a note-off before the
    # note-on at the same tick, a note that never ends.
    from music21 import stream
    s = stream.Score()
    for _, p in vocal:
        for n in list(p.recurse().notes):
            if n.duration.isGrace or n.quarterLength == 0:
                n.activeSite.remove(n)
        s.insert(0, p)
    mf = m21midi.translate.music21ObjectToMidiFile(s)
    m = mido.MidiFile(file=io.BytesIO(mf.writestr()))
    note_tracks = [i for i, tr in enumerate(m.tracks) if any(x.type == "note_on" for x in tr)]
    if len(note_tracks) != len(vocal):
        out["skip"] = f"music21 wrote {len(note_tracks)} note tracks for {len(vocal)} parts"
        return out
    conductor = mido.MidiTrack()
    conductor.append(mido.MetaMessage("set_tempo", tempo=mido.bpm2tempo(qpm), time=0))
    carry = 0
    for i, tr in enumerate(m.tracks):
        new = mido.MidiTrack()
        if i in note_tracks:
            k = note_tracks.index(i)
            ch = k if k < 9 else k + 1
            new.append(mido.Message("program_change", channel=ch, program=PROGRAMS[vocal[k][0]], time=0))
        carry = 0
        for msg in tr:
            if msg.type in ("set_tempo", "program_change") or (msg.is_meta and msg.type == "end_of_track"):
                carry += msg.time
                continue
            msg = msg.copy(time=msg.time + carry)
            carry = 0
            if i in note_tracks and not msg.is_meta and hasattr(msg, "channel"):
                msg = msg.copy(channel=ch)
            (conductor if i not in note_tracks and msg.is_meta else new).append(msg)
        new.append(mido.MetaMessage("end_of_track", time=carry))
        m.tracks[i] = new
    # Tempo first, in a track of its own that also keeps the time signatures.
    conductor.append(mido.MetaMessage("end_of_track", time=0))
    m.tracks = [conductor] + [m.tracks[i] for i in note_tracks]
    for tr in m.tracks:
        t, on = 0, collections.Counter()
        for msg in tr:
            t += msg.time
            if msg.type == "note_on" and msg.velocity > 0:
                on[(msg.channel, msg.note)] += 1
            elif msg.type in ("note_on", "note_off"):
                if on[(msg.channel, msg.note)] == 0:
                    out["skip"] = f"music21 wrote a note-off without note-on at tick {t}"
                    return out
                on[(msg.channel, msg.note)] -= 1
        if any(on.values()):
            out["skip"] = "music21 wrote a note that never ends"
            return out
    mid = os.path.join(midi_dir, out["id"] + ".mid")
    m.save(mid)
    out["mid"] = mid
    return out


def chorale_render(args):
    mid, wav = args
    return render(mid, wav)


def crosscheck(corpus_dir, by_source):
    """The human analyses (riemenschneider*.rntxt) against the truth of the same BWV number."""
    from music21 import converter, roman
    rows = []
    for f in sorted(glob.glob(os.path.join(corpus_dir, "bach", "choraleAnalyses", "*.rntxt"))):
        with open(f, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        bwv = re.search(r"^BWV:\s*(\S+)", text, re.M)
        if not bwv:
            continue
        bwv = bwv.group(1)
        try:
            rns = list(converter.parse(f, format="romantext").recurse().getElementsByClass(roman.RomanNumeral))
        except Exception:
            continue
        if not rns:
            continue
        k = rns[0].key
        analysis = f"{spelled(k.tonic.name)} {k.mode}"
        part = re.fullmatch(r"(\d+)\((\d+)\)\.(\d+)", bwv)   # 248(2).12 is bwv248.12-2 in the corpus
        stem = f"bwv{part[1]}.{part[3]}-{part[2]}" if part else "bwv" + bwv.rstrip("s")
        truth = next((r for s, r in sorted(by_source.items()) if os.path.splitext(os.path.basename(s))[0] == stem), None)
        row = {"analysis": os.path.relpath(f, corpus_dir), "bwv": bwv, "analysis_key": analysis,
               "analysis_last_chord": rns[-1].figure}
        if truth:
            t = f"{truth['tonic']} {truth['mode']}"
            row.update(source=truth["source"], truth_key=t, rule=truth["rule"],
                       agrees="yes" if t == analysis else "mode" if truth["mode"] == k.mode else "no")
        else:
            row.update(source="-", truth_key="-", rule="-", agrees="-")
        rows.append(row)
    return rows


def build_key(pool):
    import music21
    from music21 import corpus
    corpus_dir = os.path.dirname(corpus.__file__)
    paths = sorted({str(p) for p in corpus.getComposer("bach")})
    files, skipped = [], []
    stems = {os.path.splitext(p)[0] for p in paths if p.endswith((".mxl", ".xml", ".musicxml"))}
    for p in paths:
        rel = os.path.relpath(p, corpus_dir)
        if p.endswith(".rntxt"):
            continue   # Roman-numeral analyses: used for crosscheck.tsv only
        if not p.endswith((".mxl", ".xml", ".musicxml", ".krn")):
            skipped.append({"source": rel, "reason": "not a score format used here"})
        elif p.endswith(".krn") and os.path.splitext(p)[0] in stems:
            skipped.append({"source": rel, "reason": "duplicate: the same chorale as MusicXML"})
        else:
            files.append((p, rel))
    log(f"key: {len(files)} chorale scores in the music21 {music21.__version__} corpus; parsing")
    midi_dir = os.path.join(STAGE, "key", "midi")
    os.makedirs(midi_dir, exist_ok=True)
    prepared = pool.map(chorale_prepare, [(p, rel, midi_dir) for p, rel in files], chunksize=4)
    kept, seen = [], {}
    for r in prepared:
        if "skip" in r:
            skipped.append({"source": r["source"], "reason": r["skip"]})
        elif r["fingerprint"] in seen:
            skipped.append({"source": r["source"], "reason": f"duplicate: the same notes as {seen[r['fingerprint']]}"})
            os.remove(r["mid"])
        else:
            seen[r["fingerprint"]] = r["source"]
            kept.append(r)
    ids = collections.Counter(r["id"] for r in kept)
    if any(c > 1 for c in ids.values()):
        raise Fail(f"two chorales share a name: {[i for i, c in ids.items() if c > 1]}")
    log(f"key: {len(kept)} chorales to render ({len(skipped)} files skipped); rendering")
    wavs = [os.path.join(STAGE, "key", r["id"] + ".wav") for r in kept]
    durs = pool.map(chorale_render, [(r["mid"], w) for r, w in zip(kept, wavs)], chunksize=2)
    rows = []
    for r, dur in zip(kept, durs):
        r.update(path=os.path.join(FINAL, "key", r["id"] + ".wav"), duration_s=fmt(dur))
        rows.append(r)
    write_tsv(os.path.join(STAGE, "key", "manifest.tsv"),
              ["path", "tonic", "mode", "source", "duration_s", "rule", "confidence", "signature",
               "encoded_key", "first_root", "final_root", "parts"], rows)
    write_tsv(os.path.join(STAGE, "key", "skipped.tsv"), ["source", "reason"], sorted(skipped, key=lambda r: r["source"]))
    cc = crosscheck(corpus_dir, {r["source"]: r for r in rows})
    write_tsv(os.path.join(STAGE, "key", "crosscheck.tsv"),
              ["analysis", "bwv", "analysis_key", "analysis_last_chord", "source", "truth_key", "rule", "agrees"], cc)
    stats = {
        "chorales": len(rows),
        "major": sum(r["mode"] == "major" for r in rows),
        "minor": sum(r["mode"] == "minor" for r in rows),
        "rules": dict(collections.Counter(r["rule"] for r in rows).most_common()),
        "confidence": dict(collections.Counter(r["confidence"] for r in rows).most_common()),
        "skipped": dict(collections.Counter(reason_kind(s["reason"]) for s in skipped).most_common()),
        "crosscheck": dict(collections.Counter(c["agrees"] for c in cc).most_common()),
        "duration_s": round(sum(float(r["duration_s"]) for r in rows), 1),
        "music21": music21.__version__,
        "qpm": sorted({r["qpm"] for r in rows}),
    }
    log(f"key: {stats['chorales']} chorales ({stats['major']} major, {stats['minor']} minor); rules {stats['rules']}; "
        f"human analyses agree {stats['crosscheck']}")
    return stats


# ------------------------------------------------------------------ beat set
def load_midi(data):
    import mido
    from mido.midifiles import meta

    class MetaSpec_key_signature(meta.MetaSpec_key_signature):
        """A key signature mido cannot decode (e.g. mode 255 in two simutrans files) becomes C:
        keys play no part here."""
        def decode(self, message, data):
            try:
                super().decode(message, data)
            except meta.KeySignatureError:
                message.key = "C"

    meta.add_meta_spec(MetaSpec_key_signature)
    return mido.MidiFile(file=io.BytesIO(data), clip=True)


class TempoMap:
    def __init__(self, tpq, tempos):
        self.tpq, self.ticks, self.us = tpq, [t for t, _ in tempos], [u for _, u in tempos]
        self.secs = [0.0]
        for i in range(1, len(tempos)):
            self.secs.append(self.secs[-1] + (self.ticks[i] - self.ticks[i - 1]) * self.us[i - 1] / 1e6 / tpq)

    def sec(self, tick):
        i = bisect.bisect_right(self.ticks, tick) - 1
        return self.secs[i] + (tick - self.ticks[i]) * self.us[i] / 1e6 / self.tpq


def analyse_midi(data):
    """Tempo map, time signatures and notes of a standard MIDI file (all tracks merged), and the entry
    (first note-on tick) of every part: a track's notes on one channel."""
    import mido
    mf = load_midi(data)
    tpq = mf.ticks_per_beat
    entries = {}
    for k, track in enumerate(mf.tracks):
        t = 0
        for msg in track:
            t += msg.time
            if msg.type == "note_on" and msg.velocity > 0:
                entries.setdefault((k, msg.channel), t)
    tempos, sigs, notes, t, last_off = [(0, 500000)], [], [], 0, 0
    for msg in mido.merge_tracks(mf.tracks):
        t += msg.time
        if msg.type == "set_tempo":
            if tempos[-1][0] == t:
                tempos[-1] = (t, msg.tempo)
            else:
                tempos.append((t, msg.tempo))
        elif msg.type == "time_signature":
            if sigs and sigs[-1][0] == t:
                sigs[-1] = (t, msg.numerator, msg.denominator)
            elif not sigs or sigs[-1][1:] != (msg.numerator, msg.denominator):
                sigs.append((t, msg.numerator, msg.denominator))
        elif msg.type == "note_on" and msg.velocity > 0:
            notes.append((t, msg.channel, msg.note))
        elif msg.type in ("note_on", "note_off"):
            last_off = max(last_off, t)
    if notes:
        last_off = max(last_off, notes[-1][0])
    return {"tpq": tpq, "tempos": tempos, "sigs": sigs, "notes": notes, "last_off": last_off,
            "entries": sorted(entries.values()), "map": TempoMap(tpq, tempos)}


def sections(a):
    """(start tick, numerator, denominator, beats per bar, ticks per beat) of every time signature;
    MIDI's default 4/4 before the first one."""
    sigs = list(a["sigs"]) or [(0, 4, 4)]
    if sigs[0][0] != 0:
        sigs.insert(0, (0, 4, 4))
    out = []
    for t0, num, den in sigs:
        compound = den >= 8 and num % 3 == 0 and num > 3
        out.append((t0, num, den, num // 3 if compound else num, a["tpq"] * 4 / den * (3 if compound else 1)))
    return out


def bar_phase(a):
    """Whole beats from the file's bar lines to the music's: the beat in the bar (0 = the file's
    downbeat) on which the parts enter, when they clearly agree; else 0 (see the header)."""
    secs = sections(a)
    votes = collections.Counter()
    for tick in a["entries"]:
        t0, _, _, per_bar, step = secs[bisect.bisect_right([s[0] for s in secs], tick) - 1]
        b = (tick - t0) / step
        if abs(b - round(b)) <= PHASE_TOL:
            votes[round(b) % per_bar] += 1
    if not votes:
        return 0
    phase, n = votes.most_common(1)[0]
    return phase if n >= PHASE_MIN_VOTES and n >= PHASE_SHARE * sum(votes.values()) else 0


def beat_grid(a, until_tick, phase=0):
    """(tick, position in bar, meter) of every beat up to until_tick; bars restart at every time
    signature, moved by phase beats (bar_phase)."""
    secs = sections(a)
    out = []
    for i, (t0, num, den, per_bar, step) in enumerate(secs):
        t1 = secs[i + 1][0] if i + 1 < len(secs) else until_tick + 1
        k = 0
        while True:
            tick = t0 + k * step
            if tick >= t1 or tick > until_tick:
                break
            out.append((tick, (k - phase) % per_bar + 1, f"{num}/{den}"))
            k += 1
    return out


def grid_fit(a, shift):
    """Share of note onsets within 1/48 quarter of a sixteenth or eighth-triplet position, after
    moving the onsets by shift/48 quarter."""
    tpq, n = a["tpq"], 0
    for t, _, _ in a["notes"]:
        ph = ((t % tpq) / tpq * 48 + shift) % 48
        if min(abs(ph - g) for g in GRID_48) <= 1.0:
            n += 1
    return n / len(a["notes"])


def midi_candidates():
    """Every MIDI file of the packages, sorted by package and path."""
    out = []
    for pkg in PACKAGES:
        top = os.path.join(ROOT, pkg)
        for d, _, names in os.walk(top):
            for n in names:
                if n.lower().endswith(MIDI_EXT):
                    out.append((pkg, "/" + os.path.relpath(os.path.join(d, n), top)))
    return sorted(out)


def stem_of(pkg, src):
    base = os.path.basename(src)
    base = re.sub(r"\.(gz)$", "", base, flags=re.I)
    base = os.path.splitext(base)[0]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{pkg}-{base}").strip("-")


def examine(pkg, src):
    """Reads one candidate; returns (info, None) or (None, reason)."""
    path = os.path.join(ROOT, pkg, src.lstrip("/"))
    if os.path.islink(path) and not os.path.exists(path):
        return None, "dangling symlink"
    with open(path, "rb") as f:
        data = f.read()
    if path.lower().endswith(".gz"):
        data = gzip.decompress(data)
    try:
        a = analyse_midi(data)
    except Exception as e:   # mido raises several kinds on broken files
        return None, f"unreadable: {type(e).__name__}: {str(e)[:100]}"
    if len(a["notes"]) < MIN_NOTES:
        return None, f"only {len(a['notes'])} notes"
    tm = a["map"]
    first = min(t for t, _, _ in a["notes"])
    end_s = tm.sec(a["last_off"])
    if end_s < MIN_S:
        return None, f"too short: {end_s:.1f} s"
    if end_s > MAX_S:
        return None, f"too long: {end_s:.1f} s"
    fits = {s: grid_fit(a, s) for s in range(-6, 7)}
    near = max(fits[-1], fits[0], fits[1])
    best = max(fits.values())
    if near < MIN_FIT:
        return None, f"notes off the grid: {100 * near:.0f} % on it"
    if best - near > 0.10:
        return None, f"grid offset from the music: {100 * near:.0f} % on it, {100 * best:.0f} % when moved"
    phase = bar_phase(a)
    grid = beat_grid(a, a["last_off"], phase)
    beats = [g for g in grid if g[0] >= first]
    if len(beats) < 16:
        return None, f"only {len(beats)} beats"
    for meter in dict.fromkeys(m for _, _, m in beats):
        num, den = map(int, meter.split("/"))
        if den >= 8 and num >= 5 and num % 3:
            return None, f"irregular meter {meter} (uneven beats)"
    fp = hashlib.sha1(repr(sorted((round(tm.sec(t), 2), n) for t, _, n in a["notes"])).encode()).hexdigest()
    return {"pkg": pkg, "src": src, "data": data, "a": a, "beats": beats, "first": first, "end_s": end_s,
            "phase": phase, "fit": near, "fingerprint": fp, "md5": hashlib.md5(data).hexdigest()}, None


BEAT_MANIFEST = ["path", "beats_path", "bpm", "meter", "package", "source", "duration_s", "qpm", "bpm_min",
                 "bpm_max", "tempo_changes", "meter_source", "first_beat_s", "beats", "downbeats", "grid_fit",
                 "bar_phase"]


def timed_beats(a, grid):
    """(time_s, position, meter) of grid beats."""
    return [(a["map"].sec(t), pos, meter) for t, pos, meter in grid]


def write_beats(path, beats):
    with open(path, "w", encoding="utf-8") as f:
        for t, pos, _ in beats:
            f.write(f"{t:.4f}\t{pos}\n")


def beat_columns(a, first, beats, phase):
    """The manifest columns that come from the truth of one file."""
    ibi = [b2[0] - b1[0] for b1, b2 in zip(beats, beats[1:])]
    meters = list(dict.fromkeys(m for _, _, m in beats))
    # Tempo map over the music: quarter notes per minute, weighted by time.
    tm, t_first, t_end = a["map"], first, a["last_off"]
    spans = []
    tempos = a["tempos"]
    for k, (t0, us) in enumerate(tempos):
        t1 = tempos[k + 1][0] if k + 1 < len(tempos) else t_end
        lo, hi = max(t0, t_first), min(t1, t_end)
        if hi > lo:
            spans.append((60e6 / us, tm.sec(hi) - tm.sec(lo)))
    spans.sort()
    half, acc, qpm = sum(w for _, w in spans) / 2, 0.0, spans[0][0] if spans else 120.0
    for q, w in spans:
        acc += w
        if acc >= half:
            qpm = q
            break
    return {
        "bpm": fmt(60 / statistics.median(ibi), 2), "meter": ",".join(meters),
        "qpm": fmt(qpm, 2), "bpm_min": fmt(60 / max(ibi), 2), "bpm_max": fmt(60 / min(ibi), 2),
        "tempo_changes": len({q for q, _ in spans}) - 1 if spans else 0,
        "meter_source": "file" if a["sigs"] else "default",
        "first_beat_s": fmt(beats[0][0]), "beats": len(beats), "downbeats": sum(1 for b in beats if b[1] == 1),
        "bar_phase": phase,
    }


def beats_render(args):
    mid, wav = args
    return render(mid, wav)


def build_beats(pool):
    cands = midi_candidates()
    log(f"beats: {len(cands)} MIDI files in {len(PACKAGES)} packages")
    ok, skipped, seen = [], [], {}
    for pkg, src in cands:
        info, why = examine(pkg, src)
        if info is None:
            skipped.append({"package": pkg, "source": src, "reason": why})
            continue
        name = (pkg, stem_of(pkg, src).lower())
        dup = seen.get(info["md5"]) or seen.get(info["fingerprint"]) or seen.get(name)
        if dup:
            skipped.append({"package": pkg, "source": src, "reason": f"duplicate of {dup}"})
            continue
        seen[info["md5"]] = seen[info["fingerprint"]] = seen[name] = f"{pkg}:{src}"
        ok.append(info)
    # Round-robin over the packages (sorted), each in path order, up to MAX_FILES.
    by_pkg = collections.OrderedDict((p, [i for i in ok if i["pkg"] == p]) for p in sorted({i["pkg"] for i in ok}))
    chosen = []
    r = 0
    while len(chosen) < MAX_FILES and any(r < len(v) for v in by_pkg.values()):
        for v in by_pkg.values():
            if r < len(v) and len(chosen) < MAX_FILES:
                chosen.append(v[r])
        r += 1
    taken = {id(i) for i in chosen}
    for i in ok:
        if id(i) not in taken:
            skipped.append({"package": i["pkg"], "source": i["src"], "reason": f"over the cap of {MAX_FILES} files"})
    chosen.sort(key=lambda i: (i["pkg"], i["src"]))
    names = collections.Counter()
    mdir = os.path.join(STAGE, "beats", "midi")
    os.makedirs(mdir, exist_ok=True)
    jobs = []
    for i in chosen:
        stem = stem_of(i["pkg"], i["src"])
        names[stem] += 1
        if names[stem] > 1:
            stem = f"{stem}-{names[stem]}"
        i["id"] = stem
        i["mid"] = os.path.join(mdir, stem + ".mid")
        with open(i["mid"], "wb") as f:
            f.write(i["data"])
        jobs.append((i["mid"], os.path.join(STAGE, "beats", stem + ".wav")))
    log(f"beats: {len(chosen)} files to render ({len(skipped)} skipped); rendering")
    durs = pool.map(beats_render, jobs, chunksize=1)
    rows = []
    for i, dur in zip(chosen, durs):
        beats = [b for b in timed_beats(i["a"], i["beats"]) if b[0] <= dur]
        if dur < MIN_S or len(beats) < 16 or dur < 0.9 * i["end_s"]:
            skipped.append({"package": i["pkg"], "source": i["src"],
                            "reason": f"rendered {dur:.1f} s of {i['end_s']:.1f} s, {len(beats)} beats"})
            os.remove(os.path.join(STAGE, "beats", i["id"] + ".wav"))
            os.remove(i["mid"])
            continue
        write_beats(os.path.join(STAGE, "beats", i["id"] + ".beats"), beats)
        rows.append({
            "path": os.path.join(FINAL, "beats", i["id"] + ".wav"),
            "beats_path": os.path.join(FINAL, "beats", i["id"] + ".beats"),
            "package": i["pkg"], "source": i["src"], "duration_s": fmt(dur), "grid_fit": fmt(i["fit"], 2),
            **beat_columns(i["a"], i["first"], beats, i["phase"]),
        })
    write_tsv(os.path.join(STAGE, "beats", "manifest.tsv"), BEAT_MANIFEST, rows)
    write_tsv(os.path.join(STAGE, "beats", "skipped.tsv"), ["package", "source", "reason"],
              sorted(skipped, key=lambda r: (r["package"], r["source"])))
    bpms = [float(r["bpm"]) for r in rows]
    stats = {
        "files": len(rows),
        "per_package": dict(collections.Counter(r["package"] for r in rows)),
        "bpm_min": min(bpms), "bpm_max": max(bpms), "bpm_median": statistics.median(bpms),
        "meters": dict(collections.Counter(r["meter"] for r in rows).most_common()),
        "tempo_changing": sum(1 for r in rows if r["tempo_changes"] > 0),
        "beats": sum(r["beats"] for r in rows),
        "duration_s": round(sum(float(r["duration_s"]) for r in rows), 1),
        "skipped": dict(collections.Counter(reason_kind(s["reason"]) for s in skipped).most_common()),
        "files_used": collections.Counter(r["package"] for r in rows),
    }
    log(f"beats: {stats['files']} files, {stats['beats']} beats, {stats['bpm_min']:.0f}-{stats['bpm_max']:.0f} bpm, "
        f"meters {stats['meters']}")
    return stats


# ------------------------------------------------------------------ sources
LICENCE_WORDS = [
    (r"GNU Lesser General Public License|LGPL", "LGPL"), (r"GNU General Public License|\bGPL", "GPL"),
    (r"provided 'as-is'", "zlib"), (r"\bMIT\b|Expat", "MIT"), (r"\bBSD\b", "BSD"), (r"Artistic", "Artistic"),
    (r"Creative Commons|CC-BY", "CC-BY"), (r"public domain", "public-domain"),
]


def copyright_summary(path):
    """(licences, copyright) from a Debian copyright file: DEP-5 License short names in order, and the
    Copyright of the 'Files: *' paragraph; free-form files: licence words and the first copyright lines."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return "-", "-"
    if text.startswith("Format:"):
        lic, copy, first_copy = [], "", ""
        for para in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"^([A-Za-z-]+):[ \t]*(.*(?:\n[ \t]+.*)*)", para, re.M))
            value = " ".join(x.strip() for x in fields.get("Copyright", "").split("\n") if x.strip())
            first_copy = first_copy or value
            if "License" in fields and ("Files" in fields or "Format" in fields):
                name = fields["License"].split("\n")[0].strip()
                if name and name not in lic:
                    lic.append(name)
                if fields.get("Files", "*").split()[:1] == ["*"] and not copy:
                    copy = value
        return ", ".join(lic) or "-", (copy or first_copy or "-")[:300]
    lic = []
    for pat, name in LICENCE_WORDS:
        if re.search(pat, text, re.I) and name not in lic:
            lic.append(name)
    copy = [l.strip() for l in text.splitlines() if re.search(r"copyright\s*(\(c\)|©)?\s*(\d{4}|\(c\))", l, re.I)]
    return ", ".join(lic) or "-", "; ".join(copy[:3])[:300] or "-"


def write_sources(key_stats, beat_stats):
    import music21
    from importlib import metadata
    versions = {}
    with open(os.path.join(WORK, "packages.tsv"), encoding="utf-8") as f:
        next(f)
        for line in f:
            p, v, _ = line.rstrip("\n").split("\t")
            versions[p] = v
    rows = []
    m21 = metadata.metadata("music21")
    rows.append({"package": "music21", "version": music21.__version__, "origin": "PyPI", "used_for": "key",
                 "files": key_stats["chorales"],
                 "licences": (m21.get("License-Expression") or m21.get("License") or "-") +
                 "; corpus: public-domain works, encodings distributed with permission (music21/corpus/license.txt)",
                 "copyright": (m21.get("Author") or m21.get("Author-email") or "-") +
                 "; Bach chorale encodings: see the corpus files"})
    md = metadata.metadata("mido")
    rows.append({"package": "mido", "version": metadata.version("mido"), "origin": "PyPI", "used_for": "beats (MIDI parsing)",
                 "files": 0, "licences": md.get("License-Expression") or md.get("License") or "MIT",
                 "copyright": md.get("Author") or md.get("Author-email") or "-"})
    for pkg in PACKAGES:
        lic, copy = copyright_summary(os.path.join(ROOT, pkg, "usr", "share", "doc", pkg, "copyright"))
        rows.append({"package": pkg, "version": versions.get(pkg, "-"), "origin": "Debian", "used_for": "beats",
                     "files": beat_stats["files_used"].get(pkg, 0), "licences": lic, "copyright": copy})
    for pkg in RENDER_PACKAGES:
        lic, copy = copyright_summary(os.path.join("/usr/share/doc", pkg, "copyright"))
        rows.append({"package": pkg, "version": versions.get(pkg, "-"), "origin": "Debian (installed)",
                     "used_for": "rendering", "files": 0, "licences": lic, "copyright": copy})
    for r in rows:
        for k in r:
            r[k] = str(r[k]).replace("\t", " ").replace("\n", " ")
    write_tsv(os.path.join(STAGE, "SOURCES.tsv"),
              ["package", "version", "origin", "used_for", "files", "licences", "copyright"], rows)


# The beat truth in README.txt; update_truth replaces it (from "manifest.tsv" to "Files whose").
README_BEATS_TRUTH = """        manifest.tsv: path, beats_path, bpm, meter, package, source, duration_s, qpm, bpm_min, bpm_max,
        tempo_changes, meter_source, first_beat_s, beats, downbeats, grid_fit, bar_phase
        *.beats: time_s<TAB>position_in_bar (1 = downbeat), from the file's tempo map and time signatures:
        a beat per denominator note (compound 6/8, 9/8, 12/8: per dotted quarter); bars start at every
        time signature, moved by bar_phase beats when the parts clearly agree on entering on another beat
        of the file's bar (MMA's songs: the music starts one beat into the file's 4/4 grid); beats before
        the first note and after the last are dropped. bpm = 60 / median inter-beat interval; qpm = the
        tempo map's time-weighted median in quarter notes per minute."""
README_BEATS_TRUTH_OLD = r"        manifest\.tsv: path, beats_path.*?quarter notes per minute\.\s*Files whose"


def update_truth():
    """Re-derives the beat truth of the ready set FINAL from its MIDI copies (beats/midi): the *.beats
    files, the manifest columns that come from them and README.txt; the audio stays. Writes nothing
    unless every file keeps its beat times and all other columns (only positions in the bar may change)."""
    bdir = os.path.join(FINAL, "beats")
    with open(os.path.join(bdir, "manifest.tsv"), encoding="utf-8") as f:
        head = f.readline().rstrip("\n").split("\t")
        rows = [dict(zip(head, line.rstrip("\n").split("\t"))) for line in f if line.strip()]
    out = os.path.join(STAGE, "beats")
    os.makedirs(out, exist_ok=True)
    changed, stems = [], []
    for r in rows:
        stem = os.path.basename(r["beats_path"])[:-len(".beats")]
        with open(os.path.join(bdir, "midi", stem + ".mid"), "rb") as f:
            a = analyse_midi(f.read())
        first = min(t for t, _, _ in a["notes"])
        phase = bar_phase(a)
        grid = [g for g in beat_grid(a, a["last_off"], phase) if g[0] >= first]
        beats = [b for b in timed_beats(a, grid) if b[0] <= float(r["duration_s"]) + 5e-4]
        with open(os.path.join(bdir, stem + ".beats"), encoding="utf-8") as f:
            old = [line.split("\t") for line in f.read().splitlines()]
        if [t for t, _ in old] != [f"{t:.4f}" for t, _, _ in beats]:
            raise Fail(f"{stem}: the beat times differ from the set's; rebuild the set")
        cols = beat_columns(a, first, beats, phase)
        for k, v in cols.items():
            if k not in ("downbeats", "bar_phase") and str(v) != r[k]:
                raise Fail(f"{stem}: {k} {v} differs from the set's {r[k]}; rebuild the set")
        if [int(p) for _, p in old] != [p for _, p, _ in beats]:
            changed.append(f"{stem} (bar phase {phase}, {r['downbeats']} -> {cols['downbeats']} downbeats)")
        write_beats(os.path.join(out, stem + ".beats"), beats)
        r.update(cols)
        stems.append(stem)
    write_tsv(os.path.join(out, "manifest.tsv"), BEAT_MANIFEST, rows)
    with open(os.path.join(FINAL, "README.txt"), encoding="utf-8") as f:
        readme, n = re.subn(README_BEATS_TRUTH_OLD, lambda _: README_BEATS_TRUTH + "\n        Files whose", f.read(),
                            count=1, flags=re.S)
    if n != 1:
        raise Fail("README.txt has no beat-truth paragraph to replace")
    with open(os.path.join(STAGE, "README.txt"), "w", encoding="utf-8") as f:
        f.write(readme)
    for stem in stems:
        os.replace(os.path.join(out, stem + ".beats"), os.path.join(bdir, stem + ".beats"))
    os.replace(os.path.join(STAGE, "README.txt"), os.path.join(FINAL, "README.txt"))
    os.replace(os.path.join(out, "manifest.tsv"), os.path.join(bdir, "manifest.tsv"))
    log(f"beats: truth of {len(rows)} files re-derived; {len(changed)} changed: {', '.join(changed) or 'none'}")


def write_readme(ks, bs):
    lines = f"""Earmark music-analysis evaluation set (made by tools/music-data.sh; its header has the details)

key/    {ks['chorales']} Bach chorales of the music21 {ks['music21']} corpus, {ks['major']} major and {ks['minor']} minor,
        played as a string quartet (Soprano, Alto: GM Violin; Tenor: Viola; Bass: Cello) at {', '.join(f'{q:g}' for q in ks['qpm'])} quarter notes
        per minute by FluidSynth with FluidR3_GM; 44.1 kHz mono 16-bit WAV, {ks['duration_s'] / 3600:.1f} h in all.
        manifest.tsv: path, tonic, mode, source, duration_s, rule, confidence, signature, encoded_key,
        first_root, final_root, parts
        Truth: the key written in the score (key signature + MusicXML mode), checked against the root of
        the final chord; without a written mode the final chord decides between the signature's major key
        and its relative minor; modal signatures (Dorian: minor written with one flat too few; Mixolydian:
        major without its last sharp, when the first chord agrees) follow the final chord; Phrygian
        half-cadence endings (on the dominant of the relative minor) give that minor key. Rules used:
        {', '.join(f'{k} {v}' for k, v in ks['rules'].items())}.
        Confidence: {', '.join(f'{k} {v}' for k, v in ks['confidence'].items())} (evaluate on confidence=high for
        unambiguous truth). crosscheck.tsv: the corpus's human Roman-numeral analyses (Riemenschneider
        1-20) against the truth: {', '.join(f'{k} {v}' for k, v in ks['crosscheck'].items())}.
        Skipped (skipped.tsv): {', '.join(f'{k} {v}' for k, v in ks['skipped'].items())}.

beats/  {bs['files']} MIDI files from Debian packages ({', '.join(f'{k} {v}' for k, v in sorted(bs['per_package'].items()))}),
        played with their own GM programs; {bs['beats']} beats, {bs['bpm_min']:.0f}-{bs['bpm_max']:.0f} bpm (median {bs['bpm_median']:.0f}),
        {bs['tempo_changing']} files with tempo changes; meters {', '.join(f'{k} {v}' for k, v in bs['meters'].items())};
        {bs['duration_s'] / 3600:.1f} h in all.
{README_BEATS_TRUTH}
        Files whose notes do not sit on their grid are
        skipped (skipped.tsv: {', '.join(f'{k} {v}' for k, v in bs['skipped'].items())}).

SOURCES.tsv: the packages used with versions, licences and copyright lines.
Audio: FluidSynth 32-bit float, reverb and chorus on -> sox -R: mono, peak -1 dBFS, 16 bit, tail below
-60 dBFS cut; leading silence kept, so beat times are the MIDI file's times.
"""
    with open(os.path.join(STAGE, "README.txt"), "w", encoding="utf-8") as f:
        f.write(lines)


def main():
    os.makedirs(os.path.join(STAGE, "key"), exist_ok=True)
    os.makedirs(os.path.join(STAGE, "beats"), exist_ok=True)
    with multiprocessing.Pool(JOBS) as pool:
        ks = build_key(pool)
        bs = build_beats(pool)
    write_sources(ks, bs)
    write_readme(ks, bs)
    bs.pop("files_used")
    with open(os.path.join(WORK, "stats.json"), "w", encoding="utf-8") as f:
        json.dump({"key": ks, "beats": bs}, f, indent=1)
    with open(os.path.join(WORK, "ready.txt"), "w", encoding="utf-8") as f:
        f.write(f"key: {ks['chorales']} chorales, {ks['major']} major, {ks['minor']} minor; rules {ks['rules']}\n")
        f.write(f"beats: {bs['files']} files, {bs['beats']} beats, {bs['bpm_min']:.1f}-{bs['bpm_max']:.1f} bpm; "
                f"meters {bs['meters']}\n")


if __name__ == "__main__":
    try:
        if sys.argv[6:] == ["truth"]:
            update_truth()
        else:
            main()
    except Fail as e:
        log(f"ERROR: {e}")
        sys.exit(1)
PY

if [ "$truth_only" = 1 ]; then
  log "re-deriving the beat truth of $DIR (version $BEATS_TRUTH; the audio is kept)"
  "$PY" build.py "$work" "$DIR" "$SOUNDFONT" "${BEAT_PACKAGES[*]}" "${RENDER_PACKAGES[*]}" truth ||
    die "the beat truth could not be re-derived; the set is unchanged (a full build: remove $DIR/READY)"
  verify_set "$DIR" || die "the set failed its checks after the beat-truth update"
  { grep -v '^beats truth: ' "$DIR/READY"; echo "beats truth: $BEATS_TRUTH (updated $(date -u +%Y-%m-%dT%H:%M:%SZ))"; } >READY.new
  mv READY.new "$DIR/READY"
  log "beat truth updated after $(( $(date +%s) - started )) s"
  echo "$DIR"
  exit 0
fi

"$PY" build.py "$work" "$DIR" "$SOUNDFONT" "${BEAT_PACKAGES[*]}" "${RENDER_PACKAGES[*]}"

rm -f "$DIR/READY"
rm -rf "$DIR/key" "$DIR/beats" "$DIR/SOURCES.tsv" "$DIR/README.txt"
mv out/key out/beats out/SOURCES.tsv out/README.txt "$DIR/"
verify_set "$DIR" || die "the new set failed its checks; it is not marked READY"
{ echo "$SET_VERSION"; date -u +%Y-%m-%dT%H:%M:%SZ; cat ready.txt; echo "beats truth: $BEATS_TRUTH"; } >"$DIR/READY"
log "ready after $(( $(date +%s) - started )) s ($(du -sm "$DIR/key" "$DIR/beats" | awk '{ s += $1 } END { print s }') MB)"
echo "$DIR"
