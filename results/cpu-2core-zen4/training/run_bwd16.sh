#!/usr/bin/env bash
# The cpu's 16-bit loops for the activations', add's and mul's backward (issue 40)
# against the fp32 copies they replace: ResNet-18's bf16 training step at batch 8 on the
# cpu backend, built from this commit (NEW, build/bench) and from 4f608c7 (OLD, where
# those kinds' 16-bit backward ran the fp32 kernels on fp32 copies; OLD=path/to/its
# bench), two rounds alternating OLD and NEW on an otherwise idle machine.
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, 2 threads. Run from the repository root
# after a Release build:
#   OLD=/path/to/4f608c7/build/bench bash results/cpu-2core-zen4/training/run_bwd16.sh
set -eu
: "${OLD:?give OLD=path to a bench built from 4f608c7}"
D=results/cpu-2core-zen4/training
E="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"
lscpu > $D/lscpu.txt
for r in 1 2; do
  for side in old new; do
    bench=build/bench
    [ $side = old ] && bench=$OLD
    $E $bench run configs/resnet18.yaml --batch 8 --pass train --dtype bf16 --backend cpu --threads 2 \
        --csv $D/resnet18_b8.bwd16_$side$r.csv --no-progress > $D/resnet18_b8.bwd16_$side$r.txt 2>&1
  done
done
# per set: the step's median, and per kind (relu, add) its backward inside the step with
# its conversions, summed over the kind's layers
/usr/bin/python3 - $D/resnet18_b8.bwd16_{old,new}{1,2}.csv <<'PY' | tee $D/bwd16_summary.txt
import collections, csv, os, sys
for f in sys.argv[1:]:
    rows = list(csv.DictReader(open(f)))
    step = [r for r in rows if r["mode"] == "chained"][0]
    part = collections.defaultdict(float)
    for r in rows:
        if r["mode"] == "inmodel" and r["kind"] in ("relu", "add") and r["part"] not in ("", "forward"):
            part[r["kind"]] += float(r["median_us"] or 0)
    print("%-28s step %8.1f ms; backward inside it: relu %6.2f ms, add %6.2f ms" % (
        os.path.basename(f), float(step["median_us"]) / 1e3, part["relu"] / 1e3, part["add"] / 1e3))
PY
