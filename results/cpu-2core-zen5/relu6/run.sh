#!/usr/bin/env bash
# relu6, hardsigmoid and hardswish clamped by comparisons (be37e0a) against the library
# calls they made before: MobileNetV2 at batch 1, the binary of 26240d9 (BASE, built in a
# worktree of that commit) and this one alternating, two rounds, OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset, 2 threads. From the repository root after a Release build:
#   BASE=/path/to/26240d9/build/bench bash results/cpu-2core-zen5/relu6/run.sh
set -eu
D=results/cpu-2core-zen5/relu6
lscpu > $D/lscpu.txt
for r in 1 2; do
  for v in base new; do
    B=$([ $v = base ] && echo "$BASE" || echo build/bench)
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $B run configs/mobilenet_v2.yaml --threads 2 --no-progress \
        --csv $D/mobilenet_v2.$v$r.csv > $D/mobilenet_v2.$v$r.txt
  done
done
