#!/usr/bin/env bash
# Fine-tuning (issue 40, --freeze): ResNet-18's training step at batch 8 on onednn with
# the stem and layer1-3 frozen (their parameters learn nothing; only layer4 and fc do)
# beside the whole step, and torch 1.13's eager step frozen alike, two rounds alternating
# ours and torch's on an otherwise idle machine. Each convolution's backward inside the
# step comes as its data and weights halves (part rows). OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset, 2 threads. Run from the repository root after a Release build:
#   bash results/cpu-2core-zen5/training/run_freeze.sh
set -eu
D=results/cpu-2core-zen5/training
B="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bench"
T="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 scripts/torch_profile_compare.py"
F='conv1,bn1,layer[1-3].*'
lscpu > $D/lscpu.txt
$B list configs/resnet18.yaml --batch 8 --csv $D/resnet18_b8.layers.csv
for r in 1 2; do
  $B run configs/resnet18.yaml --batch 8 --pass train --backend onednn --threads 2 --csv $D/resnet18_b8.whole$r.csv \
      --no-progress > $D/resnet18_b8.whole$r.txt 2>&1
  $T --layers $D/resnet18_b8.layers.csv --bench $D/resnet18_b8.whole$r.csv --threads 2 --pass train --iters 10 \
      --out $D/resnet18_b8.whole$r.torch.md
  $B run configs/resnet18.yaml --batch 8 --pass train --backend onednn --threads 2 --freeze "$F" \
      --csv $D/resnet18_b8.frozen$r.csv --no-progress > $D/resnet18_b8.frozen$r.txt 2>&1
  $T --layers $D/resnet18_b8.layers.csv --bench $D/resnet18_b8.frozen$r.csv --threads 2 --pass train --iters 10 \
      --freeze "$F" --out $D/resnet18_b8.frozen$r.torch.md
done
