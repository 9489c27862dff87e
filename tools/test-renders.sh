#!/usr/bin/env bash
# Renders small pieces for the music-metadata tests with FluidSynth and the FluidR3 General MIDI
# sound font (Debian fluidsynth and fluid-soundfont-gm, installed here when missing: root then). The
# pieces are written note by note below, so their key, tempo, meter, bars and instruments are known:
#
#   $DIR/march.wav   D major, 4/4 at 110 BPM, 20 bars: piano chords on every beat, fingered bass on 1
#                    and 3, drums (kick 1 and 3, snare 2 and 4, closed hi-hat on eighths); I IV V I vi IV V I
#   $DIR/waltz.wav   A minor, 3/4 at 132 BPM, 24 bars: piano only, bass note on 1, chord on 2 and 3; i iv V i
#   $DIR/jig.wav     G major, 6/8 at 66 dotted quarters a minute (eighths at 198), 24 bars: piano melody in
#                    eighths (jig figures: three eighths, quarter and eighth), fingered bass on both beats (the
#                    first louder), piano chord on the second and third eighth of each beat; I IV V I, a bar each
#   $DIR/barcarolle.wav  F major, 12/8 at 60 dotted quarters a minute, 16 bars: the jig's texture four beats a
#                    bar (melody figures in eighths, chord on the second and third eighth of each beat), fingered
#                    bass on every beat, the first of the bar an octave lower and louder; I vi IV V, a bar each
#   $DIR/song.wav    C major, 4/4 at 90 BPM, 24 bars in the form A B A (8 bars each, A played twice note for
#                    note): piano and fingered bass. A: I V vi iii IV I IV V, a melody in quarter and half notes
#                    over block chords on every beat, the bass on 1 and 3; B: vi IV ii V iii vi ii V, a melody
#                    in eighths an octave higher over broken chords (eighths), the bass on every beat
#   $DIR/truth.json  those facts, per piece (the song's sections too: start, end, label)
#   $DIR/READY       written last (first line: set version)
#
# DIR is $EARMARK_TEST_RENDERS, else ~/.cache/earmark-test-renders. Idempotent: with a READY of this set
# version it only prints DIR. Prints DIR on standard output; progress and errors go to standard error.
set -euo pipefail

home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
DIR=${EARMARK_TEST_RENDERS:-$home/.cache/earmark-test-renders}
SET_VERSION="earmark-test-renders 1"
SOUNDFONT=/usr/share/sounds/sf2/FluidR3_GM.sf2

# The jig came later than the set's version 1: a set of version 1 without it is built again.
# So did the song and the barcarolle: a set without them is built again.
ready() { [ -f "$DIR/READY" ] && [ "$(head -n 1 "$DIR/READY")" = "$SET_VERSION" ] && [ -f "$DIR/jig.wav" ] && [ -f "$DIR/song.wav" ] \
  && [ -f "$DIR/barcarolle.wav" ]; }
if ready; then
  echo "$DIR"
  exit 0
fi
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock -w 900 9 || { echo "test-renders.sh: timed out waiting for $DIR/.lock" >&2; exit 1; }
if ready; then
  echo "$DIR"
  exit 0
fi

missing=()
for p in fluidsynth fluid-soundfont-gm sox; do
  dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "test-renders.sh: needs ${missing[*]} (install them as root)" >&2; exit 1; }
  echo "test-renders.sh: installing ${missing[*]}" >&2
  apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends "${missing[@]}" >&2 \
    || { apt-get -o DPkg::Lock::Timeout=900 update -q >&2 \
         && apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends "${missing[@]}" >&2; }
fi
[ -f "$SOUNDFONT" ] || { echo "test-renders.sh: $SOUNDFONT is missing (package fluid-soundfont-gm)" >&2; exit 1; }

work=$(mktemp -d "$DIR/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 - "$work" <<'PY'
import json, struct, sys

out = sys.argv[1]
TPQ = 480


def vlq(n):
    b = [n & 0x7F]
    n >>= 7
    while n:
        b.insert(0, (n & 0x7F) | 0x80)
        n >>= 7
    return bytes(b)


def write_midi(path, bpm, num, events, den_power=2):
    """events: (tick, channel, note, velocity, length ticks); one track, tempo (quarter notes a minute)
    and meter (num / 2**den_power) at tick 0."""
    msgs = [(0, bytes([0xFF, 0x51, 3]) + (60_000_000 // bpm).to_bytes(3, "big")),
            (0, bytes([0xFF, 0x58, 4, num, den_power, 24, 8]))]
    programs = {0: 0, 1: 33}  # channel 0 piano, channel 1 fingered bass; channel 9 drums
    for ch, prog in programs.items():
        msgs.append((0, bytes([0xC0 | ch, prog])))
    for tick, ch, note, vel, length in events:
        msgs.append((tick, bytes([0x90 | ch, note, vel])))
        msgs.append((tick + length, bytes([0x80 | ch, note, 0])))
    msgs.sort(key=lambda m: (m[0], m[1][0] & 0xF0 == 0x90))
    data, last = b"", 0
    for tick, m in msgs:
        data += vlq(tick - last) + m
        last = tick
    data += vlq(TPQ) + bytes([0xFF, 0x2F, 0])
    with open(path, "wb") as f:
        f.write(b"MThd" + struct.pack(">IHHH", 6, 0, 1, TPQ) + b"MTrk" + struct.pack(">I", len(data)) + data)


def triad(root, minor=False):
    return [root, root + (3 if minor else 4), root + 7]


pieces = {}
# March in D major: I IV V I vi IV V I, 20 bars.
D, G, A, Bm = 62, 67, 69, 59
prog = [(D, False), (G, False), (A, False), (D, False), (Bm, True), (G, False), (A, False), (D, False)]
ev = []
bars = 20
for bar in range(bars):
    root, minor = prog[bar % len(prog)]
    t0 = bar * 4 * TPQ
    for beat in range(4):
        t = t0 + beat * TPQ
        for n in triad(root, minor):
            ev.append((t, 0, n, 80 if beat else 96, TPQ - 40))
        if beat in (0, 2):
            ev.append((t, 1, root - 24, 100, 2 * TPQ - 40))
            ev.append((t, 9, 36, 110, 60))
        else:
            ev.append((t, 9, 38, 100, 60))
        for half in (0, TPQ // 2):
            ev.append((t + half, 9, 42, 70, 40))
write_midi(f"{out}/march.mid", 110, 4, ev)
pieces["march"] = {"tonic": "D", "mode": "major", "bpm": 110, "beatsPerBar": 4, "bars": bars,
                   "instruments": ["drums", "bass", "keys"], "absent": ["voice", "brass"]}

# Waltz in A minor: i iv V i, 24 bars, piano only.
Am, Dm, E = 57, 62, 64
prog = [(Am, True), (Dm, True), (E, False), (Am, True)]
ev = []
bars = 24
for bar in range(bars):
    root, minor = prog[bar % len(prog)]
    t0 = bar * 3 * TPQ
    ev.append((t0, 0, root - 12, 96, TPQ - 40))
    for beat in (1, 2):
        for n in triad(root, minor):
            ev.append((t0 + beat * TPQ, 0, n, 72, TPQ - 60))
write_midi(f"{out}/waltz.mid", 132, 3, ev)
pieces["waltz"] = {"tonic": "A", "mode": "minor", "bpm": 132, "beatsPerBar": 3, "bars": bars,
                   "instruments": ["keys"], "absent": ["drums", "voice", "brass"]}
# Jig in G major, 6/8: a beat is a dotted quarter (3 eighths of TPQ / 2 ticks), 66 beats a minute, so
# the quarter note plays at 99 a minute. I IV V I, a bar each.
G, C, D = 67, 72, 74
prog = [(G, False), (C, False), (D, False), (G, False)]
E8 = TPQ // 2
# Melody figures per beat, as scale steps above the chord root: (eighth offsets, lengths in eighths).
figures = [[(0, 1, 0), (1, 1, 2), (2, 1, 4)], [(0, 2, 4), (2, 1, 2)], [(0, 1, 7), (1, 1, 4), (2, 1, 2)],
           [(0, 2, 0), (2, 1, 4)]]
ev = []
bars = 24
for bar in range(bars):
    root, minor = prog[bar % len(prog)]
    for beat in range(2):
        t = (bar * 6 + beat * 3) * E8
        ev.append((t, 1, root - 24, 100 if beat == 0 else 76, 3 * E8 - 40))
        for k in (1, 2):
            for n in triad(root, minor):
                ev.append((t + k * E8, 0, n - 12, 58, E8 - 30))
        for off, length, step in figures[(2 * bar + beat) % len(figures)]:
            ev.append((t + off * E8, 0, root + step, 90 if off == 0 and beat == 0 else 80, length * E8 - 30))
write_midi(f"{out}/jig.mid", 99, 6, ev, den_power=3)
pieces["jig"] = {"tonic": "G", "mode": "major", "bpm": 66, "beatsPerBar": 2, "bars": bars, "timeSignature": "6/8",
                 "instruments": ["bass", "keys"], "absent": ["drums", "voice", "brass"]}
# Barcarolle in F major, 12/8: four dotted-quarter beats a bar at 60 a minute (quarter notes at 90); the bass
# on every beat, the bar's first an octave lower and louder. I vi IV V, a bar each.
F, Dm, Bb, C5 = 65, 62, 70, 72
prog = [(F, False), (Dm, True), (Bb, False), (C5, False)]
ev = []
bars = 16
for bar in range(bars):
    root, minor = prog[bar % len(prog)]
    for beat in range(4):
        t = (bar * 12 + beat * 3) * E8
        ev.append((t, 1, root - 24, 100 if beat == 0 else 72, 3 * E8 - 40))
        if beat == 0:
            ev.append((t, 1, root - 36, 100, 3 * E8 - 40))
        for k in (1, 2):
            for n in triad(root, minor):
                ev.append((t + k * E8, 0, n - 12, 58, E8 - 30))
        for off, length, step in figures[(4 * bar + beat) % len(figures)]:
            ev.append((t + off * E8, 0, root + step, 90 if off == 0 and beat == 0 else 80, length * E8 - 30))
write_midi(f"{out}/barcarolle.mid", 90, 12, ev, den_power=3)
pieces["barcarolle"] = {"tonic": "F", "mode": "major", "bpm": 60, "beatsPerBar": 4, "bars": bars, "timeSignature": "12/8",
                        "instruments": ["bass", "keys"], "absent": ["drums", "voice", "brass"]}
# Song in C major, A B A: 8 bars each at 90 BPM; the second A repeats the first note for note.
C4 = 60
SCALE = [0, 2, 4, 5, 7, 9, 11]
def degree(d):   # scale degree (1 = C) to a MIDI note from C4
    d -= 1
    return C4 + 12 * (d // 7) + SCALE[d % 7]
def chord(d):    # diatonic triad on degree d, root in the octave below C4 ... B4
    return [degree(d), degree(d + 2), degree(d + 4)]
A_PROG, B_PROG = [1, 5, 6, 3, 4, 1, 4, 5], [6, 4, 2, 5, 3, 6, 2, 5]
ev = []
def section(bar0, kind):
    for i in range(8):
        t0 = (bar0 + i) * 4 * TPQ
        d = (A_PROG if kind == "A" else B_PROG)[i]
        notes = chord(d)
        if kind == "A":
            for beat in range(4):
                for n in notes:
                    ev.append((t0 + beat * TPQ, 0, n - 12, 82 if beat == 0 else 70, TPQ - 40))
            for beat in (0, 2):
                ev.append((t0 + beat * TPQ, 1, notes[0] - 24, 100, 2 * TPQ - 40))
            # melody: chord tones, two quarters and a half note
            for off, length, tone in ((0, 1, 2), (1, 1, 1), (2, 2, 0)) if i % 2 == 0 else ((0, 2, 0), (2, 1, 1), (3, 1, 2)):
                ev.append((t0 + off * TPQ, 0, notes[tone] + 12, 96, length * TPQ - 40))
        else:
            for k in range(8):
                ev.append((t0 + k * TPQ // 2, 0, notes[k % 3] - 12, 66, TPQ // 2 - 30))
            for beat in range(4):
                ev.append((t0 + beat * TPQ, 1, notes[0] - 24 + (7 if beat % 2 else 0), 96, TPQ - 40))
            for k in range(8):
                ev.append((t0 + k * TPQ // 2, 0, notes[[2, 1, 0, 1, 2, 1, 0, 2][k]] + 24, 92, TPQ // 2 - 30))
for j, kind in enumerate("ABA"):
    section(8 * j, kind)
write_midi(f"{out}/song.mid", 90, 4, ev)
sec = 8 * 4 * 60 / 90
pieces["song"] = {"tonic": "C", "mode": "major", "bpm": 90, "beatsPerBar": 4, "bars": 24, "timeSignature": "4/4",
                  "instruments": ["bass", "keys"], "absent": ["drums", "voice", "brass"],
                  "sections": [[0, sec, "A"], [sec, 2 * sec, "B"], [2 * sec, 3 * sec, "A"]]}
pieces["march"]["timeSignature"] = "4/4"
pieces["waltz"]["timeSignature"] = "3/4"
for name, p in pieces.items():
    p["beatPeriod"] = 60 / p["bpm"]
    p["beats"] = p["bars"] * p["beatsPerBar"]
json.dump(pieces, open(f"{out}/truth.json", "w"), indent=1)
PY
for piece in march waltz jig song barcarolle; do
  fluidsynth -n -i -q -R 0 -C 0 -g 0.5 -r 44100 -F "$work/$piece.raw.wav" "$SOUNDFONT" "$work/$piece.mid" >/dev/null 2>&1 \
    || { echo "test-renders.sh: fluidsynth failed on $piece" >&2; exit 1; }
  sox "$work/$piece.raw.wav" -r 44100 -c 1 -b 16 "$work/$piece.wav"
  rm "$work/$piece.raw.wav"
done
rm -f "$DIR/READY"
mv "$work/march.wav" "$work/waltz.wav" "$work/jig.wav" "$work/song.wav" "$work/barcarolle.wav" "$work/march.mid" "$work/waltz.mid" \
  "$work/jig.mid" "$work/song.mid" "$work/barcarolle.mid" \
  "$work/truth.json" "$DIR/"
{ echo "$SET_VERSION"; date -u +%Y-%m-%dT%H:%M:%SZ; } >"$DIR/READY"
echo "$DIR"
