#!/usr/bin/env bash
# Whether the search predicts the forward: ResNet-18 at batch 1 in this process
# (--processes 0) with LAYERBENCH_CPU_SEARCH_LOG=1, once per objective; predict.py sets
# each convolution's chosen kernel's time in the search beside its medians alone and
# inside the forward (predict.md). usage: predict.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
B=${1:-build}
out=$(mktemp -d)
for obj in forward alone; do
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE LAYERBENCH_CPU_SEARCH_LOG=1 "$B/bench" run configs/resnet18.yaml \
    --algo-for $obj --algo-cache none --processes 0 --no-progress --csv "$out/$obj.csv" >/dev/null 2>"$out/$obj.err"
done
python3 "$here/predict.py" "$out" >"$here/predict.md"
rm -rf "$out"
