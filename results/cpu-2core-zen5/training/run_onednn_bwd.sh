#!/usr/bin/env bash
# oneDNN's backward primitives for batch norm, the activations and max pooling (issue 40)
# against the cpu kernels they replace: ResNet-18's training step at batch 8 on onednn,
# built from this commit (NEW, build/bench) and from ac21303 (OLD, where those kinds'
# backward ran the cpu kernels; OLD=path/to/its/bench), two rounds alternating OLD, NEW
# and torch 1.13's eager step on an otherwise idle machine. OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset, 2 threads; then BERT-base's step (layer norm, gelu) the same way.
# Run from the repository root after a Release build:
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
# BERT-base's step (128 tokens, batch 1): layer norm and gelu, old and new alternating
for r in 1 2; do
  for side in old new; do
    bench=build/bench
    [ $side = old ] && bench=$OLD
    $E $bench run configs/bert_base.yaml --pass train --backend onednn --threads 2 \
        --csv $D/bert_base.odbwd_$side$r.csv --no-progress > $D/bert_base.odbwd_$side$r.txt 2>&1
  done
done
# per set: the step's median, and the backward (and forward) inside it of the kinds that
# moved to oneDNN, summed over their layers
/usr/bin/python3 - $D/{resnet18_b8,bert_base}.odbwd_{old,new}{1,2}.csv <<'PY' | tee $D/odbwd_summary.txt
import csv, os, sys
for f in sys.argv[1:]:
    step, part = None, {}
    for r in csv.DictReader(open(f)):
        if r["mode"] == "chained":
            step = float(r["median_us"])
        elif r["mode"] == "inmodel" and r["kind"] in ("batchnorm2d", "relu", "maxpool2d", "layernorm", "gelu") and r["part"]:
            k = (r["kind"], "backward" if r["part"].startswith("backward") else r["part"])
            part[k] = part.get(k, 0.0) + float(r["median_us"])
    print(f"{os.path.basename(f)}: step {step / 1e3:.1f} ms; inside it, " +
          ", ".join(f"{k} {p} {v / 1e3:.2f}" for (k, p), v in sorted(part.items())) + " ms")
PY
