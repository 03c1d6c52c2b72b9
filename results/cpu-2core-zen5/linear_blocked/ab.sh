#!/usr/bin/env bash
# cpu's blocked GEMM for linear layers against oneDNN, and against the build before it
# (sgemm and the packed tiles), 2 threads. OpenBLAS's environment overrides unset, as
# users run it. Nothing else ran on the machine meanwhile.
# usage: ab.sh NEW_BUILD_DIR OLD_BUILD_DIR (OLD: a build of 9e73cc3, the commit before)
set -euo pipefail
cd "$(dirname "$0")/../../.."
NEW=$1 OLD=$2
OUT=results/cpu-2core-zen5/linear_blocked
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
lscpu >"$OUT/lscpu.txt"
COMMON=(--threads 2 --group-by none --no-progress --algo-cache none)
# both backends side by side, one run each
for m in bert_base:1 vit_b_16:1 resnet18:1 resnet18:8; do
  model=${m%%:*} batch=${m##*:}
  "$NEW/bench" run "configs/$model.yaml" --backend all --batch "$batch" "${COMMON[@]}" \
    --csv "$OUT/$model.b$batch.all.csv" >"$OUT/$model.b$batch.all.txt" 2>&1
done
# bf16 beside fp32 in one run (bf16 linear layers searched against fp32 copies)
"$NEW/bench" run configs/bert_base.yaml --backend cpu --dtype fp32,bf16 "${COMMON[@]}" \
  --csv "$OUT/bert_base.dtypes.csv" >"$OUT/bert_base.dtypes.txt" 2>&1
# the build before and this one, alternating, cpu only
for i in 1 2; do
  for ab in old new; do
    B=$OLD; [ "$ab" = new ] && B=$NEW
    "$B/bench" run configs/bert_base.yaml --backend cpu "${COMMON[@]}" --csv "$OUT/bert_base.$ab$i.csv" >"$OUT/bert_base.$ab$i.txt" 2>&1
  done
done
