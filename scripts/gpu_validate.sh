#!/usr/bin/env bash
# Validates the cuda backend on a GPU machine, in one command, and writes everything into
# results/<gpu-name>/ (console outputs, CSV + JSON run contexts, the PyTorch side-by-side).
# A lent GPU machine gives minutes, not hours (15 minutes of device time, its start
# included), so the steps run in order of priority, each only while the budget
# (GPU_VALIDATE_BUDGET seconds, default 540) leaves room for it, and a step left out says so:
#   1. builds: with the installed Debian packages, or else from deps/debs (carried from a
#      machine with a registry, scripts/fetch_deps.sh) through scripts/build_offline.sh,
#      with the cuda backend required;
#   2. the unit and gpu-labelled tests (the gpu ones must pass, not skip);
#   3. one bench check --backend cuda per dtype (fp32, tf32, bf16, fp16) of ResNet-18 and
#      BERT-base, then a decoder in bf16: Llama-3.2-1B's decode step (64 cached tokens)
#      and its prefill (64 tokens);
#   4. the PyTorch comparisons (scripts/torch_compare.py, every layer alone and the whole
#      forward, eager and as a CUDA graph): ResNet-18 in fp32 at batch 1 and 32, then in
#      fp16 with PyTorch's channels-last at batch 1 and 32;
#   5. Llama-3.2-1B's bf16 decode step chained on cuda (1024 cached tokens);
#   6. the long tail: training (check and the step of ResNet-18 --pass train), cuDNN's
#      graph API alone (--conv-api graph, every candidate logged), --mode batch,cold,
#      bench check of every other shipped config in each dtype, --backend all.
# After every step, results/<gpu-name>/summary.txt says what each step did, and with
# TARBALL the folder is packed again (written aside, then renamed), so that a run cut
# short keeps what it had done. The summary is printed at the end; the exit status is
# the number of failed steps.
# usage: scripts/gpu_validate.sh [TARBALL]   (TARBALL: also pack results/<gpu-name>/ into it)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
t0=$(date +%s)
failed=0
budget=${GPU_VALIDATE_BUDGET:-540}
tarball=${1:-}
cur=""      # the step running: its name, start, failures, what it left out, whether any of it ran
cur_t=0 cur_fail=0 cur_left=0 cur_ran=0 cur_notes=""
elapsed() { echo $(($(date +%s) - t0)); }
# pack: the folder into TARBALL, written into a new file of its own beside it (mktemp:
# never through a link or over another run's) and renamed, so a cut leaves a whole one
pack() {
  [ -n "$tarball" ] || return 0
  local part
  part=$(mktemp "$tarball.XXXXXX") || { echo "gpu_validate: cannot write beside $tarball" >&2; return 0; }
  if tar czf "$part" "$dir" 2>/dev/null; then
    mv -f "$part" "$tarball"
  else
    rm -f "$part"
    echo "gpu_validate: packing into $tarball failed (a full disk?): it holds the last whole pack; $dir holds all" >&2
  fi
}
# ends the step running: its lines in summary.txt (its outcome, then what it found), then the pack
step_end() {
  [ -n "$cur" ] || return 0
  local status=ok
  [ "$cur_ran" = 0 ] && status="left out by the budget"
  [ "$cur_ran" = 1 ] && [ "$cur_left" -gt 0 ] && status="ok, $cur_left part(s) left out by the budget"
  [ "$cur_fail" -gt 0 ] && status="FAILED ($cur_fail)"
  {
    printf '%5s s  %-58s %s\n' "$(($(date +%s) - cur_t))" "$cur" "$status"
    [ -z "$cur_notes" ] || echo "$cur_notes" | fold -s -w 100 | sed 's/^ */         /'
  } >>"$dir/summary.txt"
  cur=""
  pack
}
step() {
  step_end
  cur=$1 cur_t=$(date +%s) cur_fail=0 cur_left=0 cur_ran=0 cur_notes=""
  echo
  echo "=== [$(elapsed) s] $*"
}
# note TEXT: a figure or outcome for the summary of the step running
note() { cur_notes="$cur_notes $*"; }
# room NEED: true when the budget leaves NEED seconds; otherwise says the part is left out
room() {
  local left=$((budget - $(elapsed)))
  [ "$left" -ge "$1" ] && { cur_ran=1; return 0; }
  echo "gpu_validate: left out (budget: ${left} s left of ${budget}, the step needs about $1 s)"
  cur_left=$((cur_left + 1))
  return 1
}
fail() { echo "gpu_validate: FAILED: $*"; failed=$((failed + 1)); cur_fail=$((cur_fail + 1)); note "FAILED $*;"; }
# finish: ends the step running, prints the summary and exits with the number of failures
finish() {
  step_end
  echo
  echo "=== [$(elapsed) s] done: $failed failure(s); results in $dir${tarball:+, packed into $tarball}"
  echo "seconds  step                                                       outcome"
  cat "$dir/summary.txt"
  exit $((failed > 99 ? 99 : failed))
}
# gone FILE: when bench found no device there, nothing after can run: say so and finish
gone() {
  grep -q "no CUDA device" "$1" 2>/dev/null || return 0
  fail "bench found no CUDA device ($(grep -m1 'no CUDA device' "$1" | cut -c1-100)); the rest cannot run"
  finish
}
# check NAME CONFIG DTYPE [OPTIONS...]: bench check --backend cuda into check_NAME_DTYPE.txt;
# its passed/failed/skipped counts go into the summary (with CHECK_QUIET set, a failure's only)
check() {
  local name=$1 cfg=$2 dt=$3 out
  shift 3
  out=$dir/check_${name}_$dt.txt
  local rc=0
  $B check "$cfg" --backend cuda --dtype "$dt" "$@" >"$out" 2>&1 || rc=$?
  gone "$out"
  local last counts
  last=$(tail -1 "$out")
  echo "$name $dt: $last"
  counts=$(echo "$last" | sed -nE 's/.*; ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped.*/\1\/\2\/\3/p')
  if [ $rc != 0 ]; then
    fail "check $name $dt (${counts:-$(echo "$last" | cut -c1-60)})"
  elif [ -z "${CHECK_QUIET:-}" ]; then
    note "$name $dt $counts;"
  fi
}

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
[ -n "$gpu" ] || { echo "gpu_validate: no GPU (nvidia-smi found none)" >&2; exit 2; }
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | sed -e 's/nvidia //' -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//')
dir=results/$slug
mkdir -p "$dir"
# one run at a time writes the folder (a second would interleave its files and summary)
exec 9<"$dir"
flock -n 9 || { echo "gpu_validate: another run is writing $dir" >&2; exit 2; }
: >"$dir/summary.txt"
echo "gpu_validate: $gpu -> $dir (budget ${budget} s)"

step "context"
cur_ran=1
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
cur_ran=1
if dpkg-query -W -f='${Status}' libopenblas-openmp-dev 2>/dev/null | grep -q "ok installed"; then
  { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLAYERBENCH_REQUIRE_CUDA=ON && cmake --build build -j"$(nproc)"; } \
    >"$dir/build.log" 2>&1
else
  bash scripts/build_offline.sh >"$dir/build.log" 2>&1
fi
if [ $? != 0 ] || [ ! -x build/bench ]; then
  tail -30 "$dir/build.log"
  fail "the build; nothing else can run"
  finish
fi
grep -E "cuda backend|OpenBLAS:" "$dir/build.log"
B=build/bench

step "unit and gpu tests"
cur_ran=1
(cd build && ctest --output-on-failure -j4 -L 'unit|gpu') >"$dir/ctest.log" 2>&1 || fail "ctest"
tail -8 "$dir/ctest.log"
note "$(grep -oE '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$dir/ctest.log" | head -1)"
grep -q "Skipped" "$dir/ctest.log" && fail "a gpu test was skipped on a GPU machine"

step "check ResNet-18 and BERT-base in every dtype"
note "(passed/failed/skipped)"
for dt in fp32 tf32 bf16 fp16; do
  room 15 && check resnet18 configs/resnet18.yaml $dt
done
for dt in fp32 tf32 bf16 fp16; do
  room 20 && check bert_base configs/bert_base.yaml $dt
done

step "check a decoder (Llama-3.2-1B, bf16): decode and prefill"
room 30 && check llama1b_decode configs/hf/Llama-3.2-1B bf16 --phase decode --kv-len 64 --dedupe
room 30 && check llama1b_prefill configs/hf/Llama-3.2-1B bf16 --tokens 64 --dedupe

# torch_side DTYPE BATCH: bench run of ResNet-18 on cuda, then scripts/torch_compare.py beside it
torch_side() {
  local dt=$1 batch=$2 tag=resnet18_cuda_$1_batch$2
  $B run configs/resnet18.yaml --backend cuda --dtype "$dt" --batch "$batch" --mode batch --no-progress --algo-cache none \
    --csv "$dir/$tag.csv" >"$dir/$tag.txt" 2>&1 || { gone "$dir/$tag.txt"; fail "run $dt batch $batch"; return; }
  grep -E "chained forward median" "$dir/$tag.txt" | head -1
  $B list configs/resnet18.yaml --batch "$batch" --csv "$dir/layers_$tag.csv" >/dev/null
  python3 scripts/torch_compare.py --layers "$dir/layers_$tag.csv" --bench "$dir/$tag.csv" --dtype "$dt" \
    --out "$dir/torch_compare_${dt}_batch$batch.csv" 2>"$dir/torch_compare_${dt}_batch$batch.log" ||
    fail "torch_compare $dt batch $batch"
  rm -f "$dir/layers_$tag.csv"
  tail -4 "$dir/torch_compare_${dt}_batch$batch.log"
  note "$dt b$batch: $(grep -oE 'within 10% of PyTorch.s time or faster: [0-9]+ of [0-9]+' "$dir/torch_compare_${dt}_batch$batch.log" | sed 's/.*faster: //') convs ok,$(grep -oE 'CUDA graph forward: PyTorch [0-9.]+ us, layerbench graph [0-9.]+' "$dir/torch_compare_${dt}_batch$batch.log" | sed -e 's/CUDA graph forward: PyTorch/ graph torch/' -e 's/ us, layerbench graph/ us vs/') us;"
}
step "PyTorch side by side: ResNet-18 fp32 (TF32 off)"
for batch in 1 32; do room 50 && torch_side fp32 $batch; done
step "PyTorch side by side: ResNet-18 fp16 (PyTorch channels-last)"
for batch in 1 32; do room 50 && torch_side fp16 $batch; done

step "Llama-3.2-1B bf16 decode step chained on cuda"
if room 60; then
  $B run configs/hf/Llama-3.2-1B --backend cuda --dtype bf16 --phase decode --kv-len 1024 --dedupe --no-progress \
    --csv "$dir/llama1b_decode_bf16.csv" >"$dir/llama1b_decode_bf16.txt" 2>&1 || fail "run llama decode"
  grep -E "chained forward|decode limit|not run" "$dir/llama1b_decode_bf16.txt" | head -4
  note "$(grep -m1 -E 'chained forward' "$dir/llama1b_decode_bf16.txt" | sed 's/  */ /g' | cut -c1-70)"
fi

step "training on cuda: check and run ResNet-18 --pass train"
if room 60; then
  $B check configs/resnet18.yaml --backend cuda --pass train >"$dir/check_resnet18_train.txt" 2>&1 ||
    fail "check resnet18 --pass train"
  echo "check --pass train: $(tail -1 "$dir/check_resnet18_train.txt")"
  $B run configs/resnet18.yaml --backend cuda --pass train --batch 8 --no-progress --algo-cache none \
    --csv "$dir/resnet18_cuda_train_batch8.csv" >"$dir/resnet18_cuda_train_batch8.txt" 2>&1 || fail "run --pass train"
  grep -E "training step median|not run" "$dir/resnet18_cuda_train_batch8.txt" | head -3
  note "$(grep -m1 -E 'training step median' "$dir/resnet18_cuda_train_batch8.txt" | sed 's/  */ /g' | cut -c1-60)"
fi

step "cuDNN's graph API alone: check and run ResNet-18"
if room 60; then
  for dt in fp32 bf16; do
    $B check configs/resnet18.yaml --backend cuda --conv-api graph --dtype $dt >"$dir/check_resnet18_graph_$dt.txt" 2>&1 ||
      fail "check resnet18 --conv-api graph $dt"
    echo "graph $dt: $(tail -1 "$dir/check_resnet18_graph_$dt.txt")"
  done
  LAYERBENCH_CUDNN_LOG=1 $B run configs/resnet18.yaml --backend cuda --conv-api graph --batch 1 --no-progress \
    --algo-cache none --csv "$dir/resnet18_conv_api_graph.csv" >"$dir/resnet18_conv_api_graph.txt" \
    2>"$dir/cudnn_graph.log" || fail "run --conv-api graph"
  echo "--conv-api graph: $(grep -c 'left out' "$dir/cudnn_graph.log") candidates left out"
fi

step "bench run resnet18 --backend cuda --mode batch,cold, batch 1"
if room 45; then
  $B run configs/resnet18.yaml --backend cuda --mode batch,cold --batch 1 --no-progress --algo-cache none \
    --csv "$dir/resnet18_cuda_cold_batch1.csv" >"$dir/resnet18_cuda_cold_batch1.txt" 2>&1 || fail "run cold batch 1"
  grep -A8 "^Summary" "$dir/resnet18_cuda_cold_batch1.txt" | head -12
fi

step "bench check --backend cuda on every other shipped config (fp32, tf32, bf16, fp16)"
for dt in fp32 bf16 fp16 tf32; do
  for cfg in configs/*.yaml; do
    name=$(basename "$cfg" .yaml)
    case $name in resnet18 | bert_base) continue ;; esac
    room 25 || break 2
    CHECK_QUIET=1 check "$name" "$cfg" $dt
    checked=$((${checked:-0} + 1))
  done
done
note "${checked:-0} config checks run"

step "bench run resnet18 --backend all, batch 1"
if room 60; then
  $B run configs/resnet18.yaml --backend all --batch 1 --no-progress --csv "$dir/resnet18_all_batch1.csv" \
    >"$dir/resnet18_all_batch1.txt" 2>&1 || fail "run batch 1"
  grep -A8 "^Summary" "$dir/resnet18_all_batch1.txt"
fi

finish
