#!/usr/bin/env bash
# A training step in bf16 (issue 40): ResNet-18 at batch 8 on onednn (oneDNN's bf16
# backward primitives) and on cpu (the fp32 backward kernels on fp32 copies), beside
# torch 1.13's eager step with the model cast to bfloat16, two rounds alternating on an
# otherwise idle machine; then Llama-3.2-1B's prefill step (its config's bf16, 128
# tokens, batch 1) on each backend once. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset,
# 2 threads. Run from the repository root after a Release build:
#   bash results/cpu-2core-zen5/training/run_bf16.sh
set -eu
D=results/cpu-2core-zen5/training
B="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bench"
T="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 scripts/torch_profile_compare.py"
lscpu > $D/lscpu.txt
$B list configs/resnet18.yaml --batch 8 --csv $D/resnet18_b8.layers.csv
for r in 1 2; do
  for b in onednn cpu; do
    $B run configs/resnet18.yaml --batch 8 --pass train --dtype bf16 --backend $b --threads 2 \
        --csv $D/resnet18_b8.bf16_$b$r.csv --no-progress > $D/resnet18_b8.bf16_$b$r.txt 2>&1
  done
  $T --layers $D/resnet18_b8.layers.csv --bench $D/resnet18_b8.bf16_onednn$r.csv --threads 2 --pass train \
      --dtype bf16 --iters 10 --out $D/resnet18_b8.bf16_onednn$r.torch.md
done
for b in cpu onednn; do
  $B run configs/hf/Llama-3.2-1B --tokens 128 --pass train --backend $b --threads 2 --dedupe \
      --csv $D/llama1b.train.$b.csv --no-progress > $D/llama1b.train.$b.txt 2>&1
done
