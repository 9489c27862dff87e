#!/usr/bin/env bash
# Time-signature evaluation set for the rhythm analysis (issue 21, metre): a --data folder of
# earmark-music-bench whose *.beats carry a third column, the time signature in force at each beat.
#
#   rhythm   the rhythm set of tools/music-data.sh (its WAV files, linked), without the held-out packages
#            freedink-data and liquidwar-data (never used here). The time signature of each beat is the
#            MIDI file's time-signature meta event in force at the beat's time (MIDI's 4/4 before the
#            first one); the beat and position columns are the set's own.
#   derived  music21 Bach chorales (the corpus paths of the rhythm set's key/manifest.tsv, in its order)
#            re-barred and written as MIDI here, note for note, in 2/4, 3/4, 4/4, 2/2, 6/8, 9/8 and 12/8,
#            and some with one change of time signature half-way (at a bar line). The truth is the
#            signature the script writes; the audio makes it audible the way such music does:
#              - the four voices (Violin, Violin, Viola, Cello as in the key set) keep their pitches and
#                order; a chorale quarter note is one beat (2/2: half a beat). In compound signatures
#                (6/8, 9/8, 12/8) each beat is a dotted quarter and the first half of each chorale beat
#                takes two thirds of it (two eighths become a quarter and an eighth: the lilt of 6/8);
#              - an accompaniment (piano, harp, nylon guitar or electric piano, in turn) plays the bass
#                note on every beat, an octave lower too and louder on the first beat of each bar, and the
#                three upper voices as a chord on every other subdivision of the beat: one (an eighth;
#                2/2: a quarter) in simple signatures, two eighths in compound ones.
#            3/4 and 9/8 come from the chorales written in 3/4, the others from chorales in 4/4. Tempi
#            (beats a minute) are drawn per piece with a fixed seed: simple 66-126, 2/2 60-88 (half
#            notes), compound 48-92 (dotted quarters). Each piece is at most 64 chorale beats long; notes
#            before the first full bar (the pickup) are left out. Rendered with FluidSynth and
#            FluidR3_GM (reverb and chorus on, gain 0.2) to 44.1 kHz mono 16-bit, peak -1 dBFS.
#
# manifest.tsv: path, beats_path, bpm, meter (e.g. "6/8" or "2/4,6/8"), set (rhythm|derived), split
# (even|odd: alternate pieces of each metre for derived pieces, the rhythm set's own row parity for the
# rest), source. *.beats: time_s<TAB>position in bar<TAB>time signature.
# Choose constants on split=even and report split=odd (earmark-music-bench --data DIR prints both).
#
#   tools/metre-data.sh          # prints the folder (EARMARK_METRE_DATA, default ~/.cache/earmark-metre-data)
#
# Idempotent (READY holds the set version); needs the music set (tools/music-data.sh builds it and its
# venv with music21 and mido), fluidsynth with FluidR3_GM and sox. About 3 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VERSION="earmark-metre-data 1"
data=$(bash tools/music-data.sh </dev/null)
out=${EARMARK_METRE_DATA:-$HOME/.cache/earmark-metre-data}
if [ "$(head -n 1 "$out/READY" 2>/dev/null)" = "$VERSION" ]; then echo "$out"; exit 0; fi
rm -rf "$out"
mkdir -p "$out/beats/midi"
"$data/venv/bin/python" - "$data" "$out" <<'PY' >&2
import csv, os, random, subprocess, sys, wave
from concurrent.futures import ProcessPoolExecutor
import mido
from mido.midifiles import meta


class MetaSpec_key_signature(meta.MetaSpec_key_signature):
    """A key signature mido cannot decode (mode 255 in two simutrans files) becomes C: keys play no part here."""
    def decode(self, message, data):
        try:
            super().decode(message, data)
        except meta.KeySignatureError:
            message.key = "C"


meta.add_meta_spec(MetaSpec_key_signature)

data, out = sys.argv[1], sys.argv[2]
HELD_OUT = {"freedink-data", "liquidwar-data"}
SOUNDFONT = "/usr/share/sounds/sf2/FluidR3_GM.sf2"
TPQ = 480
rows_out = []


def label(num, den):
    return f"{num}/{den}"


# 1. The rhythm set, with the MIDI files' time signatures per beat.
rows = list(csv.DictReader(open(os.path.join(data, "beats", "manifest.tsv")), delimiter="\t"))
for index, r in enumerate(rows):
    if r["package"] in HELD_OUT:
        continue
    stem = os.path.splitext(os.path.basename(r["path"]))[0]
    mf = mido.MidiFile(os.path.join(data, "beats", "midi", stem + ".mid"), clip=True)
    sigs, t = [(0.0, "4/4")], 0.0
    for msg in mf:   # play order, msg.time in seconds
        t += msg.time
        if msg.type == "time_signature":
            s = label(msg.numerator, msg.denominator)
            if sigs[-1][0] == t or (len(sigs) == 1 and sigs[0][0] == 0 and t == 0):
                sigs[-1] = (t, s)
            elif sigs[-1][1] != s:
                sigs.append((t, s))
    beats = []
    for line in open(r["beats_path"]):
        p = line.rstrip("\n").split("\t")
        bt = float(p[0])
        # The signature in force a little after the beat (events sit on the bar line, as the beat does).
        s = [x for x in sigs if x[0] <= bt + 0.02][-1][1]
        beats.append((bt, p[1], s))
    bpath = os.path.join(out, "beats", stem + ".beats")
    with open(bpath, "w") as f:
        for bt, pos, s in beats:
            f.write(f"{bt:.6f}\t{pos}\t{s}\n")
    meters = list(dict.fromkeys(b[2] for b in beats))
    rows_out.append({"path": r["path"], "beats_path": bpath, "bpm": r["bpm"], "meter": ",".join(meters),
                     "set": "rhythm", "split": "even" if index % 2 == 0 else "odd", "source": r["package"] + ":" + r["source"]})

# 2. Chorales re-barred.
from music21 import corpus, meter as m21meter

keyrows = list(csv.DictReader(open(os.path.join(data, "key", "manifest.tsv")), delimiter="\t"))
VOICES = ["soprano", "alto", "tenor", "bass"]
PROGRAMS = [40, 40, 41, 42]
ACCOMPANIMENT = [0, 46, 24, 4]


def chorale(src):
    s = corpus.parse(src)
    ts = s.recurse().getElementsByClass(m21meter.TimeSignature)
    if not ts:
        return None
    num, den = ts[0].numerator, ts[0].denominator
    if den != 4 or num not in (3, 4):
        return None
    parts = {}
    for p in s.parts:
        name = (p.partName or "").strip().lower()
        if name in VOICES and name not in parts:
            parts[name] = p
    if len(parts) != 4:
        return None
    ms = parts["soprano"].getElementsByClass("Measure")
    pickup = float(ms[1].offset) if ms and ms[0].duration.quarterLength < num - 1e-6 and len(ms) > 1 else 0.0
    voices = []
    for name in VOICES:
        notes = []
        for n in parts[name].stripTies().flatten().notes:
            if n.duration.isGrace or n.quarterLength <= 0 or not hasattr(n, "pitch"):
                continue
            o = float(n.offset) - pickup
            if o < 0:
                continue
            notes.append((o, float(n.quarterLength), n.pitch.midi))
        voices.append(notes)
    return num, voices


def warp(x, compound):
    """Chorale time (quarters) to beats: simple 1:1; compound: the first half of each beat takes 2/3."""
    if not compound:
        return x
    b = int(x // 1)
    f = x - b
    return b + (f * 4 / 3 if f <= 0.5 else 2 / 3 + (f - 0.5) * 2 / 3)


def sig_parts(sig):
    num, den = map(int, sig.split("/"))
    compound = den == 8 and num % 3 == 0
    beats_per_bar = num // 3 if compound else (2 if sig == "2/2" else num)
    return num, den, compound, beats_per_bar


def write_piece(name, voices, plan, bpm, program):
    """plan: [(first chorale quarter, signature)] with the last entry's end at the piece's end; returns beats."""
    length = min(64.0, max(o + d for v in voices for o, d, _ in v))
    # Segments: (start quarter, end quarter, signature); quarters per beat: 2 in 2/2, else 1.
    segs = [(q, plan[i + 1][0] if i + 1 < len(plan) else length, s) for i, (q, s) in enumerate(plan)]
    sec_per_beat = 60 / bpm
    events, beats, sigs = [], [], []
    t0_beat = 0.0   # beats elapsed at the start of each segment
    def to_ticks(beat):
        return int(round(beat * TPQ))
    for q0, q1, sig in segs:
        num, den, compound, bpb = sig_parts(sig)
        qpb = 2 if sig == "2/2" else 1   # chorale quarters per beat
        sigs.append((to_ticks(t0_beat), num, den))
        def at(q):   # chorale quarter -> beats from the start of the piece
            return t0_beat + warp((q - q0) / qpb, compound) if qpb == 1 else t0_beat + (q - q0) / qpb
        for v, notes in enumerate(voices):
            for o, d, p in notes:
                if q0 <= o < q1:
                    a, b = at(o), at(min(o + d, q1))
                    if b > a:
                        events.append((to_ticks(a), v, p, 80, max(1, to_ticks(b) - to_ticks(a) - 12)))
        nbeats = int(round((q1 - q0) / qpb))
        sub = 3 if compound else 2
        for k in range(nbeats):
            q = q0 + k * qpb
            sounding = [p for notes in voices for o, d, p in notes if o <= q + 1e-6 < o + d]
            beat = t0_beat + k
            beats.append((beat, k % bpb + 1, sig))
            if not sounding:
                continue
            bass, upper = min(sounding), sorted(set(sounding))[1:]
            down = k % bpb == 0
            events.append((to_ticks(beat), 4, bass, 92 if down else 72, to_ticks(1 / sub) - 12))
            if down and bass - 12 >= 28:
                events.append((to_ticks(beat), 4, bass - 12, 92, to_ticks(1 / sub) - 12))
            for j in range(1, sub):
                for p in upper:
                    events.append((to_ticks(beat + j / sub), 4, p, 54, to_ticks(1 / sub) - 12))
        t0_beat += nbeats
    mf = mido.MidiFile(ticks_per_beat=TPQ)
    tr = mido.MidiTrack()
    mf.tracks.append(tr)
    msgs = [(0, mido.MetaMessage("set_tempo", tempo=int(round(sec_per_beat * 1e6))))]
    for tick, num, den in sigs:
        msgs.append((tick, mido.MetaMessage("time_signature", numerator=num, denominator=den)))
    for ch, prog in enumerate(PROGRAMS + [program]):
        msgs.append((0, mido.Message("program_change", channel=ch, program=prog)))
    for tick, ch, p, vel, dur in events:
        msgs.append((tick, mido.Message("note_on", channel=ch, note=p, velocity=vel)))
        msgs.append((tick + dur, mido.Message("note_off", channel=ch, note=p, velocity=0)))
    msgs.sort(key=lambda m: (m[0], 0 if m[1].is_meta else (1 if m[1].type == "note_off" else 2)))
    last = 0
    for tick, msg in msgs:
        tr.append(msg.copy(time=tick - last))
        last = tick
    mid = os.path.join(out, "beats", "midi", name + ".mid")
    mf.save(mid)
    lead = 0.0
    return mid, [(lead + b * sec_per_beat, pos, sig) for b, pos, sig in beats]


def render(job):
    mid, wav = job
    tmp = wav + ".f32.wav"
    subprocess.run(["fluidsynth", "-n", "-i", "-q", "-R", "1", "-C", "1", "-g", "0.2", "-r", "44100",
                    "-O", "float", "-T", "wav", "-F", tmp, SOUNDFONT, mid], check=True, capture_output=True)
    subprocess.run(["sox", "-V1", "-R", tmp, "-b", "16", "-e", "signed-integer", wav, "channels", "1", "gain", "-n", "-1"], check=True)
    os.remove(tmp)
    with wave.open(wav) as w:
        return w.getnframes() / w.getframerate()


four, three = [], []
for r in keyrows:
    if len(four) >= 60 and len(three) >= 22:
        break
    c = chorale(r["source"])
    if c is None:
        continue
    (four if c[0] == 4 else three).append((r["source"], c[1]))
print(f"metre-data: {len(four)} chorales in 4/4, {len(three)} in 3/4", file=sys.stderr)
rng = random.Random(21)
QUOTA = {"4/4": 8, "2/4": 8, "2/2": 8, "6/8": 10, "12/8": 8, "3/4": 10, "9/8": 10}
CHANGES = [("2/4", "6/8"), ("4/4", "12/8"), ("6/8", "2/4"), ("12/8", "4/4"), ("4/4", "3/4"), ("6/8", "9/8"),
           ("2/2", "6/8"), ("3/4", "6/8")]
pool4, pool3 = iter(four), iter(three)
jobs, pieces = [], []
n = 0
def tempo(sig):
    num, den, compound, bpb = sig_parts(sig)
    if compound:
        return rng.uniform(48, 92)
    return rng.uniform(60, 88) if sig == "2/2" else rng.uniform(66, 126)
for sig, count in QUOTA.items():
    for k in range(count):
        src, voices = next(pool3) if sig in ("3/4", "9/8") else next(pool4)
        plan = [(0.0, sig)]
        pieces.append((f"derived-{sig.replace('/', '-')}-{k:02d}", src, voices, plan, tempo(sig), k))
for k, (a, b) in enumerate(CHANGES * 2):
    src, voices = next(pool4)
    length = min(64.0, max(o + d for v in voices for o, d, _ in v))
    # The change at a bar line of both signatures (a multiple of 4 and 3 chorale quarters... of 12) near the middle.
    half = max(12.0, 12 * round(length / 2 / 12))
    plan = [(0.0, a), (half, b)]
    pieces.append((f"derived-{a.replace('/', '-')}-to-{b.replace('/', '-')}-{k:02d}", src, voices, plan, tempo(a), k))
for name, src, voices, plan, bpm, k in pieces:
    mid, beats = write_piece(name, voices, plan, bpm, ACCOMPANIMENT[k % 4])
    wav = os.path.join(out, "beats", name + ".wav")
    bpath = os.path.join(out, "beats", name + ".beats")
    with open(bpath, "w") as f:
        for bt, pos, s in beats:
            f.write(f"{bt:.6f}\t{pos}\t{s}\n")
    jobs.append((mid, wav))
    rows_out.append({"path": wav, "beats_path": bpath, "bpm": f"{bpm:.2f}", "meter": ",".join(dict.fromkeys(p[1] for p in plan)),
                     "set": "derived", "split": "even" if k % 2 == 0 else "odd", "source": "music21:" + src})
with ProcessPoolExecutor(max_workers=2) as ex:
    durs = list(ex.map(render, jobs))
print(f"metre-data: {len(jobs)} derived pieces, {sum(durs) / 60:.1f} min; {len(rows_out) - len(jobs)} of the rhythm set", file=sys.stderr)
with open(os.path.join(out, "beats", "manifest.tsv"), "w") as f:
    cols = ["path", "beats_path", "bpm", "meter", "set", "split", "source"]
    f.write("\t".join(cols) + "\n")
    for r in rows_out:
        f.write("\t".join(str(r[c]) for c in cols) + "\n")
PY
{ echo "$VERSION"; date -u +%Y-%m-%dT%H:%M:%SZ; } >"$out/READY"
echo "$out"
