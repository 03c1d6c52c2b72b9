#!/usr/bin/env bash
# BERT-base's training step (128 tokens, batch 1) on cpu and onednn, two rounds
# alternating, after linear's backward moved onto oneDNN's inner product primitives
# (issue 40): the step, and its linear layers' backward halves inside it (part rows).
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, 2 threads. Run from the repository root
# after a Release build:
#   bash results/cpu-2core-zen5/training/run_bert_linear.sh
set -eu
D=results/cpu-2core-zen5/training
B="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bench"
lscpu > $D/lscpu.txt
for r in 1 2; do
  for be in cpu onednn; do
    $B run configs/bert_base.yaml --pass train --backend $be --threads 2 --csv $D/bert_base.train.$be$r.csv \
        --no-progress > $D/bert_base.train.$be$r.txt 2>&1
  done
done
