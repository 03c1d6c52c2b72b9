#!/usr/bin/env bash
# The optimizer's update (issue 40, --optimizer): ResNet-18's training step at batch 8 on
# onednn with SGD and with AdamW after the backward, beside torch 1.13's eager step with
# its single-tensor optimizer (foreach=False, learning rate 0 on both sides), two rounds
# alternating ours and torch's on an otherwise idle machine. OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset, 2 threads. Run from the repository root after a Release build:
#   bash results/cpu-2core-zen5/training/run_optimizer.sh
set -eu
D=results/cpu-2core-zen5/training
B="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bench"
T="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 scripts/torch_profile_compare.py"
lscpu > $D/lscpu.txt
$B list configs/resnet18.yaml --batch 8 --csv $D/resnet18_b8.layers.csv
for r in 1 2; do
  for o in sgd adamw; do
    $B run configs/resnet18.yaml --batch 8 --pass train --backend onednn --threads 2 --optimizer $o \
        --csv $D/resnet18_b8.$o$r.csv --no-progress > $D/resnet18_b8.$o$r.txt 2>&1
    $T --layers $D/resnet18_b8.layers.csv --bench $D/resnet18_b8.$o$r.csv --threads 2 --pass train --iters 10 \
        --optimizer $o --out $D/resnet18_b8.$o$r.torch.md
  done
done
