#!/usr/bin/env bash
# Live-matching benchmark (issue "Live matching"): time from a catalog track's start to its first
# correct match (clean and with 5 dB speech babble), false matches over every non-catalog track of the
# corpus (all of it back to back, about 82 minutes), processing cost, and memory over a 30-minute
# stream — all through the streaming session that `earmark listen` runs (earmark-listen-bench) — then
# the CPU share of a real `earmark listen` recording a private PulseAudio daemon's virtual microphone
# while music plays into it in real time.
#
#   tools/listen-bench.sh                  # 40 tracks, 30-min memory stream, 120 s of real-time listening
#   TRACKS=20 MINUTES=10 REALTIME=60 NEGATIVE_MINUTES=15 tools/listen-bench.sh
#   LANDMARKS=triplets tools/listen-bench.sh   # a catalog with the experimental triplet keys (its own file)
#   REALTIME=0 tools/listen-bench.sh           # no real-time listening
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=${EARMARK_CORPUS:-$HOME/.cache/earmark-corpus}
SHARED=${EARMARK_SHARED:-../shared}
TRACKS=${TRACKS:-40}
MINUTES=${MINUTES:-30}
REALTIME=${REALTIME:-120}
NEGATIVE_MINUTES=${NEGATIVE_MINUTES:-1000}
LANDMARKS=${LANDMARKS:-pairs}
case $LANDMARKS in
  pairs) CATALOG=${CATALOG:-/tmp/earmark-bench.earcat} ;;
  triplets) CATALOG=${CATALOG:-/tmp/earmark-bench-triplets.earcat} ;;
  *) echo "LANDMARKS must be pairs or triplets" >&2; exit 2 ;;
esac

bash tools/setup.sh </dev/null
for p in libchromaprint-tools espeak-ng; do
  dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing="${missing:-} $p"
done
python3 -c 'import numpy' 2>/dev/null || missing="${missing:-} python3-numpy"
if [ -n "${missing:-}" ]; then
  apt-get -o DPkg::Lock::Timeout=900 update -q && apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends $missing
fi
[ -f "$ROOT/corpus/public/manifest.tsv" ] || python3 "$SHARED/corpus/build_corpus.py" --set all --root "$ROOT"
# Only the babble noise of a query set is needed here; a tiny set makes it.
BABBLE_SET=$ROOT/queries/babble-only
[ -f "$BABBLE_SET/babble.wav" ] || python3 "$SHARED/corpus/make_queries.py" --corpus "$ROOT/corpus/public" \
  --negative "$ROOT/corpus/negative" --out "$BABBLE_SET" --per-track 1 --negatives 0 --durations 3 --degradations babble5 >/dev/null

swift build -c release --scratch-path .build/tools --product earmark-listen-bench 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]' || true
swift build -c release --scratch-path .build/tools --product earmark 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]' || true
bin="$(swift build -c release --scratch-path .build/tools --show-bin-path)"
"$bin/earmark-listen-bench" --corpus "$ROOT/corpus/public" --negative "$ROOT/corpus/negative" \
  --babble "$BABBLE_SET/babble.wav" --catalog "$CATALOG" --landmarks "$LANDMARKS" --tracks "$TRACKS" --minutes "$MINUTES" --negative-minutes "$NEGATIVE_MINUTES"
[ "$REALTIME" -gt 0 ] || exit 0

# Real-time listening from a virtual microphone: half non-catalog, half catalog music.
work=$(mktemp -d)
export PULSE_RUNTIME_PATH=$work/pulse
mkdir -p "$PULSE_RUNTIME_PATH"
trap 'pulseaudio --kill 2>/dev/null || true; rm -rf "$work"' EXIT
pulseaudio --daemonize=yes --exit-idle-time=-1 -n --use-pid-file=yes --log-target=file:"$PULSE_RUNTIME_PATH/log" \
  --load=module-native-protocol-unix --load="module-null-sink sink_name=virt_out rate=44100 channels=1" \
  --load="module-remap-source source_name=virt_mic master=virt_out.monitor" 2>/dev/null
for _ in $(seq 50); do pactl info >/dev/null 2>&1 && break; sleep 0.1; done
pactl set-default-source virt_mic
half=$((REALTIME / 2))
neg=$(awk -F'\t' 'NR == 2 { print $2 }' "$ROOT/corpus/negative/manifest.tsv")
pos=$(awk -F'\t' 'NR == 2 { print $2 }' "$ROOT/corpus/public/manifest.tsv")
sox "$neg" -r 44100 -c 1 -b 16 "$work/neg.wav" trim 0 "$half"
sox "$pos" -r 44100 -c 1 -b 16 "$work/pos.wav" trim 0 "$half"
sox "$work/neg.wav" "$work/pos.wav" "$work/play.wav"
(sleep 1; paplay -d virt_out "$work/play.wav") &
python3 - "$bin/earmark" "$CATALOG" "$REALTIME" <<'PY'
import resource, subprocess, sys, time
exe, catalog, seconds = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.monotonic()
out = subprocess.run([exe, "listen", "--catalog", catalog, "--json", "--duration", seconds], capture_output=True, text=True)
wall = time.monotonic() - t0
u = resource.getrusage(resource.RUSAGE_CHILDREN)
events = [l for l in out.stdout.splitlines() if '"event":"match"' in l]
print(f"== earmark listen from a virtual microphone, {seconds} s in real time: CPU {100 * (u.ru_utime + u.ru_stime) / wall:.1f} % "
      f"of one core (user {u.ru_utime:.2f} s, system {u.ru_stime:.2f} s, wall {wall:.1f} s), peak RSS {u.ru_maxrss / 1024:.1f} MB, "
      f"{len(events)} match event(s), exit {out.returncode}")
PY
wait
