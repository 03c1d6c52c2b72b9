#!/usr/bin/env bash
# The training pass's first figures (issue 40): each layer's forward and backward alone,
# on the cpu backend, OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, one run after another
# on an otherwise idle machine. Run from the repository root after a Release build:
#   bash results/cpu-2core-zen5/training/run.sh
set -eu
D=results/cpu-2core-zen5/training
B="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bench"
lscpu > $D/lscpu.txt
$B sweep configs/resnet18.yaml --batch 1,8 --pass forward,backward --threads 2 --csv $D/resnet18.csv --no-progress > $D/resnet18.txt
$B run configs/resnet50.yaml --pass forward,backward --threads 2 --csv $D/resnet50.csv --no-progress > $D/resnet50.txt
$B run configs/bert_base.yaml --pass forward,backward --threads 2 --csv $D/bert_base.csv --no-progress > $D/bert_base.txt
# torch 1.13's convolution_backward calls of a ResNet-18 training step at batch 8 beside ours
$B list configs/resnet18.yaml --batch 8 --csv $D/resnet18_b8.layers.csv
$B run configs/resnet18.yaml --batch 8 --pass backward --threads 2 --csv $D/resnet18_b8.backward.csv --no-progress > $D/resnet18_b8.backward.txt
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 scripts/torch_profile_compare.py --layers $D/resnet18_b8.layers.csv \
    --bench $D/resnet18_b8.backward.csv --threads 2 --pass backward --iters 10 --out $D/resnet18_b8.torch.md \
    --csv $D/resnet18_b8.torch.csv
