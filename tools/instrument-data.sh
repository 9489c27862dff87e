#!/usr/bin/env bash
# Builds Earmark's evaluation set for INSTRUMENT ACTIVITY and PACE: multi-part General MIDI files
# rendered as a full mix and once per instrument family alone, with the truth taken from the scores
# and from the solo renders.
#
#   pieces   MIDI files shipped in Debian packages (PACKAGES below; downloaded with apt-get download,
#            never installed), parsed with PyPI mido (pinned below). A file is used when it parses,
#            lasts (to its last note) at least 30 s, and at least two of Earmark's instrument families
#            play 16 notes or more in its first 90 s; files that repeat another note for note, or have
#            the name of an earlier file of their package (variants), are skipped. Longer files are cut
#            at 90 s. At most 60 files, taken round-robin over the packages (sorted by package and path)
#            so that no package dominates.
#   families Earmark's nine (Sources/EarmarkClassification/InstrumentActivity.swift), from the General
#            MIDI program (0-based) the note's channel has when it starts, matched to the YAMNet labels
#            each family is made of:
#              drums      channel 10 (any program); timpani 47, agogo 113, woodblock 115, taiko 116,
#                         melodic tom 117, synth drum 118 on any channel (YAMNet's percussion labels)
#              bass       32-39 (acoustic, electric, fretless, slap and synth bass)
#              guitar     24-31, sitar 104, banjo 105, shamisen 106, koto 107 (plucked strings)
#              keys       pianos, harpsichord, clavinet 0-7; organs 16-20
#              strings    violin .. contrabass, tremolo, pizzicato 40-45, harp 46, string ensembles and
#                         synth strings 48-51, fiddle 110
#              brass      56-63 (trumpet, trombone, tuba, horn, sections, synth brass)
#              woodwinds  64-79 (saxophones, oboe, English horn, bassoon, clarinet, flutes, recorder,
#                         pan flute, ocarina, ...), shanai 111
#              voice      choir aahs, voice oohs, synth voice 52-54
#              synth      leads, pads and synth effects 80-103
#              other      (in the mix, never a family's truth) chromatic percussion 8-15 (celesta,
#                         glockenspiel, music box, vibraphone, marimba, xylophone, tubular bells,
#                         dulcimer), accordion, harmonica, bandoneon 21-23, orchestra hit 55, kalimba
#                         108, bagpipe 109, tinkle bell, steel drums, reverse cymbal 112, 114, 119,
#                         sound effects 120-127: YAMNet has labels for them outside every family.
#   renders  mix: every channel; solo: the notes of one family alone (note-ons of every other family
#            dropped, all controllers, program changes and tempo kept), one per family that has notes.
#            FluidSynth (Debian fluidsynth, FluidR3_GM.sf2 of fluid-soundfont-gm; reverb and chorus
#            on, gain 0.2) to 32-bit float; mono (mean of the channels); the mix is peak normalised to
#            -1 dBFS and the same gain is applied to every solo of the piece, so a solo's level is its
#            level in the mix; 16 bit with TPDF dither (fixed seed), FLAC. The part of the mix after it
#            falls below -60 dBFS for good is cut, from the solos too. Notes still sounding at the cut
#            (90 s) get All Notes Off there, All Sound Off 1.5 s later.
#   truth    1-s frames [i, i+1). A family is ACTIVE in a frame when both
#              (a) its notes sound for at least 0.25 s of the frame (union over its notes; a note sounds
#                  from its note-on to its note-off, held on by the sustain pedal, and at least 0.3 s:
#                  drum notes are short MIDI events), and
#              (b) its solo render is audible in the mix: the solo's RMS over the frame is within 35 dB
#                  of the mix's RMS over the frame, and above -70 dBFS;
#            then gaps of a single inactive frame between active frames are filled (a part resting for
#            under about a second still plays). Ranges: runs of active frames.
#            Pace truth: note onsets (note-ons of every part, drums included) merged when within 50 ms
#            of the first onset of their group ("events"); also every note-on ("notes") and drum hits
#            (channel 10 and the percussion programs above, merged within 50 ms). The benchmark counts
#            them in the ranges pace reports (10 s every 5 s) and gives events per minute.
#
# Output (DIR is $EARMARK_INSTRUMENT_DATA, else ~/.cache/earmark-instrument-data):
#   DIR/pieces/ID.mix.flac         the full mix, 44.1 kHz mono 16-bit
#   DIR/pieces/ID.FAMILY.flac      the solo renders
#   DIR/pieces/ID.json             truth: id, package, source, duration, frame, mix, mix_db (frame
#                                  RMS, dBFS), families{name: solo, notes, solo_db, active (0/1 per
#                                  frame), ranges [[start, end], ...]}, other_notes, events, notes,
#                                  drum_hits (onset times, s)
#   DIR/pieces/midi/ID.mid         the source MIDI file (decompressed copy)
#   DIR/manifest.tsv               id, path (mix), truth_path, package, source, duration_s, families
#                                  (with notes), active_families (with active frames), notes, events,
#                                  drum_hits, events_per_min
#   DIR/skipped.tsv                MIDI files not used, and why
#   DIR/SOURCES.tsv, DIR/licenses/ packages and versions; their Debian copyright files
#   DIR/README.txt                 this description with the counts of the build
#   DIR/venv/                      Python venv with the pinned mido and numpy
#   DIR/READY                      written last (line 1: set version, line 2: build time, then counts)
#
# Deterministic (sorted inputs, pinned Python packages, fixed Debian packages, seeded dither);
# idempotent (with a READY of this set version it only prints DIR); safe to run concurrently (flock
# on DIR/.lock). Downloads about 45 MB of Debian packages and 20 MB of wheels; installs fluidsynth and
# fluid-soundfont-gm with apt-get when missing (root only). About 700 MB of FLAC; about 13 minutes
# on 2 cores (FluidSynth). Needs apt-get, dpkg-deb, python3 >= 3.11 with venv (or $EARMARK_PYTHON),
# sox, flock and PyPI. Prints DIR on standard output; progress and errors go to standard error.
set -euo pipefail

SET_VERSION="earmark-instrument-data 1"
PROG=instrument-data.sh

PY_PINS=(mido==1.3.3 packaging==26.3 numpy==2.4.6)
PACKAGES=(simutrans-data openttd-openmsx freedink-data mma pianobooster playmidi
          kobodeluxe-data liquidwar-data pangzero pinball-table-hurd-data planetblupi-music-midi)
RENDER_PACKAGES=(fluidsynth fluid-soundfont-gm)
SOUNDFONT=/usr/share/sounds/sf2/FluidR3_GM.sf2

usage() {
  cat <<EOF
usage: tools/$PROG [--verify | --help]

Builds (once) and prints the folder of Earmark's instrument-activity and pace evaluation set:
multi-part MIDI files from Debian packages rendered with FluidSynth as a mix and per instrument
family alone, with per-second family activity and note-onset truth.

  (no option)  build the set unless it is ready; print its folder
  --verify     check a ready set (manifest, audio files, truth files); print its folder
  --help       this text

Environment:
  EARMARK_INSTRUMENT_DATA  the folder (default ~/.cache/earmark-instrument-data)
  EARMARK_PYTHON           the Python (>= 3.11) for the venv (default python3)
  EARMARK_INSTRUMENT_JOBS  parallel renders (default: the number of cores, at most 4)

The header of this script describes the truth and the layout; DIR/README.txt too.
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
DIR=${EARMARK_INSTRUMENT_DATA:-$home/.cache/earmark-instrument-data}
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac
VENV=$DIR/venv
PY=$VENV/bin/python

log() { echo "$PROG: $*" >&2; }
die() { echo "$PROG: error: $*" >&2; exit 1; }
# shellcheck source=tools/rendered-set.sh
. "$(dirname "${BASH_SOURCE[0]}")/rendered-set.sh"

ready() { [ -f "$DIR/READY" ] && [ "$(sed -n 1p "$DIR/READY")" = "$SET_VERSION" ]; }

# verify_set DIR: manifest, audio files and truth files agree (standard library only).
verify_set() {
  python3 - "$1" <<'PY'
import json, os, sys
d = sys.argv[1]
bad, n, fams = [], 0, {}
with open(os.path.join(d, "manifest.tsv"), encoding="utf-8") as f:
    head = f.readline().rstrip("\n").split("\t")
    if head[:4] != ["id", "path", "truth_path", "package"]:
        bad.append(f"manifest header {head[:4]}")
    for line in f:
        r = dict(zip(head, line.rstrip("\n").split("\t")))
        n += 1
        try:
            with open(r["truth_path"], encoding="utf-8") as g:
                t = json.load(g)
        except (OSError, ValueError, KeyError) as e:
            bad.append(f"{r.get('id')}: truth {e}"); continue
        frames = len(t["mix_db"])
        if abs(frames - t["duration"]) > 1.01:
            bad.append(f"{r['id']}: {frames} frames for {t['duration']} s")
        for p in [t["mix"]] + [v["solo"] for v in t["families"].values()]:
            if not os.path.isfile(p) or os.path.getsize(p) < 1000:
                bad.append(f"{r['id']}: missing {p}")
        for k, v in t["families"].items():
            if len(v["active"]) != frames:
                bad.append(f"{r['id']}: {k} has {len(v['active'])} frames, not {frames}")
            if any(v["active"]):
                fams[k] = fams.get(k, 0) + 1
        if not 20 <= t["duration"] <= 100:
            bad.append(f"{r['id']}: {t['duration']} s")
if n < 30:
    bad.append(f"only {n} pieces (want at least 30)")
print(f"instrument-data.sh: {n} pieces; pieces with each family active: "
      + ", ".join(f"{k} {v}" for k, v in sorted(fams.items(), key=lambda x: -x[1])), file=sys.stderr)
for b in bad[:20]:
    print(f"instrument-data.sh: BAD {b}", file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

if [ "$mode" = verify ]; then
  ready || die "no ready set of version '$SET_VERSION' in $DIR (run tools/$PROG first)"
  verify_set "$DIR" || exit 1
  echo "$DIR"
  exit 0
fi

if ready; then
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
if ready; then
  echo "$DIR"
  exit 0
fi

started=$(date +%s)
work=$(mktemp -d "$DIR/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
export TMPDIR=$work/tmp
mkdir -p "$TMPDIR"

PY_IMPORTS="mido, numpy"
ensure_render_packages
venv_ready || make_venv

log "building the instrument set (version '$SET_VERSION') in $DIR"
log "downloading ${PACKAGES[*]}"
download "${PACKAGES[@]}"
printf 'package\tversion\tdeb_bytes\n' >packages.tsv
mkdir -p out/licenses
unpack_debs packages.tsv "${PACKAGES[@]}"
for pkg in "${PACKAGES[@]}"; do
  cp "$work/root/$pkg/usr/share/doc/$pkg/copyright" "out/licenses/$pkg.copyright" 2>/dev/null || true
done
for pkg in "${RENDER_PACKAGES[@]}"; do
  printf '%s\t0\n' "$(dpkg-query -W -f='${Package}\t${Version}' "$pkg")" >>packages.tsv
  cp "/usr/share/doc/$pkg/copyright" "out/licenses/$pkg.copyright" 2>/dev/null || true
done

cat >build.py <<'PY'
# Builds DIR/pieces, the manifest and the truth (see the header of tools/instrument-data.sh). Runs in the venv.
import collections, gzip, hashlib, io, json, multiprocessing, os, re, struct, subprocess, sys, time, wave

WORK, FINAL, SOUNDFONT = sys.argv[1:4]
PACKAGES = sys.argv[4].split()
ROOT = os.path.join(WORK, "root")
STAGE = os.path.join(WORK, "out")
JOBS = int(os.environ.get("EARMARK_INSTRUMENT_JOBS") or max(1, min(4, os.cpu_count() or 1)))
RATE = 44100
CUT_S, MIN_S, MIN_FAMILY_NOTES, MAX_PIECES = 90.0, 30.0, 16, 60
AUDIBLE_DB, FLOOR_DBFS, MIN_SOUNDING_S, MIN_NOTE_S, MERGE_S = 35.0, -70.0, 0.25, 0.3, 0.05
MIDI_EXT = (".mid", ".midi", ".kar", ".mid.gz", ".midi.gz", ".kar.gz")
FAMILIES = ("drums", "bass", "guitar", "keys", "strings", "brass", "woodwinds", "voice", "synth")
T0 = time.monotonic()


def family_of_program(p):
    if p in (47, 113, 115, 116, 117, 118): return "drums"
    if 32 <= p <= 39: return "bass"
    if 24 <= p <= 31 or 104 <= p <= 107: return "guitar"
    if 0 <= p <= 7 or 16 <= p <= 20: return "keys"
    if 40 <= p <= 46 or 48 <= p <= 51 or p == 110: return "strings"
    if 56 <= p <= 63: return "brass"
    if 64 <= p <= 79 or p == 111: return "woodwinds"
    if 52 <= p <= 54: return "voice"
    if 80 <= p <= 103: return "synth"
    return "other"


def family_of(channel, program):
    return "drums" if channel == 9 else family_of_program(program)


class Fail(Exception):
    pass


def log(msg):
    print(f"instrument-data.sh: [{time.monotonic() - T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout=None):
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Fail(f"{' '.join(cmd)} did not finish in {timeout} s")
    if p.returncode != 0:
        raise Fail(f"{' '.join(cmd)} failed (exit {p.returncode}): {p.stderr.decode(errors='replace').strip()[-500:]}")
    return p.stdout


def load_midi(data):
    import mido
    return mido.MidiFile(file=io.BytesIO(data), clip=True)


def timeline(mf):
    """The merged events of a MIDI file with their tick and second: [(tick, sec, msg)]."""
    import mido
    out, tick, sec, us = [], 0, 0.0, 500000
    tpq = mf.ticks_per_beat
    for msg in mido.merge_tracks(mf.tracks):
        if msg.time:
            sec += msg.time * us / 1e6 / tpq
            tick += msg.time
        out.append((tick, sec, msg))
        if msg.type == "set_tempo":
            us = msg.tempo
    return out


def analyse(mf, cut):
    """Notes up to `cut` s: [(on, off, channel, family, pitch)] with the sustain pedal honoured, and the
    time of the last note event."""
    program = [0] * 16
    pedal = [False] * 16
    held = collections.defaultdict(list)        # (ch, pitch) -> [(on, family)]
    pedalled = collections.defaultdict(list)    # ch -> [(on, family, pitch)] released, waiting for pedal up
    notes, last = [], 0.0
    for _, sec, msg in timeline(mf):
        if sec > cut:
            break
        t = msg.type
        if t == "program_change":
            program[msg.channel] = msg.program
        elif t == "control_change" and msg.control == 64:
            down = msg.value >= 64
            if pedal[msg.channel] and not down:
                for on, fam, pitch in pedalled.pop(msg.channel, []):
                    notes.append((on, sec, msg.channel, fam, pitch))
            pedal[msg.channel] = down
        elif t == "note_on" and msg.velocity > 0:
            held[(msg.channel, msg.note)].append((sec, family_of(msg.channel, program[msg.channel])))
            last = sec
        elif t in ("note_on", "note_off"):
            stack = held.get((msg.channel, msg.note))
            if stack:
                on, fam = stack.pop(0)
                if pedal[msg.channel]:
                    pedalled[msg.channel].append((on, fam, msg.note))
                else:
                    notes.append((on, sec, msg.channel, fam, msg.note))
            last = sec
    end = min(cut, last)
    for (ch, pitch), stack in held.items():
        for on, fam in stack:
            notes.append((on, end, ch, fam, pitch))
    for ch, rest in pedalled.items():
        for on, fam, pitch in rest:
            notes.append((on, end, ch, fam, pitch))
    notes.sort()
    return notes, last


def playable(mf, cut, keep):
    """A type-0 MIDI file of `mf` up to `cut` s in which only the note-ons of families in `keep` remain
    (controllers, programs, tempi and every note-off kept); All Notes Off on every channel at the cut (or
    the file's last event), All Sound Off 1.5 s later."""
    import mido
    program = [0] * 16
    track, prev_tick, us = mido.MidiTrack(), 0, 500000
    for tick, sec, msg in timeline(mf):
        if sec > cut:
            # The cut tick at the tempo in force.
            prev_sec = sec - (tick - prev_tick) * us / 1e6 / mf.ticks_per_beat
            prev_tick_cut = prev_tick + round((cut - prev_sec) * 1e6 / us * mf.ticks_per_beat)
            last_tick = max(prev_tick, prev_tick_cut)
            break
        if msg.is_meta and msg.type not in ("set_tempo", "time_signature"):
            continue
        if msg.type == "program_change":
            program[msg.channel] = msg.program
        if msg.type == "note_on" and msg.velocity > 0 and family_of(msg.channel, program[msg.channel]) not in keep:
            continue
        track.append(msg.copy(time=tick - prev_tick))
        prev_tick = tick
        if msg.type == "set_tempo":
            us = msg.tempo
    else:
        last_tick = prev_tick
    gap = last_tick - prev_tick
    tail = max(1, round(1.5 * 1e6 / us * mf.ticks_per_beat))
    for ch in range(16):
        track.append(mido.Message("control_change", channel=ch, control=123, value=0, time=gap if ch == 0 else 0))
    for ch in range(16):
        track.append(mido.Message("control_change", channel=ch, control=120, value=0, time=tail if ch == 0 else 0))
    track.append(mido.MetaMessage("end_of_track", time=0))
    out = mido.MidiFile(type=0, ticks_per_beat=mf.ticks_per_beat)
    out.tracks.append(track)
    buf = io.BytesIO()
    out.save(file=buf)
    return buf.getvalue()


def read_float_wav(path):
    """Mono float64 samples of a 32-bit float WAV (FluidSynth's), the mean of its channels."""
    import numpy as np
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise Fail(f"{path}: not a WAV file")
    pos, channels, payload = 12, None, None
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        body = data[pos + 8:pos + 8 + size]
        if cid == b"fmt ":
            fmt_tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", body[:16])
            if fmt_tag == 0xFFFE:
                fmt_tag = struct.unpack("<H", body[24:26])[0]
            if fmt_tag != 3 or bits != 32 or rate != RATE:
                raise Fail(f"{path}: format {fmt_tag}, {bits} bit, {rate} Hz")
        elif cid == b"data":
            payload = body
        pos += 8 + size + (size & 1)
    if channels is None or payload is None:
        raise Fail(f"{path}: no fmt or data chunk")
    x = np.frombuffer(payload[:len(payload) // (4 * channels) * 4 * channels], dtype="<f4").astype(np.float64)
    return x.reshape(-1, channels).mean(axis=1)


def write_flac(x, path, seed):
    """16-bit with TPDF dither (seeded), then FLAC with sox."""
    import numpy as np
    rng = np.random.default_rng(seed)
    d = (rng.random(len(x)) - rng.random(len(x)))
    y = np.clip(np.round(x * 32767 + d), -32768, 32767).astype("<i2")
    tmp = path + ".wav"
    with wave.open(tmp, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(y.tobytes())
    try:
        run(["sox", "-V1", tmp, path])
    finally:
        os.remove(tmp)


def frame_db(x, frames):
    import numpy as np
    out = []
    for i in range(frames):
        seg = x[i * RATE:(i + 1) * RATE]
        e = float(np.mean(seg * seg)) if len(seg) else 0.0
        out.append(round(10 * np.log10(e + 1e-20), 2))
    return out


def merged(times, within=MERGE_S):
    out = []
    for t in sorted(times):
        if not out or t - out[-1][0] > within:
            out.append([t])
        else:
            out[-1].append(t)
    return [g[0] for g in out]


def render_piece(job):
    """Renders the mix and the solos of one piece and writes its truth. Returns the manifest row."""
    import numpy as np
    pid, mid_path, pkg, src, families = job
    with open(mid_path, "rb") as f:
        mf = load_midi(f.read())
    notes, _ = analyse(mf, CUT_S)
    tmp = os.path.join(WORK, "tmp", pid)
    os.makedirs(tmp, exist_ok=True)
    audio = {}
    try:
        for name in ["mix"] + families:
            keep = set(FAMILIES) | {"other"} if name == "mix" else {name}
            play, raw = os.path.join(tmp, name + ".mid"), os.path.join(tmp, name + ".f32.wav")
            with open(play, "wb") as f:
                f.write(playable(mf, CUT_S, keep))
            run(["fluidsynth", "-n", "-i", "-q", "-R", "1", "-C", "1", "-g", "0.2", "-r", str(RATE),
                 "-O", "float", "-T", "wav", "-F", raw, SOUNDFONT, play], timeout=1200)
            audio[name] = read_float_wav(raw)
            os.remove(raw)
            os.remove(play)
    finally:
        subprocess.run(["rm", "-rf", tmp])
    mix = audio["mix"]
    peak = float(np.max(np.abs(mix))) if len(mix) else 0.0
    if peak <= 0:
        raise Fail(f"{pid}: the mix is silent")
    gain = 10 ** (-1 / 20) / peak
    loud = np.flatnonzero(np.abs(mix) * gain > 10 ** (-60 / 20))
    n = int(loud[-1]) + 1
    for k in audio:
        y = audio[k][:n] * gain
        audio[k] = np.concatenate([y, np.zeros(n - len(y))]) if len(y) < n else y
    duration = n / RATE
    frames = int(np.ceil(duration - 1e-9))
    pdir = os.path.join(STAGE, "pieces")
    seed = int(hashlib.sha1(pid.encode()).hexdigest()[:8], 16)
    write_flac(audio["mix"], os.path.join(pdir, pid + ".mix.flac"), seed)
    mix_db = frame_db(audio["mix"], frames)
    fam_truth = {}
    for k, fam in enumerate(families):
        write_flac(audio[fam], os.path.join(pdir, f"{pid}.{fam}.flac"), seed + 1 + k)
        solo_db = frame_db(audio[fam], frames)
        sounding = np.zeros(frames * 100, dtype=bool)    # 10-ms grid
        count = 0
        for on, off, _, f, _ in notes:
            if f != fam:
                continue
            count += 1
            a, b = int(on * 100), int(np.ceil(max(off, on + MIN_NOTE_S) * 100))
            sounding[max(0, a):min(len(sounding), b)] = True
        cover = sounding.reshape(frames, 100).sum(axis=1) / 100
        active = [int(cover[i] >= MIN_SOUNDING_S and solo_db[i] >= mix_db[i] - AUDIBLE_DB and solo_db[i] >= FLOOR_DBFS)
                  for i in range(frames)]
        for i in range(1, frames - 1):
            if not active[i] and active[i - 1] and active[i + 1]:
                active[i] = 1
        ranges, i = [], 0
        while i < frames:
            if active[i]:
                j = i
                while j < frames and active[j]:
                    j += 1
                ranges.append([float(i), float(min(j, duration))])
                i = j
            else:
                i += 1
        fam_truth[fam] = {"solo": os.path.join(FINAL, "pieces", f"{pid}.{fam}.flac"), "notes": count,
                          "solo_db": solo_db, "active": active, "ranges": ranges}
    onsets = [on for on, _, _, _, _ in notes if on < duration]
    drums = [on for on, _, _, f, _ in notes if f == "drums" and on < duration]
    events = merged(onsets)
    truth = {"id": pid, "package": pkg, "source": src, "duration": round(duration, 4), "frame": 1.0,
             "mix": os.path.join(FINAL, "pieces", pid + ".mix.flac"), "mix_db": mix_db, "families": fam_truth,
             "other_notes": sum(1 for x in notes if x[3] == "other"),
             "events": [round(t, 3) for t in events], "notes": [round(t, 3) for t in onsets],
             "drum_hits": [round(t, 3) for t in merged(drums)]}
    with open(os.path.join(pdir, pid + ".json"), "w", encoding="utf-8") as f:
        json.dump(truth, f, separators=(",", ":"))
    return {"id": pid, "path": truth["mix"], "truth_path": os.path.join(FINAL, "pieces", pid + ".json"),
            "package": pkg, "source": src, "duration_s": f"{duration:.3f}", "families": ",".join(families),
            "active_families": ",".join(f for f in families if any(fam_truth[f]["active"])),
            "notes": len(onsets), "events": len(events), "drum_hits": len(truth["drum_hits"]),
            "events_per_min": f"{len(events) * 60 / duration:.1f}"}


def candidates():
    out = []
    for pkg in PACKAGES:
        top = os.path.join(ROOT, pkg)
        for d, _, names in os.walk(top):
            for n in names:
                if n.lower().endswith(MIDI_EXT):
                    out.append((pkg, "/" + os.path.relpath(os.path.join(d, n), top)))
    return sorted(out)


def stem_of(pkg, src):
    base = re.sub(r"\.(gz)$", "", os.path.basename(src), flags=re.I)
    base = os.path.splitext(base)[0]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{pkg}-{base}").strip("-")


def examine(pkg, src):
    path = os.path.join(ROOT, pkg, src.lstrip("/"))
    if os.path.islink(path) and not os.path.exists(path):
        return None, "dangling symlink"
    with open(path, "rb") as f:
        data = f.read()
    if path.lower().endswith(".gz"):
        data = gzip.decompress(data)
    try:
        mf = load_midi(data)
        notes, last = analyse(mf, CUT_S)
        _, full_last = analyse(mf, 1e9)
    except Exception as e:   # mido raises several kinds on broken files
        return None, f"unreadable: {type(e).__name__}: {str(e)[:100]}"
    if full_last < MIN_S:
        return None, f"too short: {full_last:.1f} s"
    counts = collections.Counter(f for _, _, _, f, _ in notes)
    fams = [f for f in FAMILIES if counts[f] >= MIN_FAMILY_NOTES]
    if len(fams) < 2:
        return None, "fewer than 2 families with 16 notes: " + ", ".join(f"{k} {v}" for k, v in counts.most_common())
    fp = hashlib.sha1(repr([(round(on, 2), p) for on, _, _, _, p in notes]).encode()).hexdigest()
    return {"pkg": pkg, "src": src, "data": data, "families": fams, "fingerprint": fp,
            "md5": hashlib.md5(data).hexdigest(), "length": min(full_last, CUT_S)}, None


def write_tsv(path, header, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\t".join(header) + "\n")
        for r in rows:
            f.write("\t".join(str(r.get(h, "")) for h in header) + "\n")


def main():
    pdir = os.path.join(STAGE, "pieces")
    os.makedirs(os.path.join(pdir, "midi"), exist_ok=True)
    os.makedirs(os.path.join(WORK, "tmp"), exist_ok=True)
    cands = candidates()
    log(f"{len(cands)} MIDI files in {len(PACKAGES)} packages")
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
    by_pkg = collections.OrderedDict((p, [i for i in ok if i["pkg"] == p]) for p in sorted({i["pkg"] for i in ok}))
    chosen, r = [], 0
    while len(chosen) < MAX_PIECES and any(r < len(v) for v in by_pkg.values()):
        for v in by_pkg.values():
            if r < len(v) and len(chosen) < MAX_PIECES:
                chosen.append(v[r])
        r += 1
    taken = {id(i) for i in chosen}
    for i in ok:
        if id(i) not in taken:
            skipped.append({"package": i["pkg"], "source": i["src"], "reason": f"over the cap of {MAX_PIECES} files"})
    chosen.sort(key=lambda i: (i["pkg"], i["src"]))
    names, jobs = collections.Counter(), []
    for i in chosen:
        stem = stem_of(i["pkg"], i["src"])
        names[stem] += 1
        if names[stem] > 1:
            stem = f"{stem}-{names[stem]}"
        mid = os.path.join(pdir, "midi", stem + ".mid")
        with open(mid, "wb") as f:
            f.write(i["data"])
        jobs.append(((len(i["families"]) + 1) * i["length"], (stem, mid, i["pkg"], i["src"], i["families"])))
    # Longest first, so the two workers finish together; the manifest is in id order.
    order = [j for _, j in sorted(jobs, key=lambda x: -x[0])]
    log(f"{len(order)} pieces to render ({len(skipped)} files skipped), "
        f"{sum(len(j[4]) + 1 for j in order)} renders on {JOBS} workers")
    rows = []
    with multiprocessing.Pool(JOBS) as pool:
        for k, row in enumerate(pool.imap_unordered(render_piece, order, chunksize=1)):
            rows.append(row)
            if (k + 1) % 10 == 0:
                log(f"rendered {k + 1} of {len(order)} pieces")
    rows.sort(key=lambda r: r["id"])
    write_tsv(os.path.join(STAGE, "manifest.tsv"),
              ["id", "path", "truth_path", "package", "source", "duration_s", "families", "active_families",
               "notes", "events", "drum_hits", "events_per_min"], rows)
    write_tsv(os.path.join(STAGE, "skipped.tsv"), ["package", "source", "reason"],
              sorted(skipped, key=lambda r: (r["package"], r["source"])))
    versions = {}
    with open(os.path.join(WORK, "packages.tsv"), encoding="utf-8") as f:
        next(f)
        for line in f:
            p, v, _ = line.rstrip("\n").split("\t")
            versions[p] = v
    used = collections.Counter(r["package"] for r in rows)
    from importlib import metadata
    src_rows = [{"package": p, "version": versions.get(p, "-"), "origin": "Debian", "used_for": "pieces",
                 "files": used.get(p, 0), "licence": f"licenses/{p}.copyright"} for p in PACKAGES]
    src_rows += [{"package": p, "version": versions.get(p, "-"), "origin": "Debian (installed)", "used_for": "rendering",
                  "files": 0, "licence": f"licenses/{p}.copyright"} for p in ("fluidsynth", "fluid-soundfont-gm")]
    src_rows += [{"package": p, "version": metadata.version(p), "origin": "PyPI", "used_for": "MIDI parsing, audio",
                  "files": 0, "licence": "-"} for p in ("mido", "numpy")]
    write_tsv(os.path.join(STAGE, "SOURCES.tsv"), ["package", "version", "origin", "used_for", "files", "licence"], src_rows)
    fam_with = collections.Counter(f for r in rows for f in r["active_families"].split(",") if f)
    total = sum(float(r["duration_s"]) for r in rows)
    counts = (f"{len(rows)} pieces, {total / 60:.1f} min; per package: "
              + ", ".join(f"{k} {v}" for k, v in sorted(used.items())) + "\n"
              + "pieces with each family active: " + ", ".join(f"{k} {fam_with[k]}" for k in FAMILIES) + "\n"
              + f"onset events per minute: median {sorted(float(r['events_per_min']) for r in rows)[len(rows) // 2]:.0f}\n")
    with open(os.path.join(STAGE, "README.txt"), "w", encoding="utf-8") as f:
        f.write("Earmark instrument-activity and pace evaluation set (made by tools/instrument-data.sh; its header\n"
                "has the family mapping, the truth rules and the layout).\n\n" + counts
                + f"skipped: {dict(collections.Counter(s['reason'].split(':')[0] for s in skipped).most_common(8))}\n")
    with open(os.path.join(WORK, "ready.txt"), "w", encoding="utf-8") as f:
        f.write(counts)
    log(counts.replace("\n", "; "))


if __name__ == "__main__":
    try:
        main()
    except Fail as e:
        log(f"ERROR: {e}")
        sys.exit(1)
PY

"$PY" build.py "$work" "$DIR" "$SOUNDFONT" "${PACKAGES[*]}"

rm -f "$DIR/READY"
rm -rf "$DIR/pieces" "$DIR/licenses" "$DIR/manifest.tsv" "$DIR/skipped.tsv" "$DIR/SOURCES.tsv" "$DIR/README.txt"
mv out/pieces out/licenses out/manifest.tsv out/skipped.tsv out/SOURCES.tsv out/README.txt "$DIR/"
verify_set "$DIR" || die "the new set failed its checks; it is not marked READY"
{ echo "$SET_VERSION"; date -u +%Y-%m-%dT%H:%M:%SZ; cat ready.txt; } >"$DIR/READY"
log "ready after $(( $(date +%s) - started )) s ($(du -sm "$DIR/pieces" | cut -f1) MB)"
echo "$DIR"
