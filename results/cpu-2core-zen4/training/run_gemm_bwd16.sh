#!/usr/bin/env bash
# linear's and conv2d's bf16 backward on the cpu's own vdpbf16ps GEMM tiles (issue 40)
# against the fp32 copies around sgemm that they replace, built from this commit (NEW,
# build/bench) and from b0da571 (OLD, where both ran on fp32 copies; OLD=path/to/its
# bench), alternating OLD and NEW on an otherwise idle machine:
#   1. Llama-3.2-1B's linear shapes at 128 tokens (llama_linears.yaml), each layer's
#      backward alone (--pass backward), three rounds;
#   2. ResNet-18's bf16 training step at batch 8, two rounds: the step, and the
#      convolutions' backward inside it.
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, 2 threads. Run from the repository root
# after a Release build:
#   OLD=/path/to/b0da571/build/bench bash results/cpu-2core-zen4/training/run_gemm_bwd16.sh
set -eu
: "${OLD:?give OLD=path to a bench built from b0da571}"
D=results/cpu-2core-zen4/training
E="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"
lscpu > $D/lscpu.txt
for r in 1 2 3; do
  for side in old new; do
    bench=build/bench
    [ $side = old ] && bench=$OLD
    $E $bench run $D/llama_linears.yaml --pass backward --dtype bf16 --backend cpu --threads 2 \
        --csv $D/llama_linears.bwd16_$side$r.csv --no-progress > $D/llama_linears.bwd16_$side$r.txt 2>&1
  done
done
for r in 1 2; do
  for side in old new; do
    bench=build/bench
    [ $side = old ] && bench=$OLD
    $E $bench run configs/resnet18.yaml --batch 8 --pass train --dtype bf16 --backend cpu --threads 2 \
        --csv $D/resnet18_b8.gemm16_$side$r.csv --no-progress > $D/resnet18_b8.gemm16_$side$r.txt 2>&1
  done
done
/usr/bin/python3 - $D/llama_linears.bwd16_{old,new}{1,2,3}.csv $D/resnet18_b8.gemm16_{old,new}{1,2}.csv <<'PY' | tee $D/gemm_bwd16_summary.txt
import collections, csv, os, sys
for f in sys.argv[1:]:
    rows = list(csv.DictReader(open(f)))
    name = os.path.basename(f)
    if name.startswith("llama"):  # each layer's backward alone: median, GFLOP/s
        alone = [r for r in rows if r["mode"] in ("warm", "batch") and r["part"] == ""]
        print("%-30s %s" % (name, "  ".join("%s %7.2f ms (%4.0f GFLOP/s)" % (
            r["layer_name"], float(r["median_us"]) / 1e3, float(r["flops"]) / float(r["median_us"]) / 1e3)
            for r in alone)))
        continue
    # the step, and the convolutions inside it: their backward (its parts, conversions
    # included), and its forward, data and weights halves apart
    step = [r for r in rows if r["mode"] == "chained"][0]
    def conv(parts):
        return sum(float(r["median_us"] or 0) for r in rows
                   if r["mode"] == "inmodel" and r["kind"] == "conv2d" and parts(r["part"])) / 1e3
    print("%-30s step %7.1f ms; conv2d's backward inside it %6.1f ms (forward %5.1f, data %5.1f, weights %5.1f)" % (
        name, float(step["median_us"]) / 1e3, conv(lambda p: p not in ("", "forward")), conv(lambda p: p == "forward"),
        conv(lambda p: p == "backward data"), conv(lambda p: p in ("backward weights", "backward"))))
PY
