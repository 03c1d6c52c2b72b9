#!/usr/bin/env bash
# Validates the cuda backend on a GPU machine, in one command, and writes everything into
# results/<gpu-name>/ (console outputs, CSV + JSON run contexts, the PyTorch side-by-side).
# A lent GPU machine gives minutes, not hours, so the steps run in the order of what is
# least known, each only while the budget (GPU_VALIDATE_BUDGET seconds, default 540)
# leaves room for it, and a step left out says so:
#   1. builds: with the installed Debian packages, or else from deps/debs (carried from a
#      machine with a registry, scripts/fetch_deps.sh) through scripts/build_offline.sh,
#      with the cuda backend required;
#   2. the unit and gpu-labelled tests (the gpu ones must pass, not skip);
#   3. cuDNN's graph API (never run before): bench check of ResNet-18 with --conv-api
#      graph in FP32 and TF32, and bench run at batch 1 with each --conv-api, every
#      candidate logged (LAYERBENCH_CUDNN_LOG=1) into cudnn_<api>.log;
#   4. bench run configs/resnet18.yaml --backend cuda --mode batch,cold at batch 1 and 32
#      (both APIs' candidates), then scripts/torch_compare.py at both: every layer alone
#      and the whole forward (eager and CUDA graph) in PyTorch beside layerbench's;
#   5. training (its backward kernels never run before): bench check of ResNet-18 with
#      --pass train, and its training step at batch 8;
#   6. bench check --backend cuda on every shipped config: FP32, TF32, bf16, fp16;
#   7. bench run configs/resnet18.yaml --backend all at batch 1.
# A failing step is reported and the next one runs; the exit status is the number of
# failed steps.
# usage: scripts/gpu_validate.sh [TARBALL]   (TARBALL: also pack results/<gpu-name>/ into it)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
t0=$(date +%s)
failed=0
budget=${GPU_VALIDATE_BUDGET:-540}
step() { echo; echo "=== [$(($(date +%s) - t0)) s] $*"; }
# room NEED: true when the budget leaves NEED seconds; otherwise says the step is left out
room() {
  local left=$((budget - ($(date +%s) - t0)))
  [ "$left" -ge "$1" ] && return 0
  echo "gpu_validate: left out (budget: ${left} s left of ${budget}, the step needs about $1 s)"
  return 1
}
fail() { echo "gpu_validate: FAILED: $*"; failed=$((failed + 1)); }

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
[ -n "$gpu" ] || { echo "gpu_validate: no GPU (nvidia-smi found none)" >&2; exit 2; }
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | sed -e 's/nvidia //' -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//')
dir=results/$slug
mkdir -p "$dir"
echo "gpu_validate: $gpu -> $dir"

step "context"
{
  echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  # LAYERBENCH_REV: the revision, where the tree was copied without its history
  echo "git: ${LAYERBENCH_REV:-$(git rev-parse --short=12 HEAD 2>/dev/null)$(git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo -dirty)}"
  echo "host cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
  nvcc --version 2>/dev/null | tail -1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1
} | tee "$dir/context.txt"

step "build"
if dpkg-query -W -f='${Status}' libopenblas-openmp-dev 2>/dev/null | grep -q "ok installed"; then
  { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLAYERBENCH_REQUIRE_CUDA=ON && cmake --build build -j"$(nproc)"; } \
    >"$dir/build.log" 2>&1
else
  bash scripts/build_offline.sh >"$dir/build.log" 2>&1
fi
if [ $? != 0 ] || [ ! -x build/bench ]; then
  tail -30 "$dir/build.log"
  echo "gpu_validate: the build failed; nothing else can run" >&2
  exit 100
fi
grep -E "cuda backend|OpenBLAS:" "$dir/build.log"
B=build/bench

step "unit and gpu tests"
(cd build && ctest --output-on-failure -j4 -L 'unit|gpu') >"$dir/ctest.log" 2>&1 || fail "ctest"
tail -8 "$dir/ctest.log"
grep -q "Skipped" "$dir/ctest.log" && fail "a gpu test was skipped on a GPU machine"

step "cuDNN's graph API: check and run ResNet-18"
if room 90; then
  for dt in fp32 tf32; do
    $B check configs/resnet18.yaml --backend cuda --conv-api graph --dtype $dt >"$dir/check_resnet18_graph_$dt.txt" 2>&1 ||
      fail "check resnet18 --conv-api graph $dt"
    echo "graph $dt: $(tail -1 "$dir/check_resnet18_graph_$dt.txt")"
  done
  for api in graph legacy; do
    LAYERBENCH_CUDNN_LOG=1 $B run configs/resnet18.yaml --backend cuda --conv-api $api --batch 1 --no-progress \
      --algo-cache none --csv "$dir/resnet18_conv_api_$api.csv" >"$dir/resnet18_conv_api_$api.txt" \
      2>"$dir/cudnn_$api.log" || fail "run --conv-api $api"
    echo "--conv-api $api: $(grep -c 'left out' "$dir/cudnn_$api.log") candidates left out; $(grep -E '^ *[0-9]+ +[a-z0-9_.]+ +conv2d' "$dir/resnet18_conv_api_$api.txt" | head -3)"
  done
fi

for batch in 1 32; do
  step "bench run resnet18 --backend cuda --mode batch,cold, batch $batch"
  room 60 || continue
  $B run configs/resnet18.yaml --backend cuda --mode batch,cold --batch $batch --no-progress --algo-cache none \
    --csv "$dir/resnet18_cuda_batch$batch.csv" >"$dir/resnet18_cuda_batch$batch.txt" 2>&1 || fail "run cuda batch $batch"
  grep -A8 "^Summary" "$dir/resnet18_cuda_batch$batch.txt" | head -20
done

for batch in 1 32; do
  step "PyTorch side-by-side, batch $batch"
  run=$dir/resnet18_cuda_batch$batch.csv
  [ -s "$run" ] && room 60 || continue
  $B list configs/resnet18.yaml --batch $batch --csv "$dir/resnet18_layers_batch$batch.csv" >/dev/null
  python3 scripts/torch_compare.py --layers "$dir/resnet18_layers_batch$batch.csv" --bench "$run" \
    --out "$dir/torch_compare_batch$batch.csv" 2>"$dir/torch_compare_batch$batch.log" || fail "torch_compare batch $batch"
  tail -4 "$dir/torch_compare_batch$batch.log"
  rm -f "$dir/resnet18_layers_batch$batch.csv"
done

step "training on cuda (never run before): check and run ResNet-18 --pass train"
if room 60; then
  $B check configs/resnet18.yaml --backend cuda --pass train >"$dir/check_resnet18_train.txt" 2>&1 ||
    fail "check resnet18 --pass train"
  echo "check --pass train: $(tail -1 "$dir/check_resnet18_train.txt")"
  $B run configs/resnet18.yaml --backend cuda --pass train --batch 8 --no-progress --algo-cache none \
    --csv "$dir/resnet18_cuda_train_batch8.csv" >"$dir/resnet18_cuda_train_batch8.txt" 2>&1 || fail "run --pass train"
  grep -E "training step median|not run" "$dir/resnet18_cuda_train_batch8.txt" | head -3
fi

step "bench check --backend cuda on every shipped config (fp32, tf32, bf16, fp16)"
for dt in fp32 tf32 bf16 fp16; do
  for cfg in configs/*.yaml; do
    name=$(basename "$cfg" .yaml)
    room 30 || break 2
    $B check "$cfg" --backend cuda --dtype $dt >"$dir/check_${name}_$dt.txt" 2>&1 || fail "check $name $dt"
    echo "$name $dt: $(tail -1 "$dir/check_${name}_$dt.txt")"
  done
done

step "bench run resnet18 --backend all, batch 1"
if room 60; then
  $B run configs/resnet18.yaml --backend all --batch 1 --no-progress --csv "$dir/resnet18_all_batch1.csv" \
    >"$dir/resnet18_all_batch1.txt" 2>&1 || fail "run batch 1"
  grep -A8 "^Summary" "$dir/resnet18_all_batch1.txt"
fi

step "done: $failed failed step(s); results in $dir"
if [ $# -gt 0 ]; then
  tar czf "$1" "$dir" && echo "packed into $1"
fi
exit $failed
