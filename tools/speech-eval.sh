#!/usr/bin/env bash
# Word error rate and speed of Earmark's Whisper recogniser on telephone prompts whose transcripts
# nobody on the project wrote: Debian's asterisk-core-sounds-{en,fr,es} (the transcripts,
# core-sounds-LANG.txt) with the -g722 recordings (16 kHz) and, for English, -wav (8 kHz).
#
#   tools/speech-eval.sh [--count N] [--beams "1 5"] [--sets "en-isolated en-long en-8k fr es"] [--model PATH]
#
# Builds once, cached under ~/.cache/earmark-corpus/speech/: the packages are fetched with
# `apt-get download` and unpacked with `dpkg-deb -x` there (nothing is installed); the sets (see
# tools/speech_eval.py) are N prompts per language sampled with a fixed seed (default 150), the English
# ones also joined into one long file and read from the 8-kHz package. Then builds
# earmark-speech-bench (release, that product only), transcribes every set at each beam size with the
# language given (en, fr, es; one thread) and prints a Markdown table: WER (normalised as
# tools/speech_eval.py says) and × real time (audio seconds / transcription seconds, model loading
# and audio decoding excluded; isolated prompts are padded to 30-s windows as Whisper does).
# SPEECH_EVAL_REUSE=1 keeps the results of runs that finished before (same sets, same bench).
set -euo pipefail

count=150
beams="1 5"
sets="en-isolated en-long en-8k fr es"
model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --count) count="$2"; shift 2 ;;
    --beams) beams="$2"; shift 2 ;;
    --sets) sets="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "speech-eval.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${EARMARK_CORPUS:-$HOME/.cache/earmark-corpus}/speech"
log() { echo "speech-eval.sh: $*" >&2; }

# 1. The packages, unpacked once.
packages=(asterisk-core-sounds-en asterisk-core-sounds-en-g722 asterisk-core-sounds-en-wav
          asterisk-core-sounds-fr asterisk-core-sounds-fr-g722 asterisk-core-sounds-es asterisk-core-sounds-es-g722)
mkdir -p "$cache/debs" "$cache/root"
if [ ! -f "$cache/root/.done" ]; then
  for p in "${packages[@]}"; do
    if ! ls "$cache/debs/${p}"_*.deb >/dev/null 2>&1; then
      log "downloading $p"
      (cd "$cache/debs" && apt-get download "$p" >/dev/null)
    fi
  done
  for deb in "$cache"/debs/*.deb; do dpkg-deb -x "$deb" "$cache/root"; done
  touch "$cache/root/.done"
fi

# 2. The sets, once per sample size.
out="$cache/sets-$count"
if [ ! -f "$out/.done" ]; then
  log "building the sets ($count prompts per language)"
  python3 "$root/tools/speech_eval.py" build "$cache/root" "$out" "$count"
  touch "$out/.done"
fi

# 3. The bench.
bench="${EARMARK_SPEECH_BENCH:-}"
if [ -z "$bench" ]; then
  (cd "$root" && swift build -c release --product earmark-speech-bench >&2)
  bench="$root/.build/release/earmark-speech-bench"
fi
model_args=()
[ -n "$model" ] && model_args=(--model "$model")

# 4. Each set at each beam size.
results="$out/results"
mkdir -p "$results"
echo "| set | prompts, audio | words | beam | WER | × real time |"
echo "|---|---:|---:|---:|---:|---:|"
for s in $sets; do
  lang="${s%%-*}"
  mapfile -t files <"$out/$s/files.txt"
  for b in $beams; do
    r="$results/$s-beam$b.jsonl"
    log "$s, beam $b: ${#files[@]} files"
    [ -n "${SPEECH_EVAL_REUSE:-}" ] && [ -s "$r" ] && tail -1 "$r" | grep -q '"seconds"' && ! tail -1 "$r" | grep -q '"file"' \
      && { python3 "$root/tools/speech_eval.py" score "$out/$s" "$r" "$b"; continue; }
    OPENBLAS_NUM_THREADS=1 "$bench" "${model_args[@]}" --json --language "$lang" --beam "$b" "${files[@]}" >"$r"
    python3 "$root/tools/speech_eval.py" score "$out/$s" "$r" "$b"
  done
done
