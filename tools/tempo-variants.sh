#!/usr/bin/env bash
# Tempo-change variants of the rhythm set of tools/music-data.sh, for the beat tracker's tempo curve:
# every STEP-th piece of DIR/beats/manifest.tsv (its first 90 s) is played by sox's `tempo -m` (WSOLA,
# pitch kept) in pieces of changing speed, with its beat truth mapped through the same time warp.
#
#   ramp   12 equal pieces, the speed rising linearly to 1.30 × (even rows) or falling to 0.75 × (odd rows)
#   rit    the first 60 % as written, then 8 pieces slowing linearly to 0.65 × (a final ritardando)
#   medley 30 s of the piece, then 30 s of the next piece in the manifest whose tempo differs by 20 % or more
#   slow   the whole 90 s at 0.55 × (slow music: 50–80 BPM for most pieces)
#
#   tools/tempo-variants.sh [STEP]      # default 3 (49 pieces, alternately of the even and odd halves); prints the output folder
#
# Output (EARMARK_TEMPO_VARIANTS, default ~/.cache/earmark-tempo-variants): KIND/beats/manifest.tsv
# (path, beats_path, bpm, source, duration_s, split: even|odd as the source's row of the rhythm set),
# KIND/beats/*.wav (22,050 Hz mono 16-bit) and *.beats (time<TAB>position in bar), so each KIND folder
# is a --data folder of earmark-music-bench (beats only). With a STEP of 3, the bench's even and odd
# halves of a KIND are made of the rhythm set's even and odd pieces.
# The set's bpm is 60 / the median beat interval of the truth (for ramps and medleys only a label).
# Idempotent (a READY file per STEP); needs sox and the rhythm set (tools/music-data.sh builds it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
step=${1:-3}
data=$(bash tools/music-data.sh </dev/null)
out=${EARMARK_TEMPO_VARIANTS:-$HOME/.cache/earmark-tempo-variants}
if [ "$(cat "$out/READY" 2>/dev/null)" = "step $step" ]; then echo "$out"; exit 0; fi
rm -rf "$out"
mkdir -p "$out"
python3 - "$data/beats/manifest.tsv" "$out" "$step" <<'PY' >&2
import csv, os, subprocess, sys, statistics
manifest, out, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = list(csv.DictReader(open(manifest), delimiter='\t'))
def beats(path):
    b = []
    for line in open(path):
        p = line.split('\t')
        b.append((float(p[0]), p[1].strip() if len(p) > 1 else ''))
    return b
def soxlen(path):
    return float(subprocess.check_output(['soxi', '-D', path]).decode())
def render(src, pieces, dst):
    """pieces: (start, length, speed) of the source; returns [(source start, source end, output start, speed)]."""
    parts, warp, at = [], [], 0.0
    for i, (s, l, f) in enumerate(pieces):
        p = f'{dst}.{i}.wav'
        cmd = ['sox', '-R', src, '-r', '22050', p, 'trim', f'{s:.6f}', f'{l:.6f}']
        if abs(f - 1) > 1e-9: cmd += ['tempo', '-m', f'{f:.6f}']
        subprocess.run(cmd, check=True)
        d = soxlen(p)
        warp.append((s, s + l, at, d / l))
        at += d
        parts.append(p)
    subprocess.run(['sox', '-R'] + parts + [dst], check=True)
    for p in parts: os.remove(p)
    return warp
def mapped(truth, warp):
    outb = []
    for s, e, at, scale in warp:
        outb += [(at + (t - s) * scale, pos) for t, pos in truth if s <= t < e]
    return outb
kinds = {k: [] for k in ('ramp', 'rit', 'medley', 'slow')}
for k in kinds: os.makedirs(f'{out}/{k}/beats', exist_ok=True)
for index in range(0, len(rows), step):
    r = rows[index]
    src, truth = r['path'], beats(r['beats_path'])
    length = min(90.0, soxlen(src))
    name = os.path.splitext(os.path.basename(src))[0]
    split = 'even' if index % 2 == 0 else 'odd'
    top = 1.30 if index % 2 == 0 else 0.75
    jobs = {
        'ramp': [(length * i / 12, length / 12, 1 + (top - 1) * (i + 0.5) / 12) for i in range(12)],
        'rit': [(0, 0.6 * length, 1.0)] + [(length * (0.6 + 0.05 * i), 0.05 * length, 1 - 0.35 * (i + 0.5) / 8) for i in range(8)],
        'slow': [(0, length, 0.55)],
    }
    bpm = float(r['bpm'])
    other = next((rows[j] for j in list(range(index + 1, len(rows))) + list(range(index)) if abs(float(rows[j]['bpm']) / bpm - 1) >= 0.2
                  and soxlen(rows[j]['path']) >= 35), None)
    for kind, pieces in jobs.items():
        dst = f'{out}/{kind}/beats/{name}.wav'
        b = mapped(truth, render(src, pieces, dst))
        kinds[kind].append((dst, b, r['bpm'] if kind != 'slow' else str(bpm * 0.55), src, split))
    if other is not None and soxlen(src) >= 35:
        dst = f'{out}/medley/beats/{name}.wav'
        first, second = (src, truth), (other['path'], beats(other['beats_path']))
        parts, warp, at = [], [], 0.0
        for i, (p, tr) in enumerate((first, second)):
            part = f'{dst}.{i}.wav'
            subprocess.run(['sox', '-R', p, '-r', '22050', part, 'trim', '5', '30'], check=True)
            warp.append((p, tr, at))
            at += soxlen(part)
            parts.append(part)
        subprocess.run(['sox', '-R'] + parts + [dst], check=True)
        for p in parts: os.remove(p)
        b = []
        for p, tr, start in warp: b += [(start + t - 5, pos) for t, pos in tr if 5 <= t < 35]
        kinds['medley'].append((dst, b, r['bpm'], src + ' + ' + other['path'], split))
    print(f'{index + 1}/{len(rows)} {name}', file=sys.stderr)
for kind, items in kinds.items():
    with open(f'{out}/{kind}/beats/manifest.tsv', 'w') as m:
        m.write('path\tbeats_path\tbpm\tsource\tduration_s\tsplit\n')
        for dst, b, bpm, src, split in items:
            bp = dst[:-4] + '.beats'
            with open(bp, 'w') as f:
                for t, pos in b: f.write(f'{t:.4f}\t{pos}\n')
            if len(b) >= 3 and kind != 'slow':
                bpm = f'{60 / statistics.median(y[0] - x[0] for x, y in zip(b, b[1:])):.2f}'
            m.write(f'{dst}\t{bp}\t{bpm}\t{src}\t{soxlen(dst):.2f}\t{split}\n')
PY
echo "step $step" >"$out/READY"
echo "$out"
