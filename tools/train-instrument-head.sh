#!/usr/bin/env bash
# Trains Earmark's instrument head (Sources/EarmarkClassification/Resources/instrument-head.json, which the
# package ships as a resource and InstrumentActivity uses): one logistic output per instrument family on
# YAMNet's 1024-value window embeddings, trained on the mixes and solo renders of the instrument set
# (tools/instrument-data.sh, cached) with the score-derived activity; per-family thresholds chosen on
# out-of-fold curves of the training pieces (InstrumentHeadTrainer). The shipped head is trained on the
# even pieces, so that `tools/music-bench.sh --instruments --subset odd` stays a held-out figure.
#
#   tools/train-instrument-head.sh                      # even pieces → the shipped head file
#   tools/train-instrument-head.sh --subset odd --out /tmp/head-odd.json   # the reverse split
#   tools/music-bench.sh --instruments --subset odd     # evaluate (--head PATH for another file,
#                                                       # --head labels for the YAMNet label mapping)
#
# Options: --subset even|odd|all, --out PATH; others go to earmark-music-bench (--verbose, --limit N).
# Deterministic on one machine: one BLAS thread, full-batch training from zeros. Window embeddings are
# cached in $EARMARK_SCRATCH/instrument-embeddings (delete it after changing the model). A few minutes on
# one core (most of it computing the embeddings the first time).
#
# EARMARK_SCRATCH: the build folder (default .build/tools).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scratch=${EARMARK_SCRATCH:-.build/tools}
subset=even
out=Sources/EarmarkClassification/Resources/instrument-head.json
rest=()
while [ $# -gt 0 ]; do
  case $1 in
    --subset) subset=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) rest+=("$1"); shift ;;
  esac
done
bash tools/setup.sh </dev/null
data=$(bash tools/instrument-data.sh </dev/null)
model=$(bash tools/fetch-model.sh </dev/null)
swift build -c release --scratch-path "$scratch" --product earmark-music-bench 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]' || true
bench="$(swift build -c release --scratch-path "$scratch" --show-bin-path)/earmark-music-bench"
export OPENBLAS_NUM_THREADS=1
"$bench" --instruments "$data" --model "$model" --subset "$subset" --train-head "$out" \
  --embeddings "$scratch/instrument-embeddings" ${rest[@]+"${rest[@]}"}
