# Sourced by tools/bench.sh and tools/scale-bench.sh (not run on its own): the public corpus of
# ../shared/corpus and its query sets, built once and cached under $ROOT (~/.cache/earmark-corpus).
#   corpus_ready                 installs what the corpus scripts need and builds the corpus
#   corpus_queries N NEG         prints the folder of the query set with N clips per track and NEG negatives
#   corpus_skew_queries          prints the folder of the skew set (tools/make_skew_queries.py: 10-s clips)
ROOT=${EARMARK_CORPUS:-$HOME/.cache/earmark-corpus}
SHARED=${EARMARK_SHARED:-../shared}

corpus_ready() {
  bash tools/setup.sh </dev/null
  local need=() p
  for p in libchromaprint-tools espeak-ng python3-numpy; do
    dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || need+=("$p")
  done
  python3 -c 'import numpy' 2>/dev/null && need=("${need[@]/python3-numpy}")
  if [ -n "${need[*]// /}" ]; then
    apt-get -o DPkg::Lock::Timeout=900 update -q >&2
    apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends ${need[*]} >&2
  fi
  [ -f "$ROOT/corpus/public/manifest.tsv" ] || python3 "$SHARED/corpus/build_corpus.py" --set all --root "$ROOT" >&2
}

corpus_queries() {
  local dir=$ROOT/queries/bench-$1-$2
  # Called in $(…), where set -e does not reach: failures return explicitly.
  if [ ! -f "$dir/queries.tsv" ]; then
    python3 "$SHARED/corpus/make_queries.py" --corpus "$ROOT/corpus/public" \
      --negative "$ROOT/corpus/negative" --out "$dir" --per-track "$1" --negatives "$2" >&2 || return 1
  fi
  echo "$dir"
}

corpus_skew_queries() {
  local dir=$ROOT/queries/skew-10s-3
  if [ ! -f "$dir/queries.tsv" ]; then
    EARMARK_SHARED_CORPUS="$SHARED/corpus" python3 tools/make_skew_queries.py \
      --corpus "$ROOT/corpus/public" --out "$dir" --durations 10 --per-track 2 --negatives 0 >&2 || return 1
  fi
  echo "$dir"
}
