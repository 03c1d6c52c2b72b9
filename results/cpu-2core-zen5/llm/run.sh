#!/usr/bin/env bash
# How the figures in this folder were taken (README.md): from the repository's root, with
# build/bench, OpenBLAS's environment as users have it (the two variables the development
# machine sets unset), nothing else running. One decode step at batch 1 after 1024 cached
# tokens in bf16, three runs of each model alternating (the VM's memory bandwidth moves
# between runs): Qwen3-0.6B and gemma-3-1b-it, with Llama-3.2-1B beside them as the
# reference the earlier figures used.
set -euo pipefail
cd "$(dirname "$0")/../../.."
B=build/bench
OUT=results/cpu-2core-zen5/llm
E=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
lscpu >"$OUT/lscpu.txt"
for i in 1 2 3; do
  for m in Qwen3-0.6B gemma-3-1b-it Llama-3.2-1B; do
    "${E[@]}" $B run configs/hf/$m --phase decode --kv-len 1024 --dtype bf16 --dedupe \
      --csv "$OUT/${m}_decode_bf16_$i.csv" >"$OUT/${m}_decode_bf16_$i.txt" 2>&1
  done
done
grep -H 'memory limit per token' "$OUT"/*_decode_bf16_*.txt
