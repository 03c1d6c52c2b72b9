#!/usr/bin/env bash
# oneDNN's backward primitives for batch norm, the activations and max pooling (issue 40)
# against the cpu kernels they replace: ResNet-18's training step at batch 8 on onednn,
# built from this commit (NEW, build/bench) and from ac21303 (OLD, where those kinds'
# backward ran the cpu kernels; OLD=path/to/its/bench), two rounds alternating OLD, NEW
# and torch 1.13's eager step on an otherwise idle machine. OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset, 2 threads. Run from the repository root after a Release build:
#   OLD=/path/to/ac21303/build/bench bash results/cpu-2core-zen5/training/run_onednn_bwd.sh
set -eu
: "${OLD:?give OLD=path to a bench built from ac21303}"
D=results/cpu-2core-zen5/training
E="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"
T="$E /usr/bin/python3 scripts/torch_profile_compare.py"
lscpu > $D/lscpu.txt
$E build/bench list configs/resnet18.yaml --batch 8 --csv $D/resnet18_b8.layers.csv
for r in 1 2; do
  for side in old new; do
    bench=build/bench
    [ $side = old ] && bench=$OLD
    $E $bench run configs/resnet18.yaml --batch 8 --pass train --backend onednn --threads 2 \
        --csv $D/resnet18_b8.odbwd_$side$r.csv --no-progress > $D/resnet18_b8.odbwd_$side$r.txt 2>&1
  done
  $T --layers $D/resnet18_b8.layers.csv --bench $D/resnet18_b8.odbwd_new$r.csv --threads 2 --pass train --iters 10 \
      --out $D/resnet18_b8.odbwd_new$r.torch.md
done
# per set: the step's median, and the backward inside it of the kinds that moved to oneDNN
for f in $D/resnet18_b8.odbwd_{old,new}{1,2}.csv; do
  awk -F, -v f="$(basename $f)" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c["mode"] == "chained" { step = $c["median_us"] }
    $c["mode"] == "inmodel" && $c["part"] ~ /^backward/ { b[$c["kind"]] += $c["median_us"] }
    END { printf "%s: step %.1f ms; backward inside it: batchnorm2d %.2f, relu %.2f, maxpool2d %.2f ms\n", f,
          step / 1e3, b["batchnorm2d"] / 1e3, b["relu"] / 1e3, b["maxpool2d"] / 1e3 }' $f
done | tee $D/odbwd_summary.txt
