#!/usr/bin/env bash
# Builds the benchmark set for Earmark's sound classifier (earmark-classify-bench): about 350 clips
# of exactly 10.0 s, each labelled speech, music, silence or noise.
#
#   speech   110  real recorded speech in five languages, 22 clips each: telephone-system prompts
#                 (asterisk-core-sounds-{en,fr,es}-g722, 16 kHz wideband, two speakers) and the voice
#                 acting of the game Fish Fillets (fillets-ng-data-{cs,nl}, Czech and Dutch: the lines
#                 of the two fish). Prompts, in a fixed hash order, are trimmed of leading and trailing
#                 silence (sox silence, -40 dBFS) and joined with 0.2-s pauses; no synthetic speech.
#   music    110  real music: one 10-s clip per track from the corpus of ../shared/corpus (the Debian
#                 game soundtracks of $EARMARK_CORPUS/corpus/{public,negative}), at a fixed grid offset
#                 (never the first 5 s), skipping passages below -35 dBFS RMS or with more than one
#                 second below -45 dBFS. Without that corpus: several clips per track from pingus-data
#                 (tracker modules rendered by ffmpeg/libopenmpt) and asc-music.
#   silence   50  digital zero (10), 16-bit TPDF dither of zero (10), white noise at -70 dBFS (15) and
#                 at -60 dBFS RMS (15).
#   noise     80  white, pink and brown noise (sox synth) at -30, -20 and -10 dBFS RMS (5 each), and
#                 noise shaped like everyday sounds (5 each): rumble, telephone band, mid band, hiss,
#                 surf (slow amplitude modulation), flutter (fast modulation), rain (random drops on a
#                 pink bed), at -30/-20/-10 dBFS RMS in turn, turned down where a peak would pass -1 dBFS.
#                 Brown noise and rumble are often called silence by YAMNet; they stay "noise".
#
# Output (DIR is $EARMARK_CLASSIFY_DATA, else ~/.cache/earmark-classify-data):
#   DIR/clips/*.wav     mono 16-bit WAV, 10.0 s; music at 44.1 kHz (as its sources), the rest at 16 kHz
#                       (the model's rate, so noise levels are what the model sees)
#   DIR/manifest.tsv    path, category, source, start_s (absolute paths; rows interleave the
#                       categories, so any prefix, e.g. earmark-classify-bench --limit N, is balanced)
#   DIR/details.tsv     path, category, kind (language, package, generator), rate, rms_dbfs, peak_dbfs, note
#   DIR/PACKAGES.tsv    the Debian packages used: package, version, .deb size in bytes
#   DIR/READY           written last (line 1: set version, line 2: music source, line 3: build time)
#
# Deterministic: sorted file lists, hash-ordered prompts, fixed offsets, sox -R (fixed seeds) and
# fixed Python seeds. Idempotent: with a READY of this version it only prints DIR. Downloads about
# 106 MB (asterisk-core-sounds-{en,fr,es}-g722 34 MB, fillets-ng-data-{cs,nl} 72 MB; plus pingus-data
# and asc-music, 22 MB, when the music corpus is missing); the set is about 170 MB. Packages are
# downloaded with apt-get download (never installed) and unpacked with dpkg-deb -x in a temporary folder.
# Needs apt-get, dpkg-deb, ffmpeg, sox/soxi, python3 (standard library only) and flock.
# Prints DIR (or, with --list, the manifest) on standard output; progress and errors go to standard error.
set -euo pipefail

SET_VERSION="earmark-classify-data 1"
PROG=classify-data.sh

usage() {
  cat <<EOF
usage: tools/$PROG [--list | --verify | --help]

Builds (once) and prints the folder of Earmark's sound-classification benchmark set:
about 350 real or generated clips of exactly 10.0 s labelled speech, music, silence or noise.

  (no option)  build the set unless it is ready; print its folder
  --list       the same, but print the path of its manifest.tsv (path, category, source, start_s)
  --verify     check a ready set (counts per category, every clip 10.0 s mono 16-bit); print its folder
  --help       this text

Environment:
  EARMARK_CLASSIFY_DATA   the folder (default ~/.cache/earmark-classify-data)
  EARMARK_CORPUS          root of the music corpus of ../shared/corpus/build_corpus.py
                          (default ~/.cache/earmark-corpus; its corpus/public and corpus/negative are used)
  EARMARK_CLASSIFY_MUSIC  auto (default): the corpus when it is there, else Debian packages;
                          corpus: insist on the corpus; debian: always pingus-data + asc-music.
                          A ready set is kept whatever its music source unless this names another.
EOF
}

mode=build
case "${1:-}" in
  "") ;;
  --list) mode=list ;;
  --verify) mode=verify ;;
  -h|--help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
[ $# -le 1 ] || { usage >&2; exit 2; }

home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
DIR=${EARMARK_CLASSIFY_DATA:-$home/.cache/earmark-classify-data}
CORPUS_ROOT=${EARMARK_CORPUS:-$home/.cache/earmark-corpus}
MUSIC=${EARMARK_CLASSIFY_MUSIC:-auto}
case "$MUSIC" in auto|corpus|debian) ;; *) echo "$PROG: EARMARK_CLASSIFY_MUSIC must be auto, corpus or debian" >&2; exit 2 ;; esac

SPEECH_PACKAGES=(asterisk-core-sounds-en-g722 asterisk-core-sounds-fr-g722 asterisk-core-sounds-es-g722
                 fillets-ng-data-cs fillets-ng-data-nl)
MUSIC_PACKAGES=(pingus-data asc-music)   # only without the corpus

log() { echo "$PROG: $*" >&2; }

ready() {
  [ -f "$DIR/READY" ] && [ "$(sed -n 1p "$DIR/READY")" = "$SET_VERSION" ] || return 1
  [ "$MUSIC" = auto ] || [ "$(sed -n 2p "$DIR/READY")" = "music: $MUSIC" ]
}

finish() {
  if [ "$mode" = list ]; then echo "$DIR/manifest.tsv"; else echo "$DIR"; fi
}

# verify_set DIR: the manifest and the clips agree, every clip is mono 16-bit WAV of exactly 10.0 s
# (by its header and by soxi -D); prints the counts per category to standard error.
verify_set() {
  local dir=$1
  python3 - "$dir" <<'PY'
import os, sys, wave
d = sys.argv[1]
cats = ("speech", "music", "silence", "noise")
minimum = {"speech": 100, "music": 90, "silence": 50, "noise": 80}
bad = []
with open(os.path.join(d, "manifest.tsv"), encoding="utf-8") as f:
    header = f.readline().rstrip("\n")
    rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
if header != "path\tcategory\tsource\tstart_s":
    bad.append(f"manifest header is {header!r}")
counts = dict.fromkeys(cats, 0)
seen = set()
for r in rows:
    if len(r) != 4:
        bad.append(f"row with {len(r)} columns: {r[:1]}"); continue
    path, cat, source, start = r
    if cat not in counts: bad.append(f"{path}: category {cat!r}"); continue
    counts[cat] += 1
    if not os.path.isabs(path) or os.path.dirname(path) != os.path.join(d, "clips"):
        bad.append(f"{path}: not an absolute path in {d}/clips")
    if path in seen: bad.append(f"{path}: listed twice")
    seen.add(path)
    if not source: bad.append(f"{path}: no source")
    try: float(start)
    except ValueError: bad.append(f"{path}: start_s {start!r}")
    try:
        with wave.open(path) as w:
            if w.getnchannels() != 1 or w.getsampwidth() != 2 or w.getframerate() not in (16000, 44100) \
                    or w.getnframes() != 10 * w.getframerate():
                bad.append(f"{path}: {w.getnchannels()} ch, {8 * w.getsampwidth()} bit, {w.getframerate()} Hz, {w.getnframes()} frames")
    except (OSError, EOFError, wave.Error) as e:
        bad.append(f"{path}: {e}")
on_disk = {os.path.join(d, "clips", n) for n in os.listdir(os.path.join(d, "clips"))}
for extra in sorted(on_disk - seen): bad.append(f"{extra}: not in the manifest")
for c in cats:
    if counts[c] < minimum[c]: bad.append(f"only {counts[c]} {c} clips (want at least {minimum[c]})")
print("classify-data.sh: " + ", ".join(f"{c} {counts[c]}" for c in cats) + f"; {len(rows)} clips", file=sys.stderr)
for b in bad[:20]: print(f"classify-data.sh: BAD {b}", file=sys.stderr)
sys.exit(1 if bad else 0)
PY
  # The same durations once more, as sox reads them.
  local wrong
  wrong=$(cd "$dir/clips" && soxi -D *.wav | grep -cvx '10\.000000' || true)
  if [ "$wrong" != 0 ]; then
    log "BAD: $wrong clips are not 10.000000 s long according to soxi -D"
    return 1
  fi
}

if [ "$mode" = verify ]; then
  ready || { log "no ready set of version '$SET_VERSION' in $DIR (run tools/$PROG first)"; exit 1; }
  verify_set "$DIR" || exit 1
  finish
  exit 0
fi

if ready; then
  finish
  exit 0
fi

for tool in apt-get dpkg-deb ffmpeg ffprobe sox soxi python3 flock; do
  command -v "$tool" >/dev/null || { log "$tool is missing (run tools/setup.sh; sox: apt-get install sox)"; exit 1; }
done

mkdir -p "$DIR"
# Several processes may ask at once: one builds, the others wait for it.
exec 9>"$DIR/.lock"
flock -w 1800 9 || { log "timed out waiting for $DIR/.lock"; exit 1; }
if ready; then
  finish
  exit 0
fi

started=$(date +%s)
work=$(mktemp -d "$DIR/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
# apt-get download, run as root into a folder its _apt user cannot write, warns and downloads
# without its sandbox; the warning lands in download.log.
cd "$work"

corpus_ok() {
  local s
  for s in public negative; do
    [ -s "$CORPUS_ROOT/corpus/$s/manifest.tsv" ] || return 1
  done
}
case "$MUSIC" in
  corpus)
    corpus_ok || { log "no music corpus in $CORPUS_ROOT/corpus/{public,negative}: run python3 ../shared/corpus/build_corpus.py --set all (from the project folder), or set EARMARK_CLASSIFY_MUSIC=debian"; exit 1; } ;;
  auto)
    if corpus_ok; then MUSIC=corpus; else
      MUSIC=debian
      log "no music corpus in $CORPUS_ROOT/corpus (../shared/corpus/build_corpus.py --set all builds it); taking music from ${MUSIC_PACKAGES[*]} instead"
    fi ;;
esac

packages=("${SPEECH_PACKAGES[@]}")
[ "$MUSIC" = debian ] && packages+=("${MUSIC_PACKAGES[@]}")

download() {
  if apt-get download "$@" >download.log 2>&1; then return 0; fi
  # Fresh machines may have no package lists yet.
  if [ "$(id -u)" -ne 0 ]; then
    cat download.log >&2
    log "apt-get download $* failed; refresh the package lists as root (apt-get update) and retry"
    return 1
  fi
  log "apt-get download failed; refreshing the package lists"
  apt-get -o DPkg::Lock::Timeout=900 update -q >update.log 2>&1 || { cat update.log >&2; log "apt-get update failed"; return 1; }
  apt-get download "$@" >download.log 2>&1 || { cat download.log >&2; log "apt-get download $* failed"; return 1; }
}

log "building the sound-classification set (version '$SET_VERSION', music from $MUSIC) in $DIR"
log "downloading ${packages[*]}"
download "${packages[@]}"
printf 'package\tversion\tdeb_bytes\n' >PACKAGES.tsv
for pkg in "${packages[@]}"; do
  debs=("$work/${pkg}"_*.deb)
  [ -f "${debs[0]}" ] || { log "apt-get download left no .deb for $pkg"; exit 1; }
  mkdir -p "$work/root/$pkg"
  dpkg-deb -x "${debs[0]}" "$work/root/$pkg" || { log "cannot unpack ${debs[0]}"; exit 1; }
  printf '%s\t%s\n' "$(dpkg-deb -W --showformat='${Package}\t${Version}' "${debs[0]}")" "$(stat -c %s "${debs[0]}")" >>PACKAGES.tsv
  rm -f "${debs[0]}"
done
log "downloaded $(awk -F'\t' 'NR > 1 { s += $3 } END { printf "%.1f", s / 1e6 }' PACKAGES.tsv) MB"

mkdir -p out/clips
cat >build.py <<'PY'
# Builds the clips, manifest.tsv and details.tsv; standard library only; sox and ffmpeg do the audio.
import array, concurrent.futures, hashlib, math, operator, os, random, re, shutil, subprocess, sys, tempfile, time, wave

ROOT, STAGE, FINAL, MUSIC, CORPUS = sys.argv[1:6]
CLIPS = os.path.join(STAGE, "clips")
FINAL_CLIPS = os.path.join(FINAL, "clips")
SECONDS = 10
RATE = 16000            # speech, silence, noise
MUSIC_RATE = 44100
TARGET = {"speech": 110, "music": 110, "silence": 50, "noise": 80}
JOBS = max(2, min(8, os.cpu_count() or 2))
BATCH = 16              # files per ffmpeg process (ffmpeg takes ~0.1 s to start)
TMP = os.path.join(os.path.dirname(STAGE), "tmp")
LITTLE = sys.byteorder == "little"


class Fail(Exception):
    pass


T0 = time.monotonic()


def log(msg):
    print(f"classify-data.sh: [{time.monotonic() - T0:5.1f} s] {msg}", file=sys.stderr, flush=True)


def run(cmd, data=None):
    kw = {"input": data} if data is not None else {"stdin": subprocess.DEVNULL}
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    if p.returncode != 0:
        raise Fail(f"{' '.join(cmd)} failed (exit {p.returncode}): {p.stderr.decode(errors='replace').strip()}")
    return p.stdout


def pcm16(data):
    a = array.array("h")
    a.frombytes(data[: len(data) // 2 * 2])
    if not LITTLE:
        a.byteswap()
    return a


def floats(data):
    a = array.array("f")   # sox raw f32 is in the machine's byte order
    a.frombytes(data[: len(data) // 4 * 4])
    return a


def write_wav(name, rate, samples):
    assert len(samples) == SECONDS * rate, (name, len(samples))
    out = array.array("h", samples)
    if not LITTLE:
        out.byteswap()
    with wave.open(os.path.join(CLIPS, name), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(out.tobytes())


def db(x):
    return 20 * math.log10(x) if x > 0 else float("-inf")


def levels(a, rate):
    """Overall RMS and peak (dBFS) and the RMS of every whole second of 16-bit samples."""
    sums = [sum(map(operator.mul, a[i:i + rate], a[i:i + rate])) for i in range(0, len(a), rate)]
    seconds = [db(math.sqrt(sums[k] / rate) / 32768) for k in range(len(a) // rate)]
    overall = math.sqrt(sum(sums) / len(a)) / 32768 if len(a) else 0.0
    return db(overall), db(max(map(abs, a)) / 32768 if len(a) else 0), seconds


def ffmpeg_batch(jobs):
    """Decodes several files with one ffmpeg: jobs are (input options, path, output options);
    returns the raw output of each, in order."""
    os.makedirs(TMP, exist_ok=True)
    d = tempfile.mkdtemp(dir=TMP)
    cmd = ["ffmpeg", "-nostdin", "-v", "error", "-y"]
    for pre, path, _ in jobs:
        cmd += [*pre, "-i", path]
    outs = []
    for j, (_, _, post) in enumerate(jobs):
        outs.append(os.path.join(d, f"{j}.raw"))
        cmd += ["-map", f"{j}:a:0", *post, outs[-1]]
    try:
        run(cmd)
        data = []
        for o in outs:
            with open(o, "rb") as f:
                data.append(f.read())
        return data
    finally:
        shutil.rmtree(d, ignore_errors=True)


def batched(pool, fn, items):
    """fn over BATCH-sized slices of items, in the pool; the results in order."""
    return [r for part in pool.map(fn, [items[k:k + BATCH] for k in range(0, len(items), BATCH)]) for r in part]


def quantize(xs, gain):
    """Floats (full scale = 1) times gain as 16-bit samples, rounded; returns them and the number clipped."""
    g = gain * 32768
    q = [round(x * g) for x in xs]
    clipped = sum(1 for v in q if v > 32767 or v < -32768)
    if clipped:
        q = [32767 if v > 32767 else -32768 if v < -32768 else v for v in q]
    return array.array("h", q), clipped


def float_rms(xs):
    return math.sqrt(math.fsum(map(operator.mul, xs, xs)) / len(xs))


rows = []   # (category, name, source, start_s, kind, rate, rms, peak, note)


def add(category, name, rate, samples, source, start, kind, note="", measured=None):
    write_wav(name, rate, samples)
    rms, peak, _ = measured or levels(samples, rate)
    rows.append((category, name, source, start, kind, rate, rms, peak, note))


# ---------------------------------------------------------------- speech
ASTERISK_NOT_SPEECH = {"beep", "beeperr", "ascending-2tone", "descending-2tone",
                       "confbridge-join", "confbridge-leave", "tt-monkeys"}   # tones and monkeys
SPEECH = [  # language, package, folder inside it
    ("en", "asterisk-core-sounds-en-g722", "usr/share/asterisk/sounds/en_US_f_Allison"),
    ("fr", "asterisk-core-sounds-fr-g722", "usr/share/asterisk/sounds/fr_CA_f_June"),
    ("es", "asterisk-core-sounds-es-g722", "usr/share/asterisk/sounds/es_MX_f_Allison"),
    ("cs", "fillets-ng-data-cs", "usr/share/games/fillets-ng/sound"),
    ("nl", "fillets-ng-data-nl", "usr/share/games/fillets-ng/sound"),
]
# Fish Fillets: lines of the two fish ("m" small, "v" big, optionally after a level prefix); other
# files are other characters, screams and noises.
FISH_LINE = re.compile(r"^(?:[a-z0-9]+-)?[mv]-[^/]*\.ogg$")
GAP = array.array("h", [0]) * int(0.2 * RATE)
MIN_PROMPT, MAX_PROMPT = int(0.3 * RATE), 12 * RATE


def speech_prompts(lang, pkg, base):
    top = os.path.join(ROOT, pkg, base)
    if not os.path.isdir(top):
        raise Fail(f"{pkg} has no {base}")
    files = []
    for d, _, names in os.walk(top):
        for n in names:
            rel = os.path.relpath(os.path.join(d, n), top)
            if pkg.startswith("asterisk-"):
                if not n.endswith(".g722") or rel.startswith("silence/") or n[:-5] in ASTERISK_NOT_SPEECH:
                    continue
            else:
                parts = rel.split(os.sep)
                if len(parts) != 3 or parts[1] != lang or not FISH_LINE.match(parts[2]):
                    continue
            files.append(rel)
    # A fixed pseudo-random order, so that clips mix prompts of all kinds and scenes.
    files.sort(key=lambda r: (hashlib.sha256(f"{lang}:{r}".encode()).hexdigest(), r))
    return top, files


def prepare_prompts(paths):
    """Decodes to 16 kHz mono (ffmpeg) and trims leading and trailing silence (sox silence, -40 dBFS)."""
    post = ["-vn", "-ac", "1", "-ar", str(RATE), "-c:a", "pcm_s16le", "-f", "s16le"]
    pcms = ffmpeg_batch([(["-f", "g722"] if p.endswith(".g722") else [], p, post) for p in paths])
    return [pcm16(run(["sox", "-D", "-t", "s16", "-L", "-r", str(RATE), "-c", "1", "-", "-t", "s16", "-L", "-",
                       "silence", "1", "0.03", "-40d", "reverse", "silence", "1", "0.03", "-40d", "reverse"], data=pcm))
            for pcm in pcms]


def build_speech(pool):
    per_lang = TARGET["speech"] // len(SPEECH)
    for lang, pkg, base in SPEECH:
        top, files = speech_prompts(lang, pkg, base)
        made, cur, used, i = 0, array.array("h"), [], 0
        while made < per_lang:
            if i >= len(files):
                raise Fail(f"speech {lang}: {pkg} ran out of prompts after {made} clips")
            chunk = files[i:i + BATCH * JOBS]
            i += len(chunk)
            for rel, a in zip(chunk, batched(pool, prepare_prompts, [os.path.join(top, r) for r in chunk])):
                if made == per_lang:
                    break
                if not MIN_PROMPT <= len(a) <= MAX_PROMPT:
                    continue
                if used:
                    cur.extend(GAP)
                cur.extend(a)
                used.append(rel)
                if len(cur) >= SECONDS * RATE:
                    made += 1
                    add("speech", f"speech-{lang}-{made:02d}.wav", RATE, cur[:SECONDS * RATE],
                        f"{pkg}:{base}/{{{','.join(used)}}}", "0", lang, f"{len(used)} prompts")
                    cur, used = array.array("h"), []
        log(f"speech {lang}: {made} clips from {pkg} ({i} of {len(files)} prompts read)")


# ---------------------------------------------------------------- music
MUSIC_EXT = (".it", ".s3m", ".xm", ".mod", ".ogg", ".opus", ".mp3", ".flac", ".wav")
TRACKER_EXT = (".it", ".s3m", ".xm", ".mod")
MIN_RMS_DB, QUIET_DB, MAX_QUIET_SECONDS = -35.0, -45.0, 1


def corpus_tracks():
    tracks = []
    for s in ("public", "negative"):
        m = os.path.join(CORPUS, "corpus", s, "manifest.tsv")
        with open(m, encoding="utf-8") as f:
            col = {k: i for i, k in enumerate(f.readline().rstrip("\n").split("\t"))}
            for k in ("id", "path", "duration_s", "package", "source"):
                if k not in col:
                    raise Fail(f"{m} has no column {k}")
            for line in f:
                c = line.rstrip("\n").split("\t")
                if len(c) < len(col):
                    continue
                tracks.append({"id": c[col["id"]], "path": c[col["path"]], "dur": float(c[col["duration_s"]]),
                               "pkg": c[col["package"]], "src": c[col["source"]]})
    missing = [t["path"] for t in tracks if not os.path.exists(t["path"])]
    if missing:
        raise Fail(f"{len(missing)} corpus files are missing (e.g. {missing[0]}); rebuild the corpus with "
                   "../shared/corpus/build_corpus.py --set all or set EARMARK_CLASSIFY_MUSIC=debian")
    return tracks


def debian_tracks(pool, packages, render_dir):
    """Tracks of the music packages; tracker modules rendered to FLAC by ffmpeg (libopenmpt)."""
    os.makedirs(render_dir, exist_ok=True)
    items = []
    for pkg in packages:
        top = os.path.join(ROOT, pkg)
        for d, _, names in os.walk(top):
            for n in names:
                rel = os.path.relpath(os.path.join(d, n), top)
                if "/music/" in f"/{rel}" and n.lower().endswith(MUSIC_EXT):
                    items.append((pkg, rel))
    items.sort()
    if not items:
        raise Fail(f"no music found in {', '.join(packages)}")

    def probe(item):
        pkg, rel = item
        src = os.path.join(ROOT, pkg, rel)
        stem = re.sub(r"[^A-Za-z0-9]+", "-", os.path.splitext(rel.split("/")[-1])[0]).strip("-")
        path = src
        if rel.lower().endswith(TRACKER_EXT):
            path = os.path.join(render_dir, f"{pkg}-{stem}.flac")
            run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-i", src, "-t", "900", "-vn", "-ar", str(MUSIC_RATE),
                 "-ac", "2", "-c:a", "flac", path])
        out = run(["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", path])
        digest = run(["ffmpeg", "-nostdin", "-v", "error", "-i", path, "-vn", "-ac", "1", "-ar", "8000",
                      "-f", "md5", "-"]).decode().strip()
        return {"id": f"{pkg}-{stem}", "path": path, "dur": float(out.decode().strip() or 0),
                "pkg": pkg, "src": rel, "md5": digest}

    tracks, seen = [], set()
    for t in pool.map(probe, items):
        if t["dur"] < 30 or t["md5"] in seen:      # jingles and exact duplicates
            continue
        seen.add(t["md5"])
        tracks.append(t)
    return tracks


def slot_order(n):
    """Indices 0..n-1 of the 10-s slots of a track, spread: first near 30 %, then golden-ratio steps."""
    order = []
    for j in range(4 * n):
        k = min(n - 1, int(((0.3 + j * 0.381966011250105) % 1.0) * n))
        if k not in order:
            order.append(k)
    return order + [k for k in range(n) if k not in order]


def music_clips(pool, order, target):
    """Clips at fixed slots of every track (start 5 + 10 k s, ending ≥ 1 s before the end), tried in
    slot_order; a track gives up after 6 candidates that are too quiet. First up to target/tracks
    clips per track, then one more per track at a time until there are at least `target` in all.
    Every round decodes the next candidate of every track still short of clips, in batches."""
    post = ["-t", str(SECONDS + 0.5), "-vn", "-ac", "1", "-ar", str(MUSIC_RATE), "-c:a", "pcm_s16le", "-f", "s16le"]
    state = []
    for t in order:
        n = int((t["dur"] - 16) // 10) + 1 if t["dur"] >= 16 else 0
        state.append({"track": t, "slots": slot_order(n), "next": 0, "got": [], "failed": 0})
    limit = -(-target // len(order))
    while True:
        usable = [s for s in state if s["failed"] < 6 and s["next"] < len(s["slots"])]
        todo = [s for s in usable if len(s["got"]) < limit]
        if not todo:
            if not usable or sum(len(s["got"]) for s in state) >= target:
                break
            limit += 1
            continue
        starts = []
        for s in todo:
            starts.append(5 + 10 * s["slots"][s["next"]])
            s["next"] += 1
        pcms = batched(pool, ffmpeg_batch, [(["-ss", str(st)], s["track"]["path"], post) for s, st in zip(todo, starts)])
        for s, start, pcm in zip(todo, starts, pcms):
            a = pcm16(pcm)[:SECONDS * MUSIC_RATE]
            ok = len(a) == SECONDS * MUSIC_RATE
            if ok:
                rms, peak, seconds = levels(a, MUSIC_RATE)
                ok = rms >= MIN_RMS_DB and sum(1 for x in seconds if x < QUIET_DB) <= MAX_QUIET_SECONDS
            if ok:
                s["got"].append((start, a, (rms, peak, seconds)))
            else:
                s["failed"] += 1
    return [s["got"] for s in state], sum(s["failed"] for s in state)


def build_music(pool, packages):
    if MUSIC == "corpus":
        tracks = corpus_tracks()
        where = f"the corpus in {CORPUS}/corpus"
    else:
        tracks = debian_tracks(pool, packages, os.path.join(os.path.dirname(STAGE), "render"))
        where = ", ".join(packages)
    if not tracks:
        raise Fail(f"no music tracks in {where}")
    # Round-robin over packages (sorted), so that a cut keeps every soundtrack.
    by_pkg = {}
    for t in sorted(tracks, key=lambda t: (t["pkg"], t["id"], t["src"])):
        by_pkg.setdefault(t["pkg"], []).append(t)
    lists = [by_pkg[p] for p in sorted(by_pkg)]
    order = [l[r] for r in range(max(map(len, lists))) for l in lists if r < len(l)]
    found, rejected = music_clips(pool, order, TARGET["music"])
    chosen = []
    for r in range(max(map(len, found))):
        for t, clips in zip(order, found):
            if r < len(clips) and len(chosen) < TARGET["music"]:
                chosen.append((t, *clips[r]))
    if len(chosen) < 0.9 * TARGET["music"]:
        raise Fail(f"only {len(chosen)} music clips loud enough in {where}")
    for t, start, a, measured in chosen:
        note = f"corpus {t['id']}" if MUSIC == "corpus" else "rendered by ffmpeg/libopenmpt" if t["src"].lower().endswith(TRACKER_EXT) else ""
        add("music", f"music-{t['id']}-{start:04d}.wav", MUSIC_RATE, a, f"{t['pkg']}:{t['src']}", str(start), t["pkg"], note,
            measured)
    log(f"music: {len(chosen)} clips from {len({c[0]['id'] for c in chosen})} tracks of "
        f"{len(by_pkg)} packages ({where}); {rejected} quiet or short candidates skipped")


# ---------------------------------------------------------------- silence and noise
# Noise comes from one stream per colour made by sox -R (fixed seed): white from 0 s, pink from 600 s,
# brown from 1000 s of the generator, so no two clips share samples. Every kind takes a block of the
# stream: 1 s for filters to settle, then 10 s per clip; start_s is the clip's place in the stream.
STREAM_BASE = {"white": 0, "pink": 600, "brown": 1000}
NOISE_LEVELS = (-30, -20, -10)
# kind, category, colour, sox effects, levels (cycled over the clips), clips. Plain colours get their
# level exactly (white, pink at -10 dBFS clip < 0.2 % of samples); the shaped kinds, whose peaks are
# higher, are turned down where needed to keep every peak at or below -1 dBFS.
PEAK_CAP_DB = -1.0
KINDS = [
    ("white-70dB", "silence", "white", [], (-70,), 15),
    ("white-60dB", "silence", "white", [], (-60,), 15),
    *[(f"{c}-{-lv}dB", "noise", c, [], (lv,), 5) for c in ("white", "pink", "brown") for lv in NOISE_LEVELS],
    ("rumble", "noise", "brown", ["sinc", "20-200"], NOISE_LEVELS, 5),
    ("telephone-band", "noise", "pink", ["sinc", "300-3400"], NOISE_LEVELS, 5),
    ("mid-band", "noise", "white", ["sinc", "500-2000"], NOISE_LEVELS, 5),
    ("hiss", "noise", "white", ["sinc", "4000"], NOISE_LEVELS, 5),
    ("surf", "noise", "pink", ["sinc", "-2500", "tremolo", "0.15", "60"], NOISE_LEVELS, 5),
    ("flutter", "noise", "pink", ["tremolo", "7", "60"], NOISE_LEVELS, 5),
    ("rain", "noise", "pink", ["sinc", "-4000"], NOISE_LEVELS, 5),   # the bed; drops added below
]


def rain(bed, seed):
    """Random drops (decaying noise bursts of 0.5-4 ms, 60 per second on average) on a pink bed."""
    rng = random.Random(f"earmark-classify-rain-{seed}")
    g = 0.02 / float_rms(bed)
    x = [b * g for b in bed]
    t = rng.expovariate(60.0)
    while t < SECONDS:
        amp, tau = 0.1 * (0.25 + 0.75 * rng.random()), rng.uniform(0.0005, 0.004) * RATE
        i0 = int(t * RATE)
        for k in range(min(int(6 * tau), len(x) - i0)):
            x[i0 + k] += amp * math.exp(-k / tau) * rng.uniform(-1.0, 1.0)
        t += rng.expovariate(60.0)
    return x


def build_generated():
    made = {"silence": 0, "noise": 0}
    for i in range(10):
        add("silence", f"silence-zero-{i + 1:02d}.wav", RATE, array.array("h", [0]) * (SECONDS * RATE),
            "generated: digital zero", "0", "zero")
    # 16-bit TPDF dither (sox's default) of digital silence: one 100-s stream, cut in ten.
    dith = pcm16(run(["sox", "-R", "-n", "-r", str(RATE), "-c", "1", "-b", "16", "-t", "s16", "-L", "-",
                      "trim", "0", str(10 * SECONDS), "dither"]))
    for i in range(10):
        a = dith[i * SECONDS * RATE:(i + 1) * SECONDS * RATE]
        if not any(a):
            raise Fail("sox dither produced digital silence")
        add("silence", f"silence-dither-{i + 1:02d}.wav", RATE, a,
            "generated: sox -R -n -r 16000 -b 16 trim 0 100 dither (TPDF, 16-bit)", str(i * SECONDS), "dither")
    made["silence"] += 20

    # Lay the kinds out on the streams.
    cursor = dict(STREAM_BASE)
    blocks = []
    for kind, cat, colour, fx, lvls, n in KINDS:
        blocks.append((kind, cat, colour, fx, lvls, n, cursor[colour]))
        cursor[colour] += 1 + n * SECONDS
    for c, end in cursor.items():
        nxt = [b for b in STREAM_BASE.values() if b > STREAM_BASE[c]]
        if nxt and end > min(nxt):
            raise Fail(f"the {c} noise stream overlaps the next one")
    streams = {}
    for c in STREAM_BASE:
        length = cursor[c] - STREAM_BASE[c]
        streams[c] = run(["sox", "-R", "-D", "-n", "-r", str(RATE), "-c", "1", "-t", "f32", "-",
                          "synth", str(cursor[c]), f"{c}noise", "trim", str(STREAM_BASE[c]), str(length)])
        if len(streams[c]) != 4 * RATE * length:
            raise Fail(f"sox made {len(streams[c])} bytes of {c} noise, not {4 * RATE * length}")
    for kind, cat, colour, fx, lvls, n, at in blocks:
        lo = 4 * RATE * (at - STREAM_BASE[colour])
        raw = streams[colour][lo:lo + 4 * RATE * (1 + n * SECONDS)]
        if fx:
            raw = run(["sox", "-D", "-t", "f32", "-r", str(RATE), "-c", "1", "-", "-t", "f32", "-", *fx], data=raw)
        x = floats(raw)
        for i in range(n):
            seg = list(x[(1 + i * SECONDS) * RATE:(1 + (i + 1) * SECONDS) * RATE])
            if len(seg) != SECONDS * RATE:
                raise Fail(f"{kind}: sox returned too little audio")
            if kind == "rain":
                seg = rain(seg, i)
            level = lvls[i % len(lvls)]
            gain = 10 ** (level / 20) / float_rms(seg)
            if cat == "noise" and fx:
                peak = max(map(abs, seg))
                if gain * peak > 10 ** (PEAK_CAP_DB / 20):
                    gain = 10 ** (PEAK_CAP_DB / 20) / peak
                    level = round(db(gain * float_rms(seg)), 1)
            a, clipped = quantize(seg, gain)
            start = at + 1 + i * SECONDS
            fxs = " " + " ".join(fx) if fx else ""
            extra = " + random drops (Python random, seed earmark-classify-rain-%d)" % i if kind == "rain" else ""
            add(cat, f"{cat}-{kind}-{i + 1:02d}.wav", RATE, a,
                f"generated: sox -R synth {colour}noise (stream {start}-{start + SECONDS} s){fxs}{extra}, {level} dBFS RMS",
                str(start), kind, f"{clipped} samples clipped" if clipped else "")
            made[cat] += 1
    log(f"silence: {made['silence']} clips; noise: {made['noise']} clips (sox -R streams)")


def interleave(rows):
    """Every category spread evenly over the manifest, so that a prefix of it is balanced."""
    cats = ["speech", "music", "silence", "noise"]
    keyed = []
    for ci, c in enumerate(cats):
        mine = [r for r in rows if r[0] == c]
        keyed += [((j + 0.5) / len(mine), ci, r) for j, r in enumerate(mine)]
    return [r for _, _, r in sorted(keyed, key=lambda k: (k[0], k[1]))]


def main():
    packages = sys.argv[6].split() if len(sys.argv) > 6 else []
    with concurrent.futures.ThreadPoolExecutor(JOBS) as pool:
        build_speech(pool)
        build_music(pool, packages)
    build_generated()
    for c, n in TARGET.items():
        got = sum(1 for r in rows if r[0] == c)
        if c != "music" and got != n:
            raise Fail(f"{got} {c} clips, not {n}")
    ordered = interleave(rows)
    fmt = lambda v: "-inf" if v == float("-inf") else f"{v:.2f}"
    with open(os.path.join(STAGE, "manifest.tsv"), "w", encoding="utf-8") as m, \
            open(os.path.join(STAGE, "details.tsv"), "w", encoding="utf-8") as d:
        m.write("path\tcategory\tsource\tstart_s\n")
        d.write("path\tcategory\tkind\trate\trms_dbfs\tpeak_dbfs\tnote\n")
        for cat, name, source, start, kind, rate, rms, peak, note in ordered:
            path = os.path.join(FINAL_CLIPS, name)
            m.write(f"{path}\t{cat}\t{source}\t{start}\n")
            d.write(f"{path}\t{cat}\t{kind}\t{rate}\t{fmt(rms)}\t{fmt(peak)}\t{note}\n")


try:
    main()
except Fail as e:
    log(f"ERROR: {e}")
    sys.exit(1)
PY

music_packages=""
[ "$MUSIC" = debian ] && music_packages="${MUSIC_PACKAGES[*]}"
python3 build.py "$work/root" "$work/out" "$DIR" "$MUSIC" "$CORPUS_ROOT" "$music_packages"
cp PACKAGES.tsv out/

rm -f "$DIR/READY"
rm -rf "$DIR/clips" "$DIR/manifest.tsv" "$DIR/details.tsv" "$DIR/PACKAGES.tsv"
mv out/clips out/manifest.tsv out/details.tsv out/PACKAGES.tsv "$DIR/"
verify_set "$DIR" || { log "the new set failed its checks; it is not marked READY"; exit 1; }
{ echo "$SET_VERSION"; echo "music: $MUSIC"; date -u +%Y-%m-%dT%H:%M:%SZ; } >"$DIR/READY"
log "ready after $(( $(date +%s) - started )) s ($(du -sm "$DIR/clips" | cut -f1) MB of clips)"
finish
