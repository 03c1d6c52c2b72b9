#!/usr/bin/env bash
# Llama-3.2-1B's bf16 training step (its config's dtype, a prefill of 128 tokens, batch 1,
# --dedupe) on the cpu backend, built from b0da571 (OLD: linear's backward on fp32 copies
# around sgemm) and from this commit (NEW: on the bf16 GEMM tiles), one run each, OLD
# first, on an otherwise idle machine; wall time and peak resident memory of each run
# from /usr/bin/time. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, 2 threads. Run from
# the repository root after a Release build:
#   OLD=/path/to/b0da571/build/bench bash results/cpu-2core-zen4/training/run_llama_step16.sh
set -eu
: "${OLD:?give OLD=path to a bench built from b0da571}"
D=results/cpu-2core-zen4/training
for side in old new; do
  bench=build/bench
  [ $side = old ] && bench=$OLD
  /usr/bin/time -f "%e s wall, %M KB peak resident" env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
      $bench run configs/hf/Llama-3.2-1B --tokens 128 --pass train --backend cpu --threads 2 --dedupe \
      --csv $D/llama1b.train_bf16.$side.csv --no-progress > $D/llama1b.train_bf16.$side.txt 2>&1
done
