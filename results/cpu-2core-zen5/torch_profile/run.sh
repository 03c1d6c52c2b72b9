#!/usr/bin/env bash
# Our per-layer figures beside torch.profiler's: ResNet-18 and BERT-base at batch 1 on 2
# threads, both backends in one run, then scripts/torch_profile_compare.py. OpenBLAS's
# environment overrides unset, as users run it. usage: run.sh [BUILD_DIR] (default build)
set -euo pipefail
cd "$(dirname "$0")/../../.."
B=${1:-build}
OUT=results/cpu-2core-zen5/torch_profile
export -n OPENBLAS_CORETYPE OPENBLAS_L2_SIZE 2>/dev/null || true
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
lscpu >"$OUT/lscpu.txt"
for m in resnet18:1 bert_base:2; do
  model=${m%%:*} blas=${m##*:}
  "$B/bench" list "configs/$model.yaml" --csv "$OUT/$model.layers.csv" >/dev/null
  "$B/bench" run "configs/$model.yaml" --backend all --threads 2 --group-by none --no-progress \
    --csv "$OUT/$model.run.csv" >"$OUT/$model.run.txt" 2>&1
  /usr/bin/python3 scripts/torch_profile_compare.py --layers "$OUT/$model.layers.csv" --bench "$OUT/$model.run.csv" \
    --threads 2 --blas-threads "$blas" --out "$OUT/$model.md" --csv "$OUT/$model.compare.csv"
done
