#!/usr/bin/env bash
# conv2d's bf16 weights gradient over groups of samples (one GEMM over the group's
# im2col, dW's fp32 sums written once a group) against one GEMM per sample, built from
# this commit (NEW, build/bench) and from cd0b6e7 (OLD=path/to/its bench), alternating
# OLD and NEW on an otherwise idle machine: ResNet-18's bf16 training step at batch 8,
# three rounds: the step, and the convolutions' forward, backward data and backward
# weights inside it. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, 2 threads. Run from the
# repository root after a Release build:
#   OLD=/path/to/cd0b6e7/build/bench bash results/cpu-2core-zen4/training/run_conv_bwd16_groups.sh
set -eu
: "${OLD:?give OLD=path to a bench built from cd0b6e7}"
D=results/cpu-2core-zen4/training
E="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"
lscpu > $D/lscpu.txt
for r in 1 2 3; do
  for side in old new; do
    bench=build/bench
    [ $side = old ] && bench=$OLD
    $E $bench run configs/resnet18.yaml --batch 8 --pass train --dtype bf16 --backend cpu --threads 2 \
        --csv $D/resnet18_b8.groups16_$side$r.csv --no-progress > $D/resnet18_b8.groups16_$side$r.txt 2>&1
  done
done
/usr/bin/python3 - $D/resnet18_b8.groups16_{old,new}{1,2,3}.csv <<'PY' | tee $D/conv_bwd16_groups_summary.txt
import csv, os, sys
for f in sys.argv[1:]:
    rows = list(csv.DictReader(open(f)))
    step = [r for r in rows if r["mode"] == "chained"][0]
    def conv(parts):
        return sum(float(r["median_us"] or 0) for r in rows
                   if r["mode"] == "inmodel" and r["kind"] == "conv2d" and parts(r["part"])) / 1e3
    print("%-32s step %7.1f ms; conv2d inside it: forward %5.1f, backward data %5.1f, backward weights %5.1f ms" % (
        os.path.basename(f), float(step["median_us"]) / 1e3, conv(lambda p: p == "forward"),
        conv(lambda p: p == "backward data"), conv(lambda p: p in ("backward weights", "backward"))))
PY
