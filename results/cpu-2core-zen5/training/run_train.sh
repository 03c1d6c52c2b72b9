#!/usr/bin/env bash
# The training step (issue 40, --pass train): ResNet-18 at batch 8 on cpu and onednn
# beside torch 1.13's eager step (forward, loss, backward; no optimizer), two rounds
# alternating ours and torch's on an otherwise idle machine; ResNet-50 and BERT-base's
# steps with each layer's forward and backward inside them. OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset, 2 threads. Run from the repository root after a Release build:
#   bash results/cpu-2core-zen5/training/run_train.sh
set -eu
D=results/cpu-2core-zen5/training
B="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bench"
T="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 scripts/torch_profile_compare.py"
lscpu > $D/lscpu.txt
$B list configs/resnet18.yaml --batch 8 --csv $D/resnet18_b8.layers.csv
for r in 1 2; do
  $B run configs/resnet18.yaml --batch 8 --pass train --backend all --threads 2 --csv $D/resnet18_b8.train$r.csv \
      --no-progress > $D/resnet18_b8.train$r.txt
  $T --layers $D/resnet18_b8.layers.csv --bench $D/resnet18_b8.train$r.csv --threads 2 --pass train --iters 10 \
      --out $D/resnet18_b8.train$r.torch.md
done
$B run configs/resnet50.yaml --pass train --backend all --threads 2 --csv $D/resnet50.train.csv --no-progress > $D/resnet50.train.txt
$B run configs/bert_base.yaml --pass train --threads 2 --csv $D/bert_base.train.csv --no-progress > $D/bert_base.train.txt
