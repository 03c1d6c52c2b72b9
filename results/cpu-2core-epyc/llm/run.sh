#!/usr/bin/env bash
# How the figures in this folder were taken (README.md): from the repository's root,
# with build/bench, OpenBLAS's environment as users have it (the two variables the
# development machine sets unset), nothing else running.
set -euo pipefail
cd "$(dirname "$0")/../../.."
B=build/bench
OUT=results/cpu-2core-epyc/llm
E=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
lscpu >"$OUT/lscpu.txt"
# Llama-3.2-1B, one decode step at batch 1 after 1024 cached tokens: bf16 three times
# (the VM's memory bandwidth moves between runs), fp32 once
for i in 1 2 3; do
  "${E[@]}" $B run configs/hf/Llama-3.2-1B --phase decode --kv-len 1024 --dtype bf16 --dedupe \
    --csv "$OUT/llama1b_decode_bf16_$i.csv" >"$OUT/llama1b_decode_bf16_$i.txt" 2>&1
done
"${E[@]}" $B run configs/hf/Llama-3.2-1B --phase decode --kv-len 1024 --dtype fp32 --dedupe \
  --csv "$OUT/llama1b_decode_fp32.csv" >"$OUT/llama1b_decode_fp32.txt" 2>&1
# its prefill of 128 tokens (time to first token)
"${E[@]}" $B run configs/hf/Llama-3.2-1B --phase prefill --tokens 128 --dtype bf16 --dedupe \
  --csv "$OUT/llama1b_prefill_bf16.csv" >"$OUT/llama1b_prefill_bf16.txt" 2>&1
# the grid: batch 1 and 8 by 512 and 4096 cached tokens
"${E[@]}" $B sweep configs/hf/Llama-3.2-1B --phase decode --batch 1,8 --kv-len 512,4096 --dtype bf16 --dedupe --processes 1 \
  --csv "$OUT/llama1b_grid_bf16.csv" >"$OUT/llama1b_grid_bf16.txt" 2>&1
# Llama-3.1-8B in bf16: 16 GB of weights on this 24 GB machine
"${E[@]}" $B run configs/hf/Llama-3.1-8B --phase decode --kv-len 1024 --dtype bf16 --dedupe --processes 1 \
  --csv "$OUT/llama8b_decode_bf16.csv" >"$OUT/llama8b_decode_bf16.txt" 2>&1
/usr/bin/python3 scripts/plot.py "$OUT/llama1b_grid_bf16.csv" "$OUT/llama1b_decode_bf16_1.csv" --out "$OUT/plots"
