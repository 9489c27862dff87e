#!/usr/bin/env bash
# Sound-classification benchmark: accuracy (speech / music / silence / noise per window) and speed on
# real recordings from Debian packages (tools/classify-data.sh, cached), with the YAMNet model of
# tools/fetch-model.sh, and top-5 agreement with the exact integer reference (and with onnxruntime where its
# integer kernels are exact) on the same input.
#
#   tools/classify-bench.sh            # everything
#   tools/classify-bench.sh --limit 40 # a quick draw (extra earmark-classify-bench flags)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tools/setup.sh </dev/null
model=$(bash tools/fetch-model.sh --with-onnxruntime </dev/null)
python=$(bash tools/fetch-model.sh --with-onnxruntime --print-python </dev/null)
data=$(bash tools/classify-data.sh </dev/null)
swift build -c release --scratch-path .build/tools --product earmark-classify-bench 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]' || true
bench="$(swift build -c release --scratch-path .build/tools --show-bin-path)/earmark-classify-bench"
"$bench" --data "$data" --model "$model" --python "$python" --reference tools/yamnet_reference.py "$@"
