#!/usr/bin/env bash
# Within-song section evaluation set for the structure analysis (issue 21, point 3): songs built here in
# song forms (A-B-A, A-A-B-A, verse-chorus, rondo, bar form ...) from music21's Bach chorales, each section
# a chorale, a repeat the same chorale again, with the truth (section boundaries and labels) written by
# the script that builds the song.
#
#   sections  48 songs. Each song has a form (cycled: ABA, AABA, ABAB, AAB, ABAC, ABCA, ABABCB, ABACA,
#             AABB, ABCBA, ABB, AABAB), a tempo (70-110 quarter notes a minute, drawn with a fixed seed),
#             one instrument set for the whole song (string quartet, organ, woodwinds, brass, piano or
#             choir aahs: General MIDI programs below) and one key. Every letter of the form is a chorale
#             (the rendered MIDI of the key set, tools/music-data.sh, in 4/4, in the order of its manifest;
#             songs of split even draw from even rows, odd songs from odd rows, so the halves share no
#             chorale), transposed to the song's key (the key set's truth: tonic to the song's tonic, by
#             -6..+5 semitones; only chorales of the song's mode), cut to its first 24-48 quarter notes
#             (a whole number of 4/4 bars of the MIDI's grid, the chorale's own length when shorter), notes
#             that cross the cut end there. The sections follow one another without a gap, at the song's
#             tempo; a repeat plays the same notes with the velocities scaled by 0.8-1.0 (drawn per
#             occurrence), as a repeated verse differs in dynamics only.
#             Rendered with FluidSynth and FluidR3_GM (reverb and chorus on, gain 0.2) to 44.1 kHz mono
#             16-bit, peak -1 dBFS.
#
# DIR/sections/manifest.tsv: path, sections_path, form, split (even|odd), bpm, instruments, key, sources
# (the chorales, by letter), duration_s. DIR/sections/*.sections: start_s<TAB>end_s<TAB>label, one section a
# line (the truth). Choose constants on split=even and report split=odd (earmark-music-bench --data DIR
# prints both).
#
#   tools/section-data.sh        # prints the folder (EARMARK_SECTION_DATA, default ~/.cache/earmark-section-data)
#
# Idempotent (READY holds the set version); needs the music set (tools/music-data.sh builds it and its
# venv with mido), fluidsynth with FluidR3_GM and sox. About 3 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VERSION="earmark-section-data 1"
data=$(bash tools/music-data.sh </dev/null)
out=${EARMARK_SECTION_DATA:-$HOME/.cache/earmark-section-data}
if [ "$(head -n 1 "$out/READY" 2>/dev/null)" = "$VERSION" ]; then echo "$out"; exit 0; fi
rm -rf "$out"
mkdir -p "$out/sections/midi"
"$data/venv/bin/python" - "$data" "$out" <<'PY' >&2
import csv, os, random, subprocess, sys, wave
from concurrent.futures import ProcessPoolExecutor
import mido

data, out = sys.argv[1], sys.argv[2]
SOUNDFONT = "/usr/share/sounds/sf2/FluidR3_GM.sf2"
TPQ = 480
SONGS = 48
FORMS = ["ABA", "AABA", "ABAB", "AAB", "ABAC", "ABCA", "ABABCB", "ABACA", "AABB", "ABCBA", "ABB", "AABAB"]
INSTRUMENTS = {"strings": [40, 40, 41, 42], "organ": [19, 19, 19, 19], "woodwinds": [73, 68, 71, 70],
               "brass": [56, 56, 60, 57], "piano": [0, 0, 0, 0], "choir": [52, 52, 52, 52]}
PCS = {"C": 0, "D": 2, "E": 4, "F": 5, "G": 7, "A": 9, "B": 11}


def pitch_class(name):
    pc = PCS[name[0]]
    for c in name[1:]:
        pc += 1 if c == "#" else -1 if c in "b-" else 0
    return pc % 12


def notes_of(path):
    """(start quarter, end quarter, voice, pitch) of a key-set MIDI file in 4/4; None otherwise."""
    mf = mido.MidiFile(path)
    for tr in mf.tracks:
        for m in tr:
            if m.type == "time_signature" and (m.numerator, m.denominator) != (4, 4):
                return None
    notes, tpq = [], mf.ticks_per_beat
    for tr in mf.tracks:
        t, on = 0, {}
        for m in tr:
            t += m.time
            if m.type == "note_on" and m.velocity > 0:
                on[(m.channel, m.note)] = t
            elif m.type in ("note_off", "note_on") and (m.channel, m.note) in on:
                s = on.pop((m.channel, m.note))
                notes.append((s / tpq, t / tpq, m.channel, m.note))
    return sorted(notes) if notes else None


rows = list(csv.DictReader(open(os.path.join(data, "key", "manifest.tsv")), delimiter="\t"))
pools = {(h, mode): [] for h in (0, 1) for mode in ("major", "minor")}
for i, r in enumerate(rows):
    stem = os.path.splitext(os.path.basename(r["path"]))[0]
    n = notes_of(os.path.join(data, "key", "midi", stem + ".mid"))
    if n is None or max(e for _, e, _, _ in n) < 24:
        continue
    pools[(i % 2, r["mode"])].append((r["source"], pitch_class(r["tonic"]), n))
print("section-data: chorales in 4/4 by half and mode: " + ", ".join(f"{k}: {len(v)}" for k, v in pools.items()), file=sys.stderr)

rng = random.Random(2103)
cursor = {k: 0 for k in pools}
jobs, manifest = [], []
for k in range(SONGS):
    half = k % 2
    form = FORMS[(k // 2) % len(FORMS)]
    mode = "major" if (k // 2) % 3 != 2 else "minor"
    pool = pools[(half, mode)]
    letters = list(dict.fromkeys(form))
    chosen = {}
    for letter in letters:
        chosen[letter] = pool[cursor[(half, mode)] % len(pool)]
        cursor[(half, mode)] += 1
    bpm = rng.uniform(70, 110)
    iname = list(INSTRUMENTS)[rng.randrange(len(INSTRUMENTS))]
    programs = INSTRUMENTS[iname]
    tonic = chosen[letters[0]][1]
    lengths = {}
    for letter, (src, pc, notes) in chosen.items():
        end = max(e for _, e, _, _ in notes)
        lengths[letter] = min(4 * int(end // 4), 4 * rng.randint(6, 12))
    events, sections, t = [], [], 0.0
    for letter in form:
        src, pc, notes = chosen[letter]
        shift = (tonic - pc) % 12
        shift = shift - 12 if shift > 5 else shift
        cut = lengths[letter]
        scale = rng.uniform(0.8, 1.0)
        for s, e, v, p in notes:
            if s >= cut:
                continue
            events.append((t + s, t + min(e, cut), v, p + shift, max(1, min(127, int(round(90 * scale))))))
        sections.append((t, t + cut, letter))
        t += cut
    name = f"song-{k:02d}-{form}"
    mf = mido.MidiFile(ticks_per_beat=TPQ)
    tr = mido.MidiTrack()
    mf.tracks.append(tr)
    msgs = [(0, mido.MetaMessage("set_tempo", tempo=int(round(60e6 / bpm)))),
            (0, mido.MetaMessage("time_signature", numerator=4, denominator=4))]
    for ch, prog in enumerate(programs):
        msgs.append((0, mido.Message("program_change", channel=ch, program=prog)))
    for s, e, v, p, vel in events:
        a, b = int(round(s * TPQ)), int(round(e * TPQ))
        msgs.append((a, mido.Message("note_on", channel=v, note=p, velocity=vel)))
        msgs.append((max(a + 1, b - 6), mido.Message("note_off", channel=v, note=p, velocity=0)))
    msgs.sort(key=lambda m: (m[0], 0 if m[1].is_meta else (1 if m[1].type == "note_off" else 2)))
    last = 0
    for tick, msg in msgs:
        tr.append(msg.copy(time=tick - last))
        last = tick
    mid = os.path.join(out, "sections", "midi", name + ".mid")
    mf.save(mid)
    wav = os.path.join(out, "sections", name + ".wav")
    spath = os.path.join(out, "sections", name + ".sections")
    sec = 60 / bpm
    with open(spath, "w") as f:
        for a, b, letter in sections:
            f.write(f"{a * sec:.3f}\t{b * sec:.3f}\t{letter}\n")
    jobs.append((mid, wav))
    names = "C C# D Eb E F F# G Ab A Bb B".split()
    manifest.append({"path": wav, "sections_path": spath, "form": form, "split": "even" if half == 0 else "odd",
                     "bpm": f"{bpm:.2f}", "instruments": iname, "key": f"{names[tonic]} {mode}",
                     "sources": ",".join(f"{l}={chosen[l][0]}" for l in letters), "duration_s": f"{t * sec:.3f}"})


def render(job):
    mid, wav = job
    tmp = wav + ".f32.wav"
    subprocess.run(["fluidsynth", "-n", "-i", "-q", "-R", "1", "-C", "1", "-g", "0.2", "-r", "44100",
                    "-O", "float", "-T", "wav", "-F", tmp, SOUNDFONT, mid], check=True, capture_output=True)
    subprocess.run(["sox", "-V1", "-R", tmp, "-b", "16", "-e", "signed-integer", wav, "channels", "1", "gain", "-n", "-1"], check=True)
    os.remove(tmp)
    with wave.open(wav) as w:
        return w.getnframes() / w.getframerate()


with ProcessPoolExecutor(max_workers=2) as ex:
    durs = list(ex.map(render, jobs))
print(f"section-data: {len(jobs)} songs, {sum(durs) / 60:.1f} min", file=sys.stderr)
with open(os.path.join(out, "sections", "manifest.tsv"), "w") as f:
    cols = ["path", "sections_path", "form", "split", "bpm", "instruments", "key", "sources", "duration_s"]
    f.write("\t".join(cols) + "\n")
    for r in manifest:
        f.write("\t".join(str(r[c]) for c in cols) + "\n")
PY
{ echo "$VERSION"; date -u +%Y-%m-%dT%H:%M:%SZ; } >"$out/READY"
echo "$out"
