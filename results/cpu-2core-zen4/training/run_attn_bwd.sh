#!/usr/bin/env bash
# attention's two backward ways on the cpu (issue 40): plain (the scores kept whole per
# head) and blocks (memory-efficient, the scores recomputed by 64x64 blocks), each forced
# with LAYERBENCH_CPU_ATTN_BWD, on Llama-3.2-1B's attention (32 query heads, 8 kv heads
# of 64; batch 1) at 128 to 2048 tokens, causal, and at 512 and 1024 not causal; two
# rounds alternating plain, blocks and torch 1.13's eager attention backward (q k^T,
# the mask, softmax, p v with the kv heads repeated, as Hugging Face's eager attention
# runs it; autograd's backward timed alone, median of 10). OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset, 2 threads, an otherwise idle machine.
# Run from the repository root after a Release build:
#   bash results/cpu-2core-zen4/training/run_attn_bwd.sh
set -eu
D=results/cpu-2core-zen4/training
E="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"
C=$(mktemp -d)
trap 'rm -rf "$C"' EXIT
lscpu > $D/lscpu.txt
out=$D/attn_bwd.txt
echo "# attention backward, Llama-3.2-1B's heads, batch 1: median ms ($(date -u +%F), $(git rev-parse --short HEAD))" > $out
for shape in 128:true 512:true 1024:true 2048:true 512:false 1024:false; do
  t=${shape%:*} causal=${shape#*:}
  cat > $C/attn.yaml <<YAML
name: attn_${t}_$causal
input: [$t, 2048]
layers:
  - {kind: linear, name: k_proj, out_features: 512, bias: false}
  - {kind: linear, name: v_proj, out_features: 512, bias: false, input: input}
  - {kind: attention, name: attn, num_heads: 32, num_key_value_heads: 8, head_dim: 64, causal: $causal, inputs: [input, k_proj, v_proj]}
YAML
  for r in 1 2; do
    line="tokens $t causal $causal round $r:"
    for way in plain blocks; do
      $E LAYERBENCH_CPU_ATTN_BWD=$way build/bench run $C/attn.yaml --pass backward --threads 2 --no-peaks \
          --no-progress --processes 1 --csv $C/r.csv > /dev/null 2>&1
      ms=$(/usr/bin/python3 -c 'import csv, sys
print(*["%.2f" % (float(r["median_us"]) / 1e3) for r in csv.DictReader(open(sys.argv[1]))
        if r["layer_name"] == "attn" and r["mode"] == "warm"])' $C/r.csv)
      line="$line $way $ms"
    done
    ms=$($E /usr/bin/python3 - $t $causal <<'PY'
import sys, time, torch
torch.set_num_threads(2)
t, causal = int(sys.argv[1]), sys.argv[2] == "true"
q = torch.randn(1, 32, t, 64, requires_grad=True)
k = torch.randn(1, 8, t, 64, requires_grad=True)
v = torch.randn(1, 8, t, 64, requires_grad=True)
g = torch.randn(1, 32, t, 64)
mask = torch.full((t, t), float("-inf")).triu(1) if causal else torch.zeros(t, t)
times = []
for i in range(12):
    kk, vv = k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1)
    o = torch.softmax(q @ kk.transpose(-1, -2) / 8.0 + mask, dim=-1) @ vv
    t0 = time.perf_counter()
    o.backward(g)
    times.append(time.perf_counter() - t0)
    q.grad = k.grad = v.grad = None
print("%.2f" % (1e3 * sorted(times[2:])[5]))
PY
)
    echo "$line torch $ms" | tee -a $out
  done
done
