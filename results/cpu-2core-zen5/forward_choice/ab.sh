#!/usr/bin/env bash
# The search's objective A/B on ResNet-18: --algo-for alone and forward alternating, 3
# rounds each at batch 1 and 8, every run searching afresh (--algo-cache none); each
# run's chained median and its convolutions' sums alone and inside the forward into
# ab_summary.txt. OpenBLAS's environment overrides unset. usage: ab.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
B=${1:-build}
out=$(mktemp -d)
: >"$here/ab_summary.txt"
for b in 1 8; do
  for r in 1 2 3; do
    for obj in alone forward; do
      env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$B/bench" run configs/resnet18.yaml --batch $b --algo-for $obj \
        --algo-cache none --group-by kind --no-progress >"$out/run.txt" 2>&1
      echo "b${b}_${obj}_$r $(grep "chained forward median" "$out/run.txt" | awk '{print $4, $5}')" \
        "$(grep -A3 "Alone vs inside" "$out/run.txt" | grep conv2d | awk '{print $3, $4, $5, $6}')" >>"$here/ab_summary.txt"
    done
  done
done
rm -rf "$out"
