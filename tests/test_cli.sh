#!/usr/bin/env bash
# The bench command line end to end: exit codes, error messages, CSV and JSON, list,
# sweep, check, and hostile inputs. usage: test_cli.sh BENCH SOURCE_DIR
set -u
BENCH=$1
SRC=$2
. "$SRC/tests/common.sh"

# usage
expect 2 "missing command" -- "$BENCH"
expect 0 "usage: bench" -- "$BENCH" --help
expect 0 "usage: bench" -- "$BENCH" help
# the help is printed as it is, never through printf: no doubled percent signs
"$BENCH" --help | grep -q "%%" && bad "--help shows %%" || ok
expect 0 "layerbench" -- "$BENCH" --version
# each command its options (one table: the help, the errors): run's help lists run's and
# no other command's; an option given to a command it does not go with is refused
expect 0 "usage: bench run CONFIG" -- "$BENCH" run --help
"$BENCH" run --help | grep -q -- "--max-noise" && ! "$BENCH" run --help | grep -qE -- "^  --(inmodel|emit-yaml|slurm) " \
  && ok || bad "bench run --help: run's options only"
expect 0 "--inmodel" -- "$BENCH" help compare
expect 2 "--threads goes with bench run, sweep and check, not compare" -- "$BENCH" compare a.csv b.csv --threads 2
expect 2 "--trace goes with bench run and sweep, not list" -- "$BENCH" list "$SMOKE" --trace t.json
expect 2 "-o/--output goes with bench merge, not run" -- "$BENCH" run "$SMOKE" -o x.csv
expect 2 "unknown command 'frobnicate'" -- "$BENCH" frobnicate x
expect 2 "run needs a CONFIG" -- "$BENCH" run
expect 2 "unknown option '--fast'" -- "$BENCH" run "$SMOKE" --fast
expect 2 "--threads expects" -- "$BENCH" run "$SMOKE" --threads 0
expect 2 "--min-time expects" -- "$BENCH" run "$SMOKE" --min-time -1
expect 2 "--batch expects a positive integer" -- "$BENCH" run "$SMOKE" --batch 2x
expect 2 "--batch expects a comma-separated" -- "$BENCH" sweep "$SMOKE" --batch 1,,2
expect 2 "--sort expects" -- "$BENCH" run "$SMOKE" --sort speed
expect 2 "--backend expects cpu, onednn, cuda, or all" -- "$BENCH" run "$SMOKE" --backend tpu
expect 2 "--conv-api expects both, legacy or graph, got 'fft'" -- "$BENCH" run "$SMOKE" --conv-api fft
# a malformed engine tag is refused before any device is looked for; where the cuda
# backend is not built, that is what it says
expect 2 "LAYERBENCH_CUDNN_ENGINE: 'eng28_k2': expected _k<type>=<value> at '_k2'|cuda backend.*(not built|cannot be loaded)" \
  -- env LAYERBENCH_CUDNN_ENGINE=eng28_k2 "$BENCH" run "$SMOKE" --backend cuda
expect 2 "option '--csv' needs a value" -- "$BENCH" run "$SMOKE" --csv
expect 2 "cannot open: No such file" -- "$BENCH" list "$T/missing.yaml"
expect 2 "not a regular file" -- "$BENCH" list "$T"

# config errors: file:line:col and exit 2
printf 'name: t\ninput: [3, 8, 8]\nlayers:\n  - {kind: conv2d, out_channels: 4, kernal_size: 3}\n' >"$T/typo.yaml"
expect 2 "typo.yaml:4:37: unknown key 'kernal_size' for conv2d \(did you mean 'kernel_size'\?\)" -- "$BENCH" run "$T/typo.yaml"
printf 'name: t\ninput: [3, 8, 8]\nlayers:\n  - {kind: conv4d}\n' >"$T/kind.yaml"
expect 2 "kind.yaml:4:12: unknown layer kind 'conv4d'; known kinds: conv2d, batchnorm2d, relu" -- "$BENCH" list "$T/kind.yaml"

# hostile files never crash or hang: exit 2 with a message
head -c 65536 /dev/urandom >"$T/garbage.yaml"
expect 2 "garbage.yaml:[0-9]+:[0-9]+: " -- timeout 10 "$BENCH" list "$T/garbage.yaml"
python_free_nest() { local n=$1 s=""; s=$(printf '%*s' "$n" '' | tr ' ' '['); echo "$s"; }
python_free_nest 200000 >"$T/deep.yaml"
expect 2 "deep.yaml:" -- timeout 10 "$BENCH" list "$T/deep.yaml"
{ echo 'a: &a ["x","x","x","x","x"]'; for i in $(seq 1 30); do echo "a$i: &a$i [*a$((i-1)),*a$((i-1)),*a$((i-1))]" | sed 's/\*a0/*a/g'; done; } >"$T/laughs.yaml"
expect 2 "anchors and aliases are not supported" -- timeout 10 "$BENCH" list "$T/laughs.yaml"
printf 'name: t\ninput: [3, 8, 8]\nlayers:\n  - kind: block\n    repeat: 100000\n    layers: [{kind: relu, repeat: 100000}]\n' >"$T/repeat.yaml"
expect 2 "more than 100000 layers" -- timeout 10 "$BENCH" list "$T/repeat.yaml"
head -c 2000000 /dev/zero | tr '\0' '#' >"$T/big.yaml"
expect 2 "larger than the 1 MiB" -- "$BENCH" list "$T/big.yaml"

# memory is checked before anything is allocated
expect 2 "needs .* but only .* is available" -- "$BENCH" run "$R18" --batch 100000 "${FAST[@]}"
# check: a model larger than memory is checked layer by layer; a layer that does not fit
# alone is not checked, and says what it needs; the forward is not checked, and says why
LAYERBENCH_MEM_LIMIT=2M "$BENCH" check "$SMOKE" --batch 256 >"$T/whole.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "each layer is checked alone" "$T/whole.out" &&
  [ "$(grep -c 'not checked: checking it alone needs .* and 2.0 MiB is available' "$T/whole.out")" -gt 3 ] &&
  grep -q "forward .*not checked: the whole model needs" "$T/whole.out" && grep -q " ok$" "$T/whole.out" && ok ||
  bad "check of a model larger than memory: exit $rc: $(tail -3 "$T/whole.out")"
# a mixture of experts too large to check whole is checked as the experts a step runs (2 of
# 64 for one token at top 2), a moe of those alone; not where every expert runs (40 tokens)
printf 'name: bigmoe\ninput: [1, 256]\nlayers:\n  - {kind: linear, name: gate, out_features: 64, bias: false}\n  - {kind: moe, name: experts, num_experts: 64, top_k: 2, ffn_dim: 512, inputs: [input, gate]}\n' >"$T/bigmoe.yaml"
expect 0 "experts +moe +cpu +[0-9.e-]+ +[0-9.e-]+ +ok: as the 2 experts that run, of 64 \(all need 192.0 MiB, 100.0 MiB is available\)" -- \
  env LAYERBENCH_MEM_LIMIT=100M "$BENCH" check "$T/bigmoe.yaml"
expect 0 "experts +moe +cpu +- +[0-9.e-]+ +not checked: checking it alone needs 192.3 MiB" -- \
  env LAYERBENCH_MEM_LIMIT=100M "$BENCH" check "$T/bigmoe.yaml" --batch 40
# --dedupe checks one of each set of identical layers; the others take its verdict
"$BENCH" check "$SRC/tests/data/llama_tiny_decode.yaml" --dedupe >"$T/dd.out" 2>&1 &&
  grep -q "ok: as #[0-9]*, the same layer (--dedupe: checked once)" "$T/dd.out" && ok ||
  bad "check --dedupe: $(tail -3 "$T/dd.out")"
expect 2 "needs .* but only .* is available" -- "$BENCH" sweep "$R18" --batch 1,100000 "${FAST[@]}"

# list: deterministic analysis
expect 0 "Totals: 11689512 params, 1814073344 MACs" -- "$BENCH" list "$R18"
expect 0 "layer4.1.conv2 +conv2d +8x512x7x7" -- "$BENCH" list "$R18" --batch 8
# docs/config.md's examples (squeeze-and-excitation, Inception branches, a U-Net step) are valid and correct
expect 0 "19 passed, 0 failed" -- "$BENCH" check "$SRC/tests/data/doc_examples.yaml"
expect 0 "9 passed, 0 failed" -- "$BENCH" check "$SRC/tests/data/doc_transformer.yaml"
"$BENCH" list "$R18" --csv "$T/list.csv"
[ "$(head -1 "$T/list.csv")" = "model,batch,dtype,pass,tokens,kv_len,layer_dtype,layer_index,layer_name,kind,input_shape,output_shape,params,macs,flops,bytes,intensity,weight_bytes,input_bytes,output_bytes,parameters,inputs" ] && ok || bad "list csv header: $(head -1 "$T/list.csv")"
[ "$(wc -l <"$T/list.csv")" = 70 ] && ok || bad "list csv rows: $(wc -l <"$T/list.csv")"
cmp -s <("$BENCH" list "$R18") <("$BENCH" list "$R18") && ok || bad "list is not deterministic"

# run: tables, CSV and JSON
out=$("$BENCH" run "$SMOKE" "${FAST[@]}" --csv "$T/run.csv" 2>&1); rc=$?
[ $rc = 0 ] && ok || bad "run smoke exit $rc: $out"
for want in "Per-layer times" "Grouped by input shape" "Grouped by kind" "sum of layer medians \(alone\)" "sum of in-model medians" "Alone vs inside the forward" "chained forward median" "gap \(chained vs sum of layers\)"; do
  grep -qE "$want" <<<"$out" && ok || bad "run output lacks '$want'"
done
header=$(head -1 "$T/run.csv")
schema=$("$BENCH" schema | awk '{print $1}' | paste -sd, -)
[ "$header" = "$schema" ] && ok || bad "CSV header differs from 'bench schema': $header"
[ "$(wc -l <"$T/run.csv")" = 38 ] && ok || bad "run csv: $(wc -l <"$T/run.csv") lines, expected header + 18 layers + 18 in-model + model"
grep -q '^smoke,cpu,chained,2,fp32,forward,,,fp32,[0-9]*,-1,smoke,model,' "$T/run.csv" && ok || bad "no chained model row"
# awk over named columns: c["status"] is the field number of column status
awk -F, "$COLS"' $c["kind"]!="model" && $c["status"]!="ok" && !($c["status"]=="view" && ($c["kind"]=="flatten" || $c["kind"]=="dropout")) {bad=1} END {exit bad}' "$T/run.csv" && ok || bad "a layer row is neither ok nor a view"
[ "$(awk -F, "$COLS"' $c["status"]=="view"' "$T/run.csv" | wc -l)" = 4 ] && ok || bad "flatten and dropout are not view rows (alone and in-model)"
# auto mode: every timed layer row says warm or batch; in-model rows; launches 1 unless batch
awk -F, "$COLS"' $c["status"]=="ok" && $c["kind"]!="model" && $c["mode"]!="warm" && $c["mode"]!="batch" && $c["mode"]!="inmodel" {bad=1} END {exit bad}' "$T/run.csv" && ok || bad "a row's mode is not warm, batch or inmodel"
[ "$(awk -F, "$COLS"' $c["mode"]=="inmodel"' "$T/run.csv" | wc -l)" = 18 ] && ok || bad "no in-model row per layer"
awk -F, "$COLS"' $c["status"]=="ok" && ($c["samples"] < 1 || $c["median_us"] <= 0 || ($c["mode"]!="batch") != ($c["launches"] == 1)) {bad=1} END {exit bad}' "$T/run.csv" && ok || bad "samples, launches or median missing"
awk -F, "$COLS"' $c["status"]=="ok" && !($c["ci_low_us"] <= $c["median_us"] && $c["median_us"] <= $c["ci_high_us"] && $c["noise_pct"] != "" && $c["p99_us"] >= $c["median_us"] && ($c["stop"]=="noise" || $c["stop"]=="timeout") && $c["floor_us"] > 0) {bad=1} END {exit bad}' "$T/run.csv" && ok || bad "statistics columns inconsistent"
grep -q '"timer_floor_s": {"cpu": {"warm": ' "$T/run.json" && ok || bad "the JSON lacks the timer floor"
grep -q '"cpu_isa": ' "$T/run.json" && grep -q '"openblas_core": ' "$T/run.json" && ok || bad "the JSON lacks the ISA and OpenBLAS core"
awk -F, "$COLS"' $c["impl"]=="im2col+sgemm" && $c["workspace_bytes"] <= 0 {bad=1} END {exit bad}' "$T/run.csv" && ok || bad "im2col rows lack their workspace"
# kernels: on the cpu, each timed row's kernel is its impl without the search's remarks
# ("gemm-1x1 (fastest of 7)" ran gemm-1x1); the in-model rows carry their layer's
awk -F, "$COLS"' $c["status"]=="ok" && $c["kind"]!="model" {n++; k=$c["kernels"]; if (k=="" || index($c["impl"], k)!=1 || k ~ / \(| \[/) bad=1}
  END {exit bad || n < 18}' "$T/run.csv" && ok ||
  bad "kernels column: $(awk -F, "$COLS"' $c["status"]=="ok" {print $c["impl"] " -> " $c["kernels"]}' "$T/run.csv" | sort -u | head -3)"
for key in command_line date_utc host cpu_model cpu_cores_online git_revision build_type google_benchmark libyaml openblas_config '"threads"'; do
  grep -q "$key" "$T/run.json" && ok || bad "JSON context lacks $key"
done
ls "$T" | grep -q '\.tmp\.' && bad "temporary file left behind" || ok
cmp -s "$SRC/docs/csv.md" <(bash "$SRC/scripts/csv_doc.sh" "$BENCH") && ok || bad "docs/csv.md is not what scripts/csv_doc.sh makes from 'bench schema': regenerate it"

# --csv - gives a clean CSV on stdout, the tables on stderr
"$BENCH" run "$SMOKE" "${FAST[@]}" --csv - 2>/dev/null >"$T/stdout.csv"
[ "$(wc -l <"$T/stdout.csv")" = 38 ] && [ "$(head -1 "$T/stdout.csv")" = "$schema" ] && ok || bad "--csv - stdout is not just the CSV"

# sorting and top
out=$("$BENCH" run "$SMOKE" "${FAST[@]}" --sort flops --top 3 2>&1)
rows=$(awk '/^Per-layer/{f=1;next} f&&/^ *[0-9]+ /{n++} /^Grouped by input/{f=0} END{print n}' <<<"$out")
[ "$rows" = 3 ] && ok || bad "--top 3 printed $rows rows"
first=$(awk '/^Per-layer/{getline; getline; print $2; exit}' <<<"$out")
[ "$first" = stem ] && ok || bad "--sort flops: first row '$first', expected stem"

# dedupe: resnet18 at tiny times, twins reuse their first timing
"$BENCH" run "$R18" "${FAST[@]}" --dedupe --csv "$T/dd.csv" >/dev/null 2>&1
grep -q ',dedupe,' "$T/dd.csv" && ok || bad "--dedupe marked no row"

# sweep: one CSV for all batches, items/s on the model rows
out=$("$BENCH" sweep "$SMOKE" --batch 1,3 "${FAST[@]}" --csv "$T/sweep.csv" 2>&1); rc=$?
[ $rc = 0 ] && ok || bad "sweep exit $rc: $out"
[ "$(wc -l <"$T/sweep.csv")" = 75 ] && ok || bad "sweep csv: $(wc -l <"$T/sweep.csv") lines, expected 1 + 2 x 37"
[ "$(awk -F, "$COLS"' $c["kind"]=="model" && $c["items_per_s"] > 0' "$T/sweep.csv" | wc -l)" = 2 ] && ok || bad "sweep model rows lack items_per_s"
[ -f "$T/sweep.json" ] && ok || bad "no sweep JSON"

# a run that fails leaves no results file
expect 2 "" -- "$BENCH" run "$T/typo.yaml" --csv "$T/none.csv"
[ ! -e "$T/none.csv" ] && ok || bad "a failed run left a CSV"

# an unwritable --csv path is refused before anything is measured
expect 2 "cannot write '$T/no/such/dir/x.csv'" -- "$BENCH" run "$SMOKE" "${FAST[@]}" --csv "$T/no/such/dir/x.csv"

# an interrupted run leaves no result and no temporary file
"$BENCH" run "$R18" --no-progress --csv "$T/int.csv" >/dev/null 2>&1 & pid=$!
sleep 2; kill -TERM $pid; wait $pid 2>/dev/null
[ ! -e "$T/int.csv" ] && ! ls "$T" | grep -q 'int.csv.tmp' && ok || bad "an interrupted run left $(ls "$T" | grep int.csv)"

# backends: cuda runs where there is a GPU, and elsewhere exits 2 with a one-line reason
if "$BENCH" run "$SMOKE" --backend cuda "${FAST[@]}" >"$T/cuda.out" 2>&1; then
  grep -q "=== smoke on cuda (" "$T/cuda.out" && ok || bad "--backend cuda ran but printed no cuda table"
else
  rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$T/cuda.out")" = 1 ] &&
    grep -qE "^bench: (the cuda backend is not built into this binary|the cuda backend cannot be loaded: |no CUDA device: )" "$T/cuda.out" && ok ||
    bad "--backend cuda without a GPU: exit $rc: $(cat "$T/cuda.out")"
fi
"$BENCH" run "$SMOKE" --backend all "${FAST[@]}" >"$T/all.out" 2>&1 && grep -q "chained forward median" "$T/all.out" && ok ||
  bad "--backend all: $(tail -3 "$T/all.out")"
# --backend all sets the backends side by side, alone, inside the forward and chained, and
# says so where the faster alone is the slower in the forward (the line checked against
# the table's own figures, both ways)
if grep -q "^onednn " "$T/all.out"; then
  awk '/^By backend: batch [0-9]+, fp32/ {t = 1; next} t && /^(cpu|onednn) / {
         v = $2 * ($3 == "ms" ? 1000 : $3 == "s" ? 1e6 : 1); w = $(NF - 1) * ($NF == "ms" ? 1000 : $NF == "s" ? 1e6 : 1)
         alone[$1] = v; chained[$1] = w; n++; next}
       / is faster than .* alone .* but slower in the forward/ {said[$1] = 1}
       END {if (n != 2) exit 1; flip = alone["cpu"] < alone["onednn"] && chained["cpu"] > chained["onednn"]
            flop = alone["onednn"] < alone["cpu"] && chained["onednn"] > chained["cpu"]
            exit !((flip == ("cpu" in said)) && (flop == ("onednn" in said)))}' "$T/all.out" && ok ||
    bad "--backend all's table by backend: $(grep -A4 "^By backend" "$T/all.out")"
else
  echo "skip: the table by backend needs the onednn backend, not built here"
fi

# the roofline: the machine's peaks measured, in the JSON, on every timed row of the CSV
# with the bound and the percent of the roof; the forward's memory in the summary and JSON
NOPEAKS=()
for a in "${FAST[@]}"; do [ "$a" = --no-peaks ] || NOPEAKS+=("$a"); done
"$BENCH" run "$SMOKE" "${NOPEAKS[@]}" --csv "$T/roof.csv" >"$T/roof.out" 2>&1
grep -qE "^  peaks \(measured\) +[0-9.]+ GFLOP/s, [0-9.]+ GB/s" "$T/roof.out" &&
  grep -qE "^  memory of the forward +[0-9.]+ KiB +\(weights" "$T/roof.out" && ok || bad "summary: $(grep -A12 '^Summary' "$T/roof.out")"
grep -q '"peaks": {"cpu": {"flops_per_s": [1-9]' "$T/roof.json" && grep -q '"memory": {"weight_bytes": 4520, "peak_activation_bytes": ' "$T/roof.json" &&
  ok || bad "JSON peaks and memory: $(grep -E 'peaks|memory' "$T/roof.json")"
awk -F, "$COLS"' $c["mode"]=="warm" || $c["mode"]=="batch" { n++; if ($c["bound"] !~ /^(memory|cache|compute)$/ || $c["roof_pct"] <= 0 || $c["peak_gflops_per_s"] <= 0 || $c["peak_bytes"] <= 0) bad++ }
  END {exit !(n > 0 && !bad)}' "$T/roof.csv" && ok || bad "roofline columns: $(cut -d, -f1-5 "$T/roof.csv" | head -3)"
"$BENCH" run "$SMOKE" "${FAST[@]}" --csv "$T/noroof.csv" >/dev/null 2>&1
awk -F, "$COLS"' $c["bound"] != "" || $c["peak_gflops_per_s"] != "" {bad++} END {exit bad}' "$T/noroof.csv" && ok ||
  bad "--no-peaks left roofline columns"

# the block roll-up (module hierarchy) and markdown tables
"$BENCH" run "$R18" "${FAST[@]}" --group-by block >"$T/blocks.out" 2>&1
grep -qE "^  layer1 +[0-9]+ " "$T/blocks.out" && grep -qE "^      layer2.0.downsample +2 " "$T/blocks.out" &&
  ! grep -q "Grouped by kind" "$T/blocks.out" && ok || bad "--group-by block: $(grep -A4 'By block' "$T/blocks.out")"
"$BENCH" run "$SMOKE" "${FAST[@]}" --format md >"$T/md.out" 2>/dev/null
grep -q "^| # | Name | Kind |" "$T/md.out" && grep -q "^### Summary (cpu" "$T/md.out" &&
  grep -q "^- chained forward median: \*\*" "$T/md.out" && ok ||
  bad "run --format md: $(head -12 "$T/md.out")"
expect 0 "^\| 17 \| prob \| softmax \|" -- "$BENCH" list "$SMOKE" --format md
expect 2 "--group-by expects a comma-separated list of shape, kind and block" -- "$BENCH" run "$SMOKE" --group-by layer
expect 2 "--format expects text or md, got 'html'" -- "$BENCH" run "$SMOKE" --format html

# environment warnings: OpenBLAS kernels narrower than the CPU, a busy machine
if grep -qw avx2 /proc/cpuinfo; then
  OPENBLAS_CORETYPE=Sandybridge "$BENCH" run "$SMOKE" "${FAST[@]}" --csv "$T/warn.csv" >/dev/null 2>"$T/warn.err"
  grep -q "warning: cpu: OpenBLAS runs its Sandybridge kernels on a CPU that has AVX" "$T/warn.err" &&
    grep -q '"cpu: OpenBLAS runs its Sandybridge kernels' "$T/warn.json" && ok ||
    bad "no warning (stderr and JSON) for OpenBLAS's Sandybridge kernels on an AVX2 CPU: $(cat "$T/warn.err")"
else
  echo "skip: the OpenBLAS kernel warning needs a CPU with AVX2"
fi
# one busy loop per CPU (the warning counts the share of all CPUs' time), 64 at most
spins=()
for _ in $(seq "$(nproc 2>/dev/null || echo 2)" | head -64); do
  timeout 5 sh -c 'while :; do :; done' & spins+=($!)
done
sleep 0.5
"$BENCH" run "$SMOKE" "${FAST[@]}" >/dev/null 2>"$T/busy.err"
kill "${spins[@]}" 2>/dev/null; wait "${spins[@]}" 2>/dev/null
grep -q "warning: the machine is busy: other processes used" "$T/busy.err" && ok || bad "no warning with a busy loop running beside: $(cat "$T/busy.err")"

# compare: a run against itself is all SAME (exit 0); against a slowed copy, SLOWER (exit 1).
# The suite runs tests side by side on few cores, so rows may be contended (no verdict)
# or noisy enough (a sanitizer build under load) that doubling stays within the noise:
# the copies say they were quiet and exact (no contention, no noise, the interval the
# median), to test the verdict itself.
expect 0 " 0 SLOWER, 0 FASTER" -- "$BENCH" compare "$T/run.csv" "$T/run.csv"
awk -F, -v OFS=, 'NR==1 {for (i = 1; i <= NF; i++) c[$i] = i; print; next}
  {$c["contended"] = "false"; $c["noise_pct"] = 0; $c["process_spread_pct"] = ""; if ($c["median_us"] != "") $c["ci_low_us"] = $c["ci_high_us"] = $c["median_us"]; print}' \
  "$T/run.csv" >"$T/quiet.csv"
awk -F, -v OFS=, 'NR==1 {for (i = 1; i <= NF; i++) c[$i] = i; print; next}
  $c["layer_name"]=="stem" && $c["mode"]!="inmodel" {$c["median_us"] *= 2; $c["ci_low_us"] *= 2; $c["ci_high_us"] *= 2} {print}' "$T/quiet.csv" >"$T/slow.csv"
expect 1 "stem .*SLOWER" -- "$BENCH" compare "$T/quiet.csv" "$T/slow.csv"
expect 1 "\| cpu \| (warm|batch) \| 2 \| fp32 \| stem \|.*\*\*SLOWER\*\*" -- "$BENCH" compare "$T/quiet.csv" "$T/slow.csv" --format md
expect 2 "compare needs two results CSVs" -- "$BENCH" compare "$T/run.csv"
expect 2 "smoke.yaml:[0-9]+: " -- "$BENCH" compare "$T/run.csv" "$SMOKE"
expect 2 "is not a layerbench results CSV: it has no .model. column" -- "$BENCH" compare "$T/run.csv" "$SRC/tests/data/not_results.csv"
expect 2 "--format expects text or md" -- "$BENCH" compare "$T/run.csv" "$T/run.csv" --format html

# check: every layer against the reference, then the chained forward's output
expect 0 "19 passed, 0 failed" -- "$BENCH" check "$SMOKE"
expect 0 "70 passed, 0 failed" -- "$BENCH" check "$R18"
expect 0 "forward \(chained, model output\) +model +cpu .* ok" -- "$BENCH" check "$R18" --batch 2
expect 0 "18 passed, 0 failed" -- "$BENCH" check "$SMOKE" --no-forward

# a decoder (Hugging Face's module names): prefill, decode after a cache, a chunk with a
# sliding window; every layer and the chained forward, in fp32 and bf16
for phase in prefill decode chunk; do
  expect 0 "36 passed, 0 failed.*dtype bf16.*36 passed, 0 failed" -- bash -c \
    "'$BENCH' check '$SRC/tests/data/llama_tiny_$phase.yaml' --batch 2 --dtype fp32,bf16 2>&1 | tr '\n' ' '"
done
expect 0 "model.layers.1.self_attn.attn +attention +1x4x64 +1x4x64 +0 " -- "$BENCH" list "$SRC/tests/data/llama_tiny_chunk.yaml"
printf 'name: t\ninput: [5]\nlayers:\n  - {kind: embedding, num_embeddings: 9, embedding_dim: 8}\n  - {kind: attention, num_heads: 2, head_dim: 4}\n' >"$T/attn.yaml"
expect 2 "attn.yaml:5:5: attention: missing required key 'inputs' \(the names of its 3 inputs\)" -- "$BENCH" list "$T/attn.yaml"

# Hugging Face config.json files: the published parameter counts exactly (tied embeddings
# counted once, Qwen2's q/k/v biases), TinyLlama's too (not shipped), and a small Qwen2
# checked in both phases; fields not built and shapes past the model's positions refused
expect 0 "Totals: 1235814400 params" -- "$BENCH" list "$SRC/configs/hf/Llama-3.2-1B"
expect 0 "Totals: 8030261248 params" -- "$BENCH" list "$SRC/configs/hf/Llama-3.1-8B/config.json"
expect 0 "Totals: 494032768 params" -- "$BENCH" list "$SRC/configs/hf/Qwen2.5-0.5B"
expect 0 "Totals: 7241732096 params" -- "$BENCH" list "$SRC/configs/hf/Mistral-7B-v0.1"
expect 0 "Totals: 46702792704 params" -- "$BENCH" list "$SRC/configs/hf/Mixtral-8x7B-v0.1"
expect 0 "Totals: 596049920 params" -- "$BENCH" list "$SRC/configs/hf/Qwen3-0.6B"
expect 0 "Totals: 1484916736 params" -- "$BENCH" list "$SRC/configs/hf/OLMo-2-0425-1B"
expect 0 "Totals: 3821079552 params" -- "$BENCH" list "$SRC/configs/hf/Phi-3-mini-4k-instruct"
expect 0 "Totals: 3836021760 params" -- "$BENCH" list "$SRC/configs/hf/Phi-4-mini-instruct"
expect 0 "Totals: 20914757184 params" -- "$BENCH" list "$SRC/configs/hf/gpt-oss-20b"
expect 0 "Totals: 3075098624 params" -- "$BENCH" list "$SRC/configs/hf/SmolLM3-3B"
expect 0 "Totals: 162322944 params" -- "$BENCH" list "$SRC/configs/hf/pythia-160m"
expect 0 "Totals: 30532122624 params" -- "$BENCH" list "$SRC/configs/hf/Qwen3-30B-A3B"
expect 0 "Totals: 2506172416 params" -- "$BENCH" list "$SRC/configs/hf/gemma-2b"
expect 0 "Totals: 2614341888 params" -- "$BENCH" list "$SRC/configs/hf/gemma-2-2b"
expect 0 "Totals: 999885952 params" -- "$BENCH" list "$SRC/configs/hf/gemma-3-1b-it"
expect 0 "Totals: 124439808 params" -- "$BENCH" list "$SRC/configs/hf/gpt2"
expect 0 "Totals: 14315784192 params" -- "$BENCH" list "$SRC/configs/hf/Qwen1.5-MoE-A2.7B"
expect 0 "Totals: 6919161856 params" -- "$BENCH" list "$SRC/configs/hf/OLMoE-1B-7B-0924"
expect 0 "Totals: 15706484224 params" -- "$BENCH" list "$SRC/configs/hf/DeepSeek-V2-Lite"
expect 0 "Totals: 671026419200 params" -- "$BENCH" list "$SRC/configs/hf/DeepSeek-V3"
# a decode step's experts move the two experts a token goes to (2 x 3 x 4096 x 14336 bf16
# tiny-NAME's config.json checked at decode (9 cached, batch 2) on every backend in fp32
# and bf16: N rows pass in each dtype
decode_check() {
  expect 0 "$2 passed, 0 failed.*dtype bf16.*$2 passed, 0 failed" -- bash -c \
    "'$BENCH' check '$SRC/tests/data/hf/tiny-$1' --phase decode --kv-len 9 --batch 2 --backend all --dtype fp32,bf16 ${3:-} ${4:-} 2>&1 | tr '\n' ' '"
}
# weights) and the token's hidden state in and out and its 8 logits: 704,659,472 bytes
expect 0 "model.layers.31.block_sparse_moe.experts +moe +1x1x4096 +1x1x4096 +1409286144 +[0-9]+ +704659472 " -- \
  "$BENCH" list "$SRC/configs/hf/Mixtral-8x7B-v0.1" --phase decode
expect 0 "Totals: 1100048384 params" -- "$BENCH" list "$SRC/tests/data/hf/TinyLlama-1.1B"
expect 0 "model.layers.31.self_attn.attn +attention +1x1x4096 +1x1x4096 +0 .*sliding_window=4096 kv_len=512" -- \
  "$BENCH" list "$SRC/configs/hf/Mistral-7B-v0.1" --phase decode --kv-len 512
expect 0 "lm_head +linear +1x5x48 +1x5x100 +0 .*tied_weights=true" -- "$BENCH" list "$SRC/tests/data/hf/tiny-qwen2" --tokens 5
decode_check qwen2 72
expect 0 "36 passed, 0 failed" -- "$BENCH" check "$SRC/tests/data/hf/tiny-qwen2" --tokens 6 --kv-len 3
# families are descriptions (configs/hf/families/): --emit-yaml prints the config built,
# which builds the same model as an ordinary config; a folder in LAYERBENCH_HF_FAMILIES adds
# a family without a rebuild, and its errors have the family file's line and column
"$BENCH" list "$SRC/tests/data/hf/tiny-qwen3" --tokens 5 --emit-yaml >"$T/q3.yaml" 2>&1
"$BENCH" list "$SRC/tests/data/hf/tiny-qwen3" --tokens 5 --csv - >"$T/q3.json.csv" 2>&1
expect 0 "^ok$" -- bash -c "'$BENCH' list '$T/q3.yaml' --csv - | cmp - '$T/q3.json.csv' && echo ok"
mkdir -p "$T/fam"
printf 'family: two\nmodel_type: [two_linear]\nfields:\n  hidden_size: {type: int, min: 1}\n  width: {type: int, min: 1, default: "hidden_size * 2"}\nlayers:\n  - {kind: embedding, name: embed, num_embeddings: 10, embedding_dim: "${hidden_size}"}\n  - {kind: linear, name: "fc${i}", each: i, count: 2, let: {w: "width if i == 0 else width // 2"}, out_features: "${w}"}\n' >"$T/fam/two.yaml"
printf '{"model_type": "two_linear", "hidden_size": 4}\n' >"$T/two.json"
expect 0 "Totals: 116 params" -- env LAYERBENCH_HF_FAMILIES="$T/fam" "$BENCH" list "$T/two.json" --tokens 3
sed 's/let: {w:/let: {hidden_size:/' "$T/fam/two.yaml" >"$T/fam2.yaml" && mkdir -p "$T/fam2" && mv "$T/fam2.yaml" "$T/fam2/two.yaml"
expect 2 "fam2/two.yaml:8:.*let: 'hidden_size' is already a name here" -- env LAYERBENCH_HF_FAMILIES="$T/fam2" "$BENCH" list "$T/two.json" --tokens 3
# a hostile family: a long chain of prefix operators, and layers nested past the limit, are
# errors at once (neither a stack overflow nor libyaml's quadratic scan of deep nesting)
mkdir -p "$T/fam4"
{ printf 'family: x\nmodel_type: [two_linear]\nlayers:\n  - {kind: linear, name: a, out_features: "${'
  head -c 200000 /dev/zero | tr '\0' '-'; printf '3}"}\n'; } >"$T/fam4/x.yaml"
expect 2 "fam4/x.yaml:4:.*nested more than 64 deep" -- env LAYERBENCH_HF_FAMILIES="$T/fam4" "$BENCH" list "$T/two.json" --tokens 3
{ printf 'family: x\nmodel_type: [two_linear]\nlayers:\n  - '; head -c 100000 /dev/zero | tr '\0' '['; printf 1
  head -c 100000 /dev/zero | tr '\0' ']'; printf '\n'; } >"$T/fam4/x.yaml"
expect 2 "fam4/x.yaml:4:.*nesting is deeper than 64 levels" -- env LAYERBENCH_HF_FAMILIES="$T/fam4" "$BENCH" list "$T/two.json" --tokens 3
expect 2 "two.json:1:2: model_type: 'two_linear' is not built \(layerbench reads .*llama, .*\)" -- "$BENCH" list "$T/two.json"
printf '{"model_type": "two_linear", "hidden_size": 0}\n' >"$T/two0.json"
expect 2 "two0.json:1:30: hidden_size: expected at least 1, got 0" -- env LAYERBENCH_HF_FAMILIES="$T/fam" "$BENCH" list "$T/two0.json" --tokens 3
sed -i 's/hidden_size \* 2/hidden_size * /' "$T/fam/two.yaml"
expect 2 "fam/two.yaml:5:.*expression 'hidden_size \* ': the end where a value was expected" -- \
  env LAYERBENCH_HF_FAMILIES="$T/fam" "$BENCH" list "$T/two.json" --tokens 3

# Qwen3: each head of q and k normalised (q_norm, k_norm over head_dim) before rope
expect 0 "model.layers.1.self_attn.k_norm +rmsnorm +1x5x2x10 +1x5x2x10 +10 " -- "$BENCH" list "$SRC/tests/data/hf/tiny-qwen3" --tokens 5
decode_check qwen3 96
# OLMo 2: no norm before attention or the MLP, one after each; q/k norms over the projections
expect 0 "model.layers.0.self_attn.k_norm +rmsnorm +1x5x20 +1x5x20 +20 .*model.layers.0.post_feedforward_layerno.* +rmsnorm" -- \
  bash -c "'$BENCH' list '$SRC/tests/data/hf/tiny-olmo2' --tokens 5 | tr '\n' ' '"
decode_check olmo2 80
sed 's/"attention_bias": false,/"attention_bias": false, "clip_qkv": 8.0,/' "$SRC/tests/data/hf/tiny-olmo2/config.json" >"$T/clip.json"
expect 2 "clip.json:3:28: clip_qkv: OLMo 1's clipping of q, k and v is not built" -- "$BENCH" list "$T/clip.json"
# Phi-3: fused qkv_proj and gate_up_proj cut by slices; a window shorter than the cache
expect 0 "model.layers.1.self_attn.v +slice +1x5x60 +1x5x12 .*model.layers.1.mlp.up +slice +1x5x112 +1x5x56 " -- \
  bash -c "'$BENCH' list '$SRC/tests/data/hf/tiny-phi3' --tokens 5 | tr '\n' ' '"
decode_check phi3 80
# Phi-4-mini's partial rope (a reshape, slice and concat around rope) with longrope's factors
expect 0 "model.layers.1.self_attn.rotary_k +rope +1x5x12 +1x5x12 .*rope_type=longrope factor=16 original_max_position_embeddings=4 short_factor=3@" -- \
  "$BENCH" list "$SRC/tests/data/hf/tiny-phi3-longrope" --tokens 5
decode_check phi3-longrope 136
sed '0,/      1.0,/s//      1e-40,/' "$SRC/tests/data/hf/tiny-phi3-longrope/config.json" >"$T/lr_tiny.json"
expect 2 "lr_tiny.json:20:5: short_factor: expected a list of numbers from 1e-30 to 1e30" -- "$BENCH" list "$T/lr_tiny.json" --tokens 5
# rope's lists in a YAML config: numbers above 0, and longrope's own
printf 'name: t\ninput: [4, 8]\nlayers:\n  - {kind: rope, name: q, num_heads: 1, head_dim: 8, rope_type: longrope, short_factor: [1, 2, -3, 4], long_factor: [1, 1, 1, 1]}\n' >"$T/lr_neg.yaml"
expect 2 "lr_neg.yaml:4:96: short_factor must not be negative, got -3" -- "$BENCH" list "$T/lr_neg.yaml"
printf 'name: t\ninput: [4, 8]\nlayers:\n  - {kind: rope, name: q, num_heads: 1, head_dim: 8, rope_type: longrope, short_factor: [1, 1e-50, 1, 1], long_factor: [1, 1, 1, 1]}\n' >"$T/lr_tiny.yaml"
expect 2 "lr_tiny.yaml:4:[0-9]+: short_factor: expected numbers from 1e-30 to 1e30, got 1e-50" -- "$BENCH" list "$T/lr_tiny.yaml"
printf 'name: t\ninput: [4, 8]\nlayers:\n  - {kind: rope, name: q, num_heads: 1, head_dim: 8, rope_type: longrope, factor: 4, original_max_position_embeddings: 1, short_factor: [1, 1, 1, 1], long_factor: [1, 1, 1, 1]}\n' >"$T/lr_one.yaml"
expect 2 "lr_one.yaml:4:5: .*ln\(original_max_position_embeddings\), which must be 2 or more, got 1" -- "$BENCH" list "$T/lr_one.yaml"
printf 'name: t\ninput: [4, 8]\nlayers:\n  - {kind: rope, name: q, num_heads: 1, head_dim: 8, rope_type: yarn, short_factor: [1, 2, 3, 4]}\n' >"$T/lr_yarn.yaml"
expect 2 "lr_yarn.yaml:4:5: layer 'q' \(rope\): short_factor and long_factor are longrope's" -- "$BENCH" list "$T/lr_yarn.yaml"
printf 'name: t\ninput: [4, 8]\nlayers:\n  - {kind: rope, name: q, num_heads: 1, head_dim: 8, rope_type: longrope, short_factor: [1, 2], long_factor: [1, 2]}\n' >"$T/lr_short.yaml"
expect 2 "lr_short.yaml:4:5: .*longrope needs short_factor with head_dim / 2 = 4 factors, got 2" -- "$BENCH" list "$T/lr_short.yaml"
decode_check qwen3-yarn 96
# gpt-oss: attention sinks (a parameter per head), sliding layers by layer_types, a router
# with a bias, experts with biases and the clamped SwiGLU; its MXFP4 quantization_config read
# (the experts timed in the run's dtype), any other refused
expect 0 "model.layers.0.self_attn.attn +attention +1x5x48 +1x5x48 +6 .*sliding_window=4 sinks=true.*model.layers.0.mlp.experts +moe .*bias=true activation=clamped_swiglu swiglu_limit=0.3.*model.layers.1.self_attn.attn +attention .* sinks=true" -- \
  bash -c "'$BENCH' list '$SRC/tests/data/hf/tiny-gpt_oss' --tokens 5 | tr '\n' ' '"
decode_check gpt_oss 60
# DeepSeek-V2: multi-head latent attention (its cache the latent and the rope part: at 1024
# cached, V2-Lite's layer reads its 2,097,664 parameters and 1024 x 576 cached values, bf16),
# shared experts, a dense first layer; q through a low rank, biases, group_limited_greedy
# routing and moe_layer_freq in the other tiny config; DeepSeek-V3's router (sigmoid scores,
# a correction bias, groups by their best two) and fp8 quantization_config read
expect 0 "model.layers.1.self_attn.attn +mla +1x1x3072 +1x1x2048 +2097664 +[0-9]+ +5386368 " -- \
  "$BENCH" list "$SRC/configs/hf/DeepSeek-V2-Lite" --phase decode --kv-len 1024
decode_check deepseek_v2 98
decode_check deepseek_v2-lora 110 --routing router
decode_check deepseek_v3 110 --routing router
sed 's/"topk_method": "greedy"/"topk_method": "noaux_tc"/' "$SRC/configs/hf/DeepSeek-V2-Lite/config.json" >"$T/noaux.json"
expect 2 "noaux.json:[0-9]+:3: topk_method: deepseek_v2's routers built are greedy and group_limited_greedy" -- "$BENCH" list "$T/noaux.json"
sed 's/"scoring_func": "softmax"/"scoring_func": "sigmoid"/' "$SRC/configs/hf/DeepSeek-V2-Lite/config.json" >"$T/sigmoid.json"
expect 2 "sigmoid.json:[0-9]+:3: scoring_func: deepseek_v2's router is built with its own scores only" -- "$BENCH" list "$T/sigmoid.json"
sed 's/"quant_method": "fp8"/"quant_method": "awq"/' "$SRC/configs/hf/DeepSeek-V3/config.json" >"$T/v3awq.json"
expect 2 "v3awq.json:[0-9]+:3: quantization_config: only DeepSeek-V3's and Kimi K2's published fp8 weights" -- "$BENCH" list "$T/v3awq.json"
# a multimodal config (Gemma 3 from 4B: the language model in text_config beside a vision
# tower) is refused, saying what is built and how to give it
mkdir -p "$T/gemma3mm" &&
  { printf '{\n  "architectures": ["Gemma3ForConditionalGeneration"],\n  "model_type": "gemma3",\n'
    printf '  "vision_config": {"model_type": "siglip_vision_model"},\n  "text_config": '
    cat "$SRC/tests/data/hf/tiny-gemma3/config.json"; printf '}\n'; } >"$T/gemma3mm/config.json"
expect 2 "config.json:[0-9]+:3: model_type: 'gemma3' is a multimodal model: its vision tower \(vision_config\) is not built" -- \
  "$BENCH" list "$T/gemma3mm"
# Kimi K2 publishes DeepSeek-V3's architecture as model_type kimi_k2: the same rows
mkdir -p "$T/kimi" && sed 's/"model_type": "deepseek_v3"/"model_type": "kimi_k2"/' \
  "$SRC/tests/data/hf/tiny-deepseek_v3/config.json" >"$T/kimi/config.json"
"$BENCH" list "$T/kimi" --tokens 8 --csv "$T/kimi.csv" >/dev/null 2>&1 &&
  "$BENCH" list "$SRC/tests/data/hf/tiny-deepseek_v3" --tokens 8 --csv "$T/v3.csv" >/dev/null 2>&1 &&
  [ "$(wc -l <"$T/v3.csv")" -gt 40 ] && diff <(cut -d, -f2- "$T/kimi.csv") <(cut -d, -f2- "$T/v3.csv") >/dev/null &&
  ok || bad "kimi_k2 does not build as deepseek_v3"
sed 's/"v_head_dim": 5,/"v_head_dim": 5, "rope_interleave": false,/' "$SRC/tests/data/hf/tiny-deepseek_v3/config.json" >"$T/v3rope.json"
expect 2 "v3rope.json:[0-9]+:[0-9]+: rope_interleave: only DeepSeek's interleaved rope is built" -- "$BENCH" list "$T/v3rope.json"
sed 's/"n_group": 1/"n_group": 5/; s/"topk_method": "greedy"/"topk_method": "group_limited_greedy"/' \
  "$SRC/configs/hf/DeepSeek-V2-Lite/config.json" >"$T/groups.json"
expect 2 "groups.json:[0-9]+:3: topk_group: group_limited_greedy needs n_group \(5\) to divide n_routed_experts \(64\)" -- \
  "$BENCH" list "$T/groups.json"
sed 's/"quant_method": "mxfp4"/"quant_method": "awq"/' "$SRC/configs/hf/gpt-oss-20b/config.json" >"$T/awq.json"
expect 2 "awq.json:[0-9]+:3: quantization_config: only the published MXFP4 experts" -- "$BENCH" list "$T/awq.json"
sed 's/"full_attention"/"linear_attention"/' "$SRC/tests/data/hf/tiny-gpt_oss/config.json" >"$T/lt_oss.json"
expect 2 "lt_oss.json:[0-9]+:3: layer_types: expected sliding_attention or full_attention entries" -- "$BENCH" list "$T/lt_oss.json" --tokens 5
sed 's/"model_type": "gpt_oss"/"model_type": "llama"/' "$SRC/configs/hf/gpt-oss-20b/config.json" >"$T/q_llama.json"
expect 2 "q_llama.json:[0-9]+:3: quantization_config: quantized weights \(mxfp4\) are not built" -- "$BENCH" list "$T/q_llama.json"
sed 's/"rope_scaling": null/"rope_scaling": {"type": "longrope", "short_factor": [1], "long_factor": [1]}/' \
  "$SRC/tests/data/hf/tiny-phi3/config.json" >"$T/longrope.json"
expect 2 "longrope.json:16:3: rope_scaling: longrope's short_factor and long_factor need 3 factors each .*got 1 and 1" -- \
  "$BENCH" list "$T/longrope.json" --tokens 5
sed 's/"rope_scaling": null/"rope_scaling": {"type": "yarn", "factor": 4, "beta_fast": "32"}/' "$SRC/tests/data/hf/tiny-phi3/config.json" >"$T/yarn.json"
expect 2 "yarn.json:16:.*beta_fast: expected a number above 0" -- "$BENCH" list "$T/yarn.json" --tokens 5
sed 's/"embd_pdrop": 0.0,/"embd_pdrop": 0.0, "partial_rotary_factor": 0.5,/' "$SRC/tests/data/hf/tiny-phi3/config.json" >"$T/prf.json"
expect 2 "prf.json:4:22: partial_rotary_factor: rope over 3 dims of each head: expected an even number" -- "$BENCH" list "$T/prf.json"
# SmolLM3: no rope in the layers no_rope_layers marks 0, or every no_rope_layer_interval-th
expect 0 "^2$" -- bash -c "'$BENCH' list '$SRC/tests/data/hf/tiny-smollm3' --tokens 3 | grep -c rotary_q"
expect 0 "model.layers.1.self_attn.v_proj .*model.layers.1.self_attn.attn .*model.layers.2.self_attn.rotary_q" -- \
  bash -c "'$BENCH' list '$SRC/tests/data/hf/tiny-smollm3' --tokens 3 | grep -v 'layers.1.self_attn.rotary' | tr '\n' ' '"
grep -v '"no_rope_layers"' "$SRC/tests/data/hf/tiny-smollm3/config.json" | sed 's/"no_rope_layer_interval": 4/"no_rope_layer_interval": 2/' >"$T/interval.json"
expect 0 "^0$" -- bash -c "'$BENCH' list '$T/interval.json' --tokens 3 | grep -c 'layers.1.self_attn.rotary' || true"
sed 's/\[1, 0, 1\]/[1, 0]/' "$SRC/tests/data/hf/tiny-smollm3/config.json" >"$T/nrl.json"
expect 2 "nrl.json:11:3: no_rope_layers: 2 entries for 3 layers" -- "$BENCH" list "$T/nrl.json"
sed 's/"mlp_bias": false,/"mlp_bias": false, "layer_types": ["full_attention", "sliding_attention", "full_attention"],/' \
  "$SRC/tests/data/hf/tiny-smollm3/config.json" >"$T/lt.json"
expect 2 "lt.json:8:22: layer_types: smollm3's per-layer sliding window is not built" -- "$BENCH" list "$T/lt.json"
decode_check smollm3 100
# Qwen3-MoE: Qwen3's attention; a router and experts (named gate/up/down_proj) in the layers
# decoder_sparse_step and mlp_only_layers pick, the dense MLP in the others
expect 0 "layers.0.mlp.experts +moe .*expert_names=gate_up_down.*layers.1.mlp.down_proj +linear .*layers.2.mlp.experts +moe" -- \
  bash -c "'$BENCH' list '$SRC/tests/data/hf/tiny-qwen3_moe' --tokens 5 | tr '\n' ' '"
decode_check qwen3_moe 128 --routing router
sed 's/"norm_topk_prob": true/"norm_topk_prob": false/' "$SRC/tests/data/hf/tiny-qwen3_moe/config.json" >"$T/ntp.json"
expect 0 "layers.0.mlp.experts +moe .*normalize=false" -- "$BENCH" list "$T/ntp.json" --tokens 2
# Qwen2-MoE: experts every decoder_sparse_step-th layer, with a shared expert behind a sigmoid
# gate; OLMoE: the whole q and k projections normalised, experts not renormalised
expect 0 "layers.0.mlp.down_proj +linear .*layers.1.mlp.experts +moe .*normalize=false.*layers.1.mlp.shared_gate +sigmoid +1x3x1 .*layers.1.mlp.moe_out +add" -- \
  bash -c "'$BENCH' list '$SRC/tests/data/hf/tiny-qwen2_moe' --tokens 3 | tr '\n' ' '"
expect 0 "layers.0.self_attn.k_norm +rmsnorm +1x3x16 +1x3x16 +16 .*layers.0.mlp.experts +moe .*top_k=3 ffn_dim=24 expert_names=gate_up_down normalize=false" -- \
  bash -c "'$BENCH' list '$SRC/tests/data/hf/tiny-olmoe' --tokens 3 | tr '\n' ' '"
decode_check qwen2_moe 84 --routing router
decode_check olmoe 68 --routing router
sed 's/"clip_qkv": null/"clip_qkv": 8.0/' "$SRC/tests/data/hf/tiny-olmoe/config.json" >"$T/olmoe_clip.json"
expect 2 "olmoe_clip.json:4:3: clip_qkv: clipping q, k and v \(OLMo's clip_qkv\) is not built" -- "$BENCH" list "$T/olmoe_clip.json"
# Gemma 1 to 3: RMSNorm by 1 + weight, scaled embeddings, GeGLU; Gemma 2's soft-capping
# (attention scores, and the logits by scale_shift, tanh, scale_shift), query_pre_attn_scalar
# and every other layer sliding; Gemma 3's q/k norms and local rope in its sliding layers
expect 0 "layers.0.self_attn.attn +attention .*sliding_window=4 scale=0.223607 softcap=1.5 .*layers.1.self_attn.attn +attention .* scale=0.223607 softcap=1.5 .*logits_tanh +tanh .*logits_capped +scale_shift .*scale=2" -- \
  bash -c "'$BENCH' list '$SRC/tests/data/hf/tiny-gemma2' --tokens 5 | tr '\n' ' '"
expect 0 "layers.0.self_attn.rotary_q +rope .*head_dim=12 .*layers.1.self_attn.rotary_q +rope .*rope_theta=1e\+06" -- \
  bash -c "'$BENCH' list '$SRC/tests/data/hf/tiny-gemma3' --tokens 5 | tr '\n' ' '"
decode_check gemma 74
decode_check gemma2 124
decode_check gemma3 202
sed 's/"hidden_activation": "gelu_pytorch_tanh",/"hidden_activation": "silu",/' "$SRC/tests/data/hf/tiny-gemma3/config.json" >"$T/gact.json"
expect 2 "gact.json:7:3: hidden_activation: 'silu': only GELU \(GeGLU\) is built" -- "$BENCH" list "$T/gact.json"
printf '{"model_type": "gemma3_text", "text_config": {"hidden_size": 8}}\n' >"$T/mm.json"
expect 2 "mm.json:1:31: text_config: a multimodal config" -- "$BENCH" list "$T/mm.json"
# GPT-2: learned positions (a pos_embedding of n_positions rows, read from the cache's
# length on), Conv1D layers (hf_conv1d), scores scaled by 1/(layer + 1) where asked
expect 0 "transformer.wpe +pos_embedding +1x1x48 +1x1x48 +960 .*num_positions=20 kv_len=9 .*transformer.h.2.attn.attn +attention .*scale=0.096225" -- \
  bash -c "'$BENCH' list '$SRC/tests/data/hf/tiny-gpt2' --phase decode --kv-len 9 | tr '\n' ' '"
decode_check gpt2 88
expect 2 "config.json:10:3: n_positions: 20 positions, but 1 tokens after 20 cached need 21" -- \
  "$BENCH" list "$SRC/tests/data/hf/tiny-gpt2" --phase decode --kv-len 20
# GPT-NeoX: per-head fused qkv, rope over a quarter of each head (reshape, slice, rope,
# concat), LayerNorm, GELU; the parallel residual, or the serial one with full rope
expect 0 "attention.q_rot +slice +1x5x4x16 +1x5x4x4 .*attention.rotary_q +rope +1x5x16 +1x5x16 .*attention.q_cat +concat" -- \
  bash -c "'$BENCH' list '$SRC/tests/data/hf/tiny-gpt_neox' --tokens 5 | tr '\n' ' '"
decode_check gpt_neox 124
decode_check gpt_neox-serial 84
sed 's/"rotary_pct": 0.25/"rotary_pct": 0.1/' "$SRC/tests/data/hf/tiny-gpt_neox/config.json" >"$T/rp.json"
expect 2 "rp.json:13:3: rotary_pct: rope over 1 dims of each head: expected an even number, at least 2" -- "$BENCH" list "$T/rp.json"
sed 's/"hidden_act": "gelu"/"hidden_act": "relu"/' "$SRC/tests/data/hf/tiny-gpt_neox/config.json" >"$T/act.json"
expect 2 "act.json:4:3: hidden_act: 'relu': only gelu \(exact\) and its tanh form are built" -- "$BENCH" list "$T/act.json"
for phase in "--tokens 7" "--phase decode --kv-len 9"; do
  expect 0 "60 passed, 0 failed.*dtype bf16.*60 passed, 0 failed" -- bash -c \
    "'$BENCH' check '$SRC/tests/data/hf/tiny-mixtral' $phase --batch 2 --backend all --dtype fp32,bf16 2>&1 | tr '\n' ' '"
done
expect 0 "5 passed, 0 failed" -- "$BENCH" check "$SRC/tests/data/moe_routing.yaml" --batch 3
expect 2 "config.json:6:3: max_position_embeddings: 64 positions, but 1 tokens after 64 cached need 65" -- \
  "$BENCH" list "$SRC/tests/data/hf/tiny-qwen2" --phase decode --kv-len 64
mkdir -p "$T/hf"
printf '{"model_type": "llama", "hidden_size": 8,\n "num_local_experts": 8}\n' >"$T/hf/llama_moe.json"
expect 2 "llama_moe.json:2:2: num_local_experts: Mixtral's field; llama is built without experts \(mixtral reads num_local_experts; qwen2_moe, qwen3_moe and olmoe num_experts\)" -- \
  "$BENCH" list "$T/hf/llama_moe.json"
# Qwen3-MoE relabelled as mixtral: its num_experts is named, not called mixtral's
sed 's/"model_type": "qwen3_moe"/"model_type": "mixtral"/' "$SRC/tests/data/hf/tiny-qwen3_moe/config.json" >"$T/hf/relabel.json"
expect 2 "relabel.json:15:3: num_experts: the MoE families' field; mixtral is built without experts" -- "$BENCH" list "$T/hf/relabel.json"
grep -v num_experts_per_tok "$SRC/tests/data/hf/tiny-mixtral/config.json" >"$T/hf/notopk.json"
expect 2 "notopk.json:1:1: num_experts_per_tok: missing" -- "$BENCH" list "$T/hf/notopk.json"
sed 's/"num_experts_per_tok": 2/"num_experts_per_tok": 7/' "$SRC/tests/data/hf/tiny-mixtral/config.json" >"$T/hf/topk.json"
expect 2 "topk.json:9:3: num_experts_per_tok: 7 is more than num_local_experts 6" -- "$BENCH" list "$T/hf/topk.json"
printf 'name: t\ninput: [4, 8]\nlayers:\n  - {kind: linear, name: gate, out_features: 4}\n  - {kind: moe, num_experts: 5, ffn_dim: 8, inputs: [input, gate]}\n' >"$T/moe.yaml"
expect 2 "moe.yaml:5:5: .*the router's logits \(input 1\) are \[1, 4, 4\]: expected the rows of the hidden states \(input 0, \[1, 4, 8\]\) with 5 experts' logits each" -- "$BENCH" list "$T/moe.yaml"
sed 's/"rope_theta"/"rope_scaling": {"rope_type": "dynamic", "factor": 4},\n  "rope_theta"/' \
  "$SRC/tests/data/hf/tiny-qwen2/config.json" >"$T/hf/dynamic.json"
expect 2 "dynamic.json:12:3: rope_scaling: rope type 'dynamic' is not built" -- "$BENCH" list "$T/hf/dynamic.json"
grep -v vocab_size "$SRC/tests/data/hf/tiny-qwen2/config.json" | sed 's/"use_sliding_window": false,/"use_sliding_window": false/' >"$T/hf/novocab.json"
expect 2 "novocab.json:1:1: vocab_size: missing" -- "$BENCH" list "$T/hf/novocab.json"
printf '{"model_type": "llama", ' >"$T/hf/cut.json"

# safetensors beside a config.json: the headers (tests/make_safetensors.py writes them
# from transformers' names, the data left zero) against the layers built
if command -v python3 >/dev/null; then
  ST() { python3 "$SRC/tests/make_safetensors.py" "$SRC/tests/data/hf/$1/config.json" "$T/st/$2" "${@:3}"; }
  ST tiny-llama one && expect 0 "st/one/model.safetensors: 21 tensors match the layers' shapes \(headers read, not the weights\); stored as F32$" -- \
    "$BENCH" list "$T/st/one" --tokens 8
  ST tiny-qwen2 shards --dtype BF16 --shards 3 &&
    expect 0 "model.safetensors.index.json and 3 shards: 26 tensors match .*stored as BF16, while config.json's torch_dtype is float32" -- \
    "$BENCH" list "$T/st/shards" --tokens 8
  ST tiny-qwen2 partial --shards 3 --absent 2 --lm-head &&
    expect 0 "3 shards: 18 tensors match .*1 shard absent, whose 9 tensors were checked by name only" -- \
    "$BENCH" list "$T/st/partial" --tokens 8
  ST tiny-mixtral moe --dtype BF16 && expect 0 "53 tensors match" -- "$BENCH" list "$T/st/moe" --tokens 8
  ST tiny-qwen3 qwen3 && expect 0 "24 tensors match" -- "$BENCH" list "$T/st/qwen3" --tokens 8
  ST tiny-olmo2 olmo2 && expect 0 "25 tensors match" -- "$BENCH" list "$T/st/olmo2" --tokens 8
  ST tiny-phi3 phi3 && expect 0 "15 tensors match" -- "$BENCH" list "$T/st/phi3" --tokens 8
  ST tiny-smollm3 smollm3 && expect 0 "29 tensors match" -- "$BENCH" list "$T/st/smollm3" --tokens 8
  # GPT-2's Conv1D weights [in, out]; a tensor saved by the base model without "transformer."; its mask buffer
  ST tiny-gpt2 gpt2 --drop transformer.h.0.ln_1.weight --add h.0.ln_1.weight=48 --add transformer.h.1.attn.bias=1,1,20,20 &&
    expect 0 "40 tensors match" -- "$BENCH" list "$T/st/gpt2" --tokens 8
  ST tiny-gpt2 gpt2t --reshape transformer.h.1.mlp.c_fc.weight=192,48 &&
    expect 2 "'transformer.h.1.mlp.c_fc.weight' is \[192, 48\] in the checkpoint, but the layers built from config.json have \[48, 192\]" -- \
    "$BENCH" list "$T/st/gpt2t" --tokens 8
  ST tiny-gemma gemma && expect 0 "20 tensors match" -- "$BENCH" list "$T/st/gemma" --tokens 8
  ST tiny-gemma2 gemma2 && expect 0 "35 tensors match" -- "$BENCH" list "$T/st/gemma2" --tokens 8
  ST tiny-gemma3 gemma3 && expect 0 "54 tensors match" -- "$BENCH" list "$T/st/gemma3" --tokens 8
  ST tiny-qwen3_moe q3moe && expect 0 "68 tensors match" -- "$BENCH" list "$T/st/q3moe" --tokens 8
  ST tiny-qwen2_moe q2moe && expect 0 "44 tensors match" -- "$BENCH" list "$T/st/q2moe" --tokens 8
  ST tiny-olmoe olmoe && expect 0 "57 tensors match" -- "$BENCH" list "$T/st/olmoe" --tokens 8
  # gpt-oss: the sinks, the router's bias, the fused experts [E, H, 2I] (a bf16 copy); MXFP4
  # blocks where config.json has no quantization_config saying so are refused by name
  ST tiny-gpt_oss oss && expect 0 "37 tensors match" -- "$BENCH" list "$T/st/oss" --tokens 8
  # DeepSeek-V2: the mla layer's kv_a_layernorm and kv_b_proj beside the projections
  ST tiny-deepseek_v2 ds && expect 0 "71 tensors match" -- "$BENCH" list "$T/st/ds" --tokens 8
  ST tiny-deepseek_v2-lora dsl && expect 0 "86 tensors match" -- "$BENCH" list "$T/st/dsl" --tokens 8
  ST tiny-deepseek_v3 v3 && expect 0 "115 tensors match" -- "$BENCH" list "$T/st/v3" --tokens 8
  ST tiny-deepseek_v3 v3d --drop model.layers.2.mlp.gate.e_score_correction_bias &&
    expect 2 "lacks 'model.layers.2.mlp.gate.e_score_correction_bias' \[12\]" -- "$BENCH" list "$T/st/v3d" --tokens 8
  ST tiny-deepseek_v2 dskv --reshape model.layers.1.self_attn.kv_b_proj.weight=34,12 &&
    expect 2 "model.layers.1.self_attn.kv_b_proj.weight.*\[34, 12\]" -- "$BENCH" list "$T/st/dskv" --tokens 8
  ST tiny-gpt_oss mxfp4 --drop model.layers.0.mlp.experts.gate_up_proj --add model.layers.0.mlp.experts.gate_up_proj_blocks=5,48,1,16 &&
    expect 2 "holds the tensor 'model.layers.0.mlp.experts.gate_up_proj_blocks', which the layers built from config.json do not have" -- \
    "$BENCH" list "$T/st/mxfp4" --tokens 8
  # the published storage of quantized checkpoints, as their quantization_config says:
  # DeepSeek-V3's fp8 weights with a weight_scale_inv per block beside each (their shape
  # checked against the block size) and its multi-token-prediction layer after the last,
  # not built; gpt-oss's experts as MXFP4 blocks and scales (each blocks with its scales)
  ST tiny-deepseek_v3 v3q --fp8 8 --mtp --dtype BF16 &&
    expect 0 "115 tensors match .*; 93 fp8 weights' block scales \(weight_scale_inv, 8 x 8 blocks\); 100 tensors of the layers after the forward's \(model.layers.3 on: multi-token prediction, not built\); stored as F32 \(93\), BF16 \(22\), F8_E4M3 \(93\)" -- \
    "$BENCH" list "$T/st/v3q" --tokens 8
  ST tiny-deepseek_v3 v3qs --fp8 8 --reshape model.layers.1.self_attn.o_proj.weight_scale_inv=4,3 &&
    expect 2 "'model.layers.1.self_attn.o_proj.weight_scale_inv' is \[4, 3\] F32 in the checkpoint, but quantization_config's fp8 blocks of 8 x 8 over 'model.layers.1.self_attn.o_proj.weight' \[28, 15\] give \[4, 2\] F32" -- \
    "$BENCH" list "$T/st/v3qs" --tokens 8
  sed 's/"num_nextn_predict_layers": 1/"num_nextn_predict_layers": 0/' "$SRC/tests/data/hf/tiny-deepseek_v3/config.json" >"$T/v3nomtp.json" &&
    python3 "$SRC/tests/make_safetensors.py" "$T/v3nomtp.json" "$T/st/v3nomtp" --add model.layers.3.enorm.weight=28 &&
    expect 2 "holds the tensor 'model.layers.3.enorm.weight', which the layers built from config.json do not have" -- \
    "$BENCH" list "$T/st/v3nomtp" --tokens 8
  sed 's/"hidden_size": 40/"hidden_size": 64/; s/"intermediate_size": 24/"intermediate_size": 32/' \
    "$SRC/tests/data/hf/tiny-gpt_oss/config.json" >"$T/oss64.json" &&
    python3 "$SRC/tests/make_safetensors.py" "$T/oss64.json" "$T/st/oss64" --mxfp4 --dtype BF16 &&
    expect 0 "33 tensors match .*; 4 expert tensors as MXFP4 blocks and scales; stored as BF16 \(33\), U8 \(8\)" -- \
    "$BENCH" list "$T/st/oss64" --tokens 8
  python3 "$SRC/tests/make_safetensors.py" "$T/oss64.json" "$T/st/oss64s" --mxfp4 --drop model.layers.1.mlp.experts.down_proj_scales &&
    expect 2 "holds .model.layers.1.mlp.experts.down_proj_blocks. without its .model.layers.1.mlp.experts.down_proj_scales.: MXFP4 needs both" -- "$BENCH" list "$T/st/oss64s" --tokens 8
  # GPT-NeoX's LayerNorm weights and biases; the causal-mask buffers older checkpoints hold are not weights
  ST tiny-gpt_neox neox --add gpt_neox.layers.0.attention.bias=64,64 --add gpt_neox.layers.0.attention.masked_bias=1,1 &&
    expect 0 "28 tensors match" -- "$BENCH" list "$T/st/neox" --tokens 8
  ST tiny-llama shape --reshape model.layers.1.self_attn.k_proj.weight=47,64 &&
    expect 2 "^$T/st/shape/model.safetensors: 'model.layers.1.self_attn.k_proj.weight' is \[47, 64\] in the checkpoint, but the layers built from config.json have \[48, 64\]$" -- \
    "$BENCH" list "$T/st/shape" --tokens 8
  ST tiny-llama missing --drop model.norm.weight && expect 2 "model.safetensors: lacks 'model.norm.weight' \[64\]" -- \
    "$BENCH" run "$T/st/missing" --tokens 8
  ST tiny-llama bias --add model.layers.0.self_attn.q_proj.bias=96 &&
    expect 2 "holds the tensor 'model.layers.0.self_attn.q_proj.bias', which the layers built from config.json do not have" -- \
    "$BENCH" list "$T/st/bias" --tokens 8
  ST tiny-qwen2 moved --shards 2 && sed -i 's/model-00002-of/model-00001-of/' "$T/st/moved/model.safetensors.index.json" &&
    expect 2 "index.json: names 'model.*' in model-00001-of-00002.safetensors, whose header does not hold it" -- \
    "$BENCH" list "$T/st/moved" --tokens 8
  ST tiny-llama notst --header-length 99999999 &&
    expect 2 "model.safetensors: its first 8 bytes give a header of 99999999 bytes, in a file of [0-9]+: not a safetensors file" -- \
    "$BENCH" list "$T/st/notst" --tokens 8
  "$BENCH" run "$T/st/one" --tokens 8 "${FAST[@]}" --csv "$T/st.csv" >/dev/null 2>&1 &&
    grep -q '"weights_checked": ".*21 tensors match' "$T/st.json" && ok || bad "the JSON's weights_checked"
else
  echo "skip: the safetensors header checks need python3 to write the files"
fi
expect 2 "cut.json:1:24: JSON: " -- "$BENCH" list "$T/hf/cut.json"
expect 2 "--tokens 4: .*resnet18.yaml's input is not token ids" -- "$BENCH" list "$R18" --tokens 4
expect 2 "--kv-len 4: .*has no rope, attention or mla layer" -- "$BENCH" list "$R18" --kv-len 4
expect 2 "--phase decode runs one token per sequence" -- "$BENCH" list "$SRC/configs/hf/Llama-3.2-1B" --phase decode --tokens 4
expect 2 "--phase expects prefill or decode" -- "$BENCH" list "$SRC/configs/hf/Llama-3.2-1B" --phase generate

# the token shape is part of a row's key: two cache lengths compare nothing, and
# --resume keeps a set only at the same shape
DEC=$SRC/tests/data/llama_tiny_decode.yaml
"$BENCH" run "$DEC" "${FAST[@]}" --csv "$T/kv5.csv" >/dev/null 2>&1 &&
  awk -F, "$COLS"' $c["layer_name"] == "model.layers.0.self_attn.attn" && $c["tokens"] == 1 && $c["kv_len"] == 5 {found=1}
    END {exit !found}' "$T/kv5.csv" && ok || bad "tokens and kv_len columns: $(head -2 "$T/kv5.csv" | cut -c1-200)"
grep -q '"tokens": 1, "kv_len": 5' "$T/kv5.json" && ok || bad "the JSON's sets without their token shape"
"$BENCH" run "$DEC" "${FAST[@]}" --kv-len 9 --csv "$T/kv9.csv" >/dev/null 2>&1
expect 0 "0 rows compared" -- "$BENCH" compare "$T/kv5.csv" "$T/kv9.csv"
expect 0 "kept from the previous run" -- "$BENCH" run "$DEC" "${FAST[@]}" --csv "$T/kv5.csv" --resume
"$BENCH" run "$DEC" "${FAST[@]}" --kv-len 9 --csv "$T/kv5.csv" --resume >"$T/kv.out" 2>&1
! grep -q "kept from the previous run" "$T/kv.out" && [ "$(grep -c ',1,9,' "$T/kv5.csv")" -gt 0 ] &&
  [ "$(grep -c ',1,5,' "$T/kv5.csv")" -gt 0 ] && ok || bad "--resume at another --kv-len: $(tail -3 "$T/kv.out")"

# sweep's token-shape axes: every (tokens, kv_len) pair at every batch, in worker
# processes, one set each in the CSV, the decoder's summary columns; --resume keeps them
MIX=$SRC/tests/data/hf/tiny-mixtral
"$BENCH" sweep "$MIX" --batch 1,2 --tokens 3,5 --kv-len 0,7 "${FAST[@]}" --processes 1 --csv "$T/shapes.csv" >"$T/shapes.out" 2>&1 &&
  [ "$(awk -F, "$COLS"' $c["mode"] == "chained" {print $c["batch"] "/" $c["tokens"] "/" $c["kv_len"]}' "$T/shapes.csv" | sort | tr '\n' ' ')" = \
    "1/3/0 1/3/7 1/5/0 1/5/7 2/3/0 2/3/7 2/5/0 2/5/7 " ] && ok || bad "sweep over --tokens and --kv-len: $(tail -3 "$T/shapes.out")"
grep -qE "Backend +Batch +Dtype +Tokens +KV len +Chained median +Noise +Tokens/s" "$T/shapes.out" && ok ||
  bad "a decoder's sweep summary: $(head -3 "$T/shapes.out")"
expect 0 "(kept from the previous run.*){8}" -- bash -c "'$BENCH' sweep '$MIX' --batch 1,2 --tokens 3,5 --kv-len 0,7 ${FAST[*]} --csv '$T/shapes.csv' --resume 2>&1 | tr '\n' ' '"
# --routing: a config.json's experts (uniform when imported) routed by the router or with
# a skew, every moe layer; checked against the reference, and in worker processes
expect 0 "experts +moe .*num_experts=6 ffn_dim=40 routing=router" -- "$BENCH" list "$MIX" --routing router
expect 0 "experts +moe .*load_skew=1.5" -- "$BENCH" list "$MIX" --routing skew:1.5
expect 0 " 0 failed" -- "$BENCH" check "$MIX" --routing router --tokens 9
"$BENCH" run "$MIX" --routing skew:2 --tokens 4 "${FAST[@]}" --processes 1 --csv "$T/routing.csv" >/dev/null 2>&1 &&
  grep -q "skewed (2) routing" "$T/routing.csv" && ! grep -q "uniform routing" "$T/routing.csv" && ok ||
  bad "--routing in worker processes (impl is the worker's): $(grep -o '[a-z]* ([0-9]*) routing\|[a-z]* routing' "$T/routing.csv" | sort | uniq -c)"
expect 2 "--routing: .*smoke.yaml has no moe layer" -- "$BENCH" list "$SMOKE" --routing router
expect 2 "--routing expects uniform, router or skew:S" -- "$BENCH" list "$MIX" --routing skew:
expect 2 "run takes one --tokens and one --kv-len \(bench sweep takes lists\)" -- "$BENCH" run "$MIX" --tokens 4,8
expect 2 "--kv-len lists a value twice" -- "$BENCH" sweep "$MIX" --kv-len 4,4
expect 2 "--tokens expects a positive integer" -- "$BENCH" sweep "$MIX" --tokens 4,
expect 2 "max_position_embeddings: 512 positions, but 600 tokens after 0 cached need 600" -- "$BENCH" sweep "$MIX" --tokens 4,600
# a model larger than memory (LAYERBENCH_MEM_LIMIT stands for a smaller machine): 40
# identical 4 MiB layers need 160 MiB set up alone, so the run is refused with the figure
# and the way out; with --dedupe one of them is set up alone and the chained forward,
# 160 MiB more, is left out with its figure while the layers run
printf 'name: big\ninput: [1024]\nlayers:\n  - {kind: linear, out_features: 1024, repeat: 40}\n' >"$T/big40.yaml"
expect 2 "big at batch 1 in fp32 needs 160\.[0-9] MiB for its layers' weights and buffers alone, but only 64\.0 MiB is available \(--dedupe" -- \
  env LAYERBENCH_MEM_LIMIT=64M "$BENCH" run "$T/big40.yaml" "${FAST[@]}"
expect 0 "chained forward +not run +not run: the chained forward needs 160\.[0-9] MiB \(weights and activations\) beside the isolated layers' 4\.0 MiB, and [0-9.]+ (B|KiB|MiB) is available" -- \
  env LAYERBENCH_MEM_LIMIT=64M "$BENCH" run "$T/big40.yaml" --dedupe "${FAST[@]}" --csv "$T/big40.csv"
awk -F, "$COLS"' $c["mode"] == "chained" && $c["status"] == "skipped" {found=1} END {exit !found}' "$T/big40.csv" && ok ||
  bad "the chained row of a run whose forward does not fit: $(grep chained "$T/big40.csv" | cut -c1-200)"
# ... and a layer with no room for its weights (drawn in fp32, held, a packed copy) fails
# its row before they are made
expect 1 "out of host memory at layer '0': its weights need about 28\.0 MiB .* and [0-9.]+ (B|KiB|MiB) is available" -- \
  env LAYERBENCH_MEM_LIMIT=20M "$BENCH" run "$T/big40.yaml" --dedupe --processes 0 "${FAST[@]}"
# the limit is on what the run holds, watched from outside: TinyLlama's decode, 3 GB
# whole, under 700 MiB keeps its worker's peak resident memory under the limit (the layers
# that do not fit are failed rows with the figures), where a limit taken as a fixed
# budget once let it reach 795 MB
if command -v python3 >/dev/null; then
  peak=$(LAYERBENCH_MEM_LIMIT=700M python3 -c 'import resource, subprocess, sys
subprocess.call(sys.argv[1:], stdout=open(sys.argv[-1] + ".out", "w"), stderr=subprocess.STDOUT)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$BENCH" run "$SRC/tests/data/hf/TinyLlama-1.1B" --phase decode \
    --kv-len 64 --dtype bf16 --dedupe --processes 1 --timeout 1 --no-peaks --csv "$T/lim.csv")
  [ "${peak:-0}" -gt 0 ] && [ "$peak" -lt $((700 * 1024)) ] && grep -q "out of host memory at layer" "$T/lim.csv.out" && ok ||
    bad "TinyLlama under LAYERBENCH_MEM_LIMIT=700M: peak resident ${peak:-?} KiB: $(grep -m1 '^bench' "$T/lim.csv.out")"
else
  echo "skip: the peak memory under LAYERBENCH_MEM_LIMIT needs python3 to read it"
fi

# a decode step's summary: time per output token, tokens/s, and with the peaks measured
# the memory limit (the weights and the cache at the read stream's speed)
expect 0 "time per output token .*decode after 7 cached: .* tokens/s over the batch of 2.*read stream, every round +[0-9.]+ GB/s +\(a read-only stream at the start of [0-9]+ rounds, their median: [0-9.]+ to [0-9.]+; the peaks' triad at the start of the run [0-9.]+\).*memory limit per token .*weights and KV cache read once: .* at the measured [0-9.]+ GB/s, the read stream's median" -- \
  bash -c "'$BENCH' run '$MIX' --phase decode --kv-len 7 --batch 2 ${FAST[*]/--no-peaks} --phase-band off --csv '$T/dec.csv' 2>&1 | tr '\n' ' '"
# ... the read stream, timed at the start of rounds in every worker process and pooled (the
# three of them: --phase-band off): the JSON's median within its min and max, over at
# least one round per process, and every timed CSV row carrying the median
st=$(grep -o '"stream_bytes_per_s": {[^}]*}' "$T/dec.json")
awk -v s="$st" 'BEGIN { n = split(s, f, /[:,{} ]+/); for (i = 1; i < n; i++) v[f[i]] = f[i + 1]
    exit !(v["\"rounds\""] >= 3 && v["\"min\""] > 0 && v["\"min\""] <= v["\"median\""] && v["\"median\""] <= v["\"max\""]) }' &&
  ok || bad "the decode step's read stream in the JSON: '$st'"
med=$(awk -v s="$st" 'BEGIN { split(s, f, /"median": /); split(f[2], g, ","); printf "%.3f", g[1] * 1e-9 }')
awk -v m="$med" "$COLS_Q"' f[c["median_us"]] != "" { n++; d = f[c["stream_gbytes_per_s"]] - m; if (f[c["stream_gbytes_per_s"]] == "" || d * d > 1e-4) bad = 1 }
    END { exit bad || n < 10 }' \
  "$T/dec.csv" && ok || bad "the CSV's stream_gbytes_per_s is not the JSON's median $med on every timed row: $(cut -c1-300 "$T/dec.csv" | head -3)"
# ... and not for a prefill (nor with --no-peaks): the column empty, the JSON null
expect 0 "time to first token .*prefill of 6 tokens: .* tokens/s over the batch of 1" -- \
  bash -c "'$BENCH' run '$MIX' --tokens 6 ${FAST[*]/--no-peaks} --csv '$T/pre.csv' 2>&1 | tr '\n' ' '"
"$BENCH" run "$MIX" --phase decode --kv-len 7 "${FAST[@]}" --csv "$T/dec0.csv" 2>/dev/null >/dev/null
for f in pre dec0; do
  grep -q '"stream_bytes_per_s": null' "$T/$f.json" && ! grep -q '"stream_bytes_per_s": {' "$T/$f.json" &&
    awk "$COLS_Q"' f[c["stream_gbytes_per_s"]] != "" {bad = 1} END {exit bad}' "$T/$f.csv" &&
    ok || bad "$f: a read stream where none was timed: $(grep -o '"stream_bytes_per_s": [^,]*' "$T/$f.json")"
done

# dtypes: the --dtype axis, config and command-line errors, a mixed model, the CSV's
# dtype columns and compare keyed by them (correctness per kind: test_layers)
expect 2 "--dtype expects one of fp32, tf32, bf16, fp16, int8" -- "$BENCH" run "$SMOKE" --dtype fp8
expect 2 "--dtype expects" -- "$BENCH" run "$SMOKE" --dtype bf16,bf16
expect 2 "--tf32 and --dtype both given" -- "$BENCH" run "$SMOKE" --tf32 --dtype bf16
expect 2 "list takes one --dtype" -- "$BENCH" list "$SMOKE" --dtype fp32,bf16
printf 'name: t\ninput: [3, 8, 8]\ndtype: bfloat61\nlayers: [{kind: relu}]\n' >"$T/dtype.yaml"
expect 2 "dtype.yaml:3:8: dtype: expected one of fp32, tf32, bf16, fp16, int8" -- "$BENCH" list "$T/dtype.yaml"
expect 0 "batch 2, bf16, 18 layers" -- "$BENCH" list "$SMOKE" --dtype bf16
expect 0 "19 passed, 0 failed.*dtype fp16.*19 passed, 0 failed" -- bash -c "'$BENCH' check '$SMOKE' --dtype bf16,fp16 | tr '\n' ' '"
expect 0 "skipped \(unsupported\)" -- "$BENCH" check "$SMOKE" --dtype int8
# a mixed model: the stem and the head in fp32 around a bf16 body, checked on both CPU
# backends (the chained forward converts where the dtypes meet)
sed -e 's/^batch: 2/batch: 2\ndtype: bf16/' -e 's/name: stem,/name: stem, dtype: fp32,/' \
    -e 's/name: fc,/name: fc, dtype: float32,/' "$SMOKE" >"$T/mixed.yaml"
expect 0 "dtype bf16 \(mixed.*38 passed, 0 failed" -- bash -c "'$BENCH' check '$T/mixed.yaml' --backend all | tr '\n' ' '"
"$BENCH" run "$T/mixed.yaml" "${FAST[@]}" --dtype fp32,bf16 --csv "$T/dtypes.csv" >/dev/null 2>&1 && ok || bad "run --dtype fp32,bf16"
# every row names both dtypes; the stem stays fp32 in the bf16 set, and counts 4-byte elements
awk -F, "$COLS"' { n[$c["dtype"] "/" $c["layer_dtype"]]++ }
  $c["layer_name"] == "stem" && $c["dtype"] == "bf16" && $c["mode"] != "inmodel" { stem = $c["layer_dtype"] }
  $c["layer_name"] == "act" && $c["mode"] != "inmodel" { act[$c["dtype"]] = $c["bytes"] }
  END { exit !(n["fp32/fp32"] > 0 && n["bf16/bf16"] > 0 && stem == "fp32" && act["fp32"] == 2 * act["bf16"]) }' \
  "$T/dtypes.csv" && ok || bad "dtype columns: $(cut -d, -f1-8 "$T/dtypes.csv" | head -5)"
grep -q '"dtype": "bf16"' "$T/dtypes.json" && grep -q '"layers_in_own_dtype": {"stem": "fp32"' "$T/dtypes.json" && ok ||
  bad "JSON sets without their dtype: $(grep -o '"completed.*' "$T/dtypes.json" | head -c 300)"
# compare matches rows of one dtype only: fp32 against a bf16-only file matches nothing
for t in fp32 bf16; do
  { head -1 "$T/dtypes.csv"; awk -F, "$COLS"' $c["dtype"] == "'$t'"' "$T/dtypes.csv"; } >"$T/${t}only.csv"
done
expect 0 "0 rows compared" -- "$BENCH" compare "$T/fp32only.csv" "$T/bf16only.csv"
# --resume keeps the finished (batch, backend, dtype) sets and measures the rest
"$BENCH" run "$T/mixed.yaml" "${FAST[@]}" --dtype fp32 --csv "$T/resume.csv" >/dev/null 2>&1
expect 0 "batch 2 in fp32 on cpu: kept from the previous run" -- "$BENCH" run "$T/mixed.yaml" "${FAST[@]}" --dtype fp32,bf16 --csv "$T/resume.csv" --resume

# --pass: each layer's backward alone (its inputs' and weights' gradients), an axis like dtype
expect 2 "--pass expects forward, backward or train .*got 'sideways'" -- "$BENCH" run "$SMOKE" --pass sideways
expect 2 "--pass expects" -- "$BENCH" run "$SMOKE" --pass backward,backward
expect 2 "--pass goes with bench run, sweep and check, not list" -- "$BENCH" list "$SMOKE" --pass backward
"$BENCH" run "$SMOKE" "${FAST[@]}" --pass forward,backward --csv "$T/pass.csv" >"$T/pass.out" 2>&1 && ok ||
  bad "run --pass forward,backward: $(tail -3 "$T/pass.out")"
# both sets; every conv2d and linear backward row timed by its own kernel, with twice the
# forward's multiply-accumulates (data and weights); the chained rows of the backward set say why they did not run
awk -F, "$COLS"' $c["mode"] == "chained" { ch[$c["pass"]] = $c["status"] " " $c["note"] }
  $c["mode"] != "chained" && $c["mode"] != "inmodel" && ($c["kind"] == "conv2d" || $c["kind"] == "linear") {
    f[$c["pass"], $c["layer_index"]] = $c["macs"]
    if ($c["pass"] == "backward") { n++; ok += $c["status"] == "ok" && $c["impl"] ~ /sgemm/ } }
  END { for (k in f) { split(k, p, SUBSEP); if (p[1] == "backward" && f[k] != 2 * f["forward", p[2]]) bad++ }
        exit !(n > 0 && ok == n && !bad && ch["forward"] ~ /^ok/ && ch["backward"] ~ /^skipped no chained training step/) }' \
  "$T/pass.csv" && ok || bad "pass rows: $(grep -E 'chained|conv' "$T/pass.csv" | cut -d, -f1-12,30- | head -6)"
grep -q '"pass": "backward"' "$T/pass.json" && grep -q '"pass": "forward"' "$T/pass.json" && ok ||
  bad "JSON sets without their pass: $(grep -o '"completed.*' "$T/pass.json" | head -c 300)"
grep -q "fp32, backward" "$T/pass.out" && ok || bad "the backward set's banner does not say so: $(grep === "$T/pass.out")"
# bench check --pass backward: every layer's gradients against the reference backward; the
# smoke model's view (flatten) skipped as such (its dropout is not one outside the forward:
# training draws its mask), and the tiny decoder (attention, rope, rmsnorm, the
# embedding's dense table gradient) whole in fp32
expect 0 "backward \(each layer's gradients.*, 0 failed, 1 skipped" -- bash -c "'$BENCH' check '$SMOKE' --pass backward | tr '\n' ' '"
expect 0 ", 0 failed, 0 skipped" -- "$BENCH" check "$SRC/tests/data/llama_tiny_prefill.yaml" --pass backward --dtype fp32
# attention's two backward ways, each named in impl: the faster of both timed (the
# default), the rule (--algo heuristic: causal, the blocks), or one forced
LT=$SRC/tests/data/llama_tiny_prefill.yaml
expect 0 "attention .*(plain: the scores kept per head|blocks: memory-efficient).*\(the faster of 2, timed warm\)" -- "$BENCH" run "$LT" "${QUICK[@]}" --pass backward
expect 0 "attention .*blocks: memory-efficient, the scores recomputed by 64x64 blocks, 6 sgemm \(--algo heuristic: causal\)" -- "$BENCH" run "$LT" "${QUICK[@]}" --pass backward --algo heuristic
expect 0 "attention .*plain: the scores kept per head, 5 sgemm .*\(LAYERBENCH_CPU_ATTN_BWD\)" -- env LAYERBENCH_CPU_ATTN_BWD=plain "$BENCH" run "$LT" "${QUICK[@]}" --pass backward
# bf16 and fp16: the fp32 kernels on fp32 copies, every gradient rounded to the dtype
expect 0 "dtype bf16, backward.*, 0 failed, 0 skipped.*dtype fp16, backward.*, 0 failed, 0 skipped" -- bash -c "'$BENCH' check '$SRC/tests/data/llama_tiny_prefill.yaml' --pass backward --dtype bf16,fp16 | tr '\n' ' '"
expect 2 "run it for one --pass at a time" -- "$BENCH" run "$SMOKE" "${FAST[@]}" --pass forward,backward --stacks "$T/p.folded"
# compare matches each pass with itself only; --resume keeps the finished pass's set
for t in forward backward; do
  { head -1 "$T/pass.csv"; awk -F, "$COLS"' $c["pass"] == "'$t'"' "$T/pass.csv"; } >"$T/${t}only.csv"
done
expect 0 "0 rows compared" -- "$BENCH" compare "$T/forwardonly.csv" "$T/backwardonly.csv"
"$BENCH" run "$SMOKE" "${FAST[@]}" --pass backward --csv "$T/presume.csv" >/dev/null 2>&1
expect 0 "batch 2, backward on cpu: kept from the previous run" -- "$BENCH" run "$SMOKE" "${FAST[@]}" --pass backward,forward --csv "$T/presume.csv" --resume
[ "$(awk -F, "$COLS"' NR > 1 { print $c["pass"] }' "$T/presume.csv" | sort -u | tr '\n' ' ')" = "backward forward " ] && ok ||
  bad "--resume with a second pass: $(cut -d, -f1-6 "$T/presume.csv" | sort -u | head -4)"

# --pass train: each layer's training forward then its backward alone, and the whole step
# chained (the forward in training mode, the loss, the backward in reverse, the residuals'
# gradients summed), each layer's forward and backward inside it as parts
"$BENCH" run "$SMOKE" "${FAST[@]}" --pass forward,train --csv "$T/train.csv" >"$T/train.out" 2>&1 && ok ||
  bad "run --pass forward,train: $(tail -3 "$T/train.out")"
# every timed train row costs its forward's FLOPs and more; the step ran, with the forward and
# the backward of every layer that is not a view as parts, the backward of the four
# convolutions after the stem and of fc in its data and weights halves, the stem's in its
# weights half only (it reads the model's input); the in-model rows add up to the step: each sample's
# spans tile it but the loss, so their medians' sum meets the step's median within 5% and
# three times its noise (a sanitizer build on a busy machine is noisy)
got=$(awk "$COLS_Q"' function v(k) { return f[c[k]] }
  v("mode") == "chained" { ch[v("pass")] = v("status") " " v("impl"); med[v("pass")] = v("median_us"); noise = v("noise_pct") }
  v("mode") == "inmodel" && v("pass") == "train" && v("part") == "" && v("status") == "ok" { inside += v("median_us") }
  v("mode") == "inmodel" && v("pass") == "train" && v("part") != "" { parts[v("part")]++ }
  v("mode") != "chained" && v("mode") != "inmodel" && v("status") == "ok" {
    fl[v("pass"), v("layer_index")] = v("flops"); if (v("pass") == "train") { n++; dup += v("impl") ~ /, then backward / } }
  END { for (k in fl) { split(k, p, SUBSEP); if (p[1] == "train" && fl[k] + 0 <= fl["forward", p[2]] + 0) bad++ }
        d = inside / med["train"] - 1; tol = 0.05 + 3 * noise / 100
        good = n > 0 && dup == n && !bad && ch["train"] ~ /^ok training step: forward, a weighted sum/ &&
               parts["forward"] == parts["backward"] + parts["backward weights"] && parts["forward"] >= 15 &&
               parts["backward data"] == 5 && parts["backward weights"] == 6 && d < tol && d > -tol
        print good ? "ok" : sprintf("%d train rows, %d of both passes, %d not above the forward; step %s; parts %d/%d/%d/%d; " \
                                    "in-model sum %+.1f%% of the step (tolerance %.1f%%)", n, dup, bad, ch["train"],
                                    parts["forward"], parts["backward"], parts["backward data"], parts["backward weights"],
                                    100 * d, 100 * tol) }' "$T/train.csv")
[ "$got" = ok ] && ok || bad "train rows: $got"
grep -q "training step median" "$T/train.out" && grep -q "memory of the training step" "$T/train.out" &&
  grep -q "fp32, train" "$T/train.out" && grep -q "fp32 train" "$T/train.out" && ok ||
  bad "the train set's summary: $(grep -E '===|training|memory' "$T/train.out" | head -5)"
# the trace lays the step out as it ran: every layer's forward, then their backward in
# reverse (the smoke model's last layer, 17, first)
"$BENCH" run "$SMOKE" "${FAST[@]}" --pass train --trace "$T/train.json" >/dev/null 2>&1
fw=$(grep -c '"pass": "forward"' "$T/train.json") bw=$(grep -c '"pass": "backward"' "$T/train.json")
first=$(grep -o '"index": [0-9]*, "pass": "backward"' "$T/train.json" | head -1 | tr -dc '0-9')
[ "$fw" = "$bw" ] && [ "$fw" -ge 15 ] && [ "$first" = 17 ] && grep -q 'training step (the median sample)' "$T/train.json" && ok ||
  bad "the train trace: $fw forward and $bw backward spans, the first backward of layer $first"
# a decoder's step says its tokens/s, and its loss is cross-entropy over the vocabulary
expect 0 "training step median.*tokens/s.*cross-entropy" -- "$BENCH" run "$SRC/tests/data/llama_tiny_prefill.yaml" "${FAST[@]}" --pass train
# bench check --pass train: each layer's training forward and gradients, then the chained
# step's weights' gradients against the reference step's
expect 0 "training step \(chained\) .* ok: the weights' gradients.*, 0 failed, 1 skipped" -- bash -c "'$BENCH' check '$SMOKE' --pass train | tr '\n' ' '"
expect 0 "training step \(chained\) .* ok.*, 0 failed, 0 skipped" -- bash -c "'$BENCH' check '$SRC/tests/data/llama_tiny_prefill.yaml' --pass train | tr '\n' ' '"
# on onednn: the convolutions', the activations' and max pooling's backward on oneDNN's
# primitives (max pooling after its training forward again), batch norm's and add's on the
# cpu kernel; the step in bf16 as well
if grep -q "^onednn " "$T/all.out"; then
  expect 0 "conv2d +onednn .* ok.*training step \(chained\) +model +onednn .* ok.*, 0 failed" -- bash -c "'$BENCH' check '$SMOKE' --pass train --backend onednn | tr '\n' ' '"
  "$BENCH" run "$SMOKE" "${FAST[@]}" --pass train --backend onednn --format md >"$T/odtrain.md" 2>&1
  for want in "then backward weights [^ ]+, data" "batchnorm2d .*then backward cpu kernel: per channel" \
              "relu6 .*then backward jit" "maxpool2d .*then backward [^ ]+ \(after its forward again: argmax" \
              "add .*then backward cpu kernel: direct \(no oneDNN primitive\)"; do
    grep -Eq "$want" "$T/odtrain.md" && ok || bad "onednn train rows lack /$want/: $(grep -E 'batchnorm2d|relu6|maxpool2d' "$T/odtrain.md" | head -3)"
  done
  expect 0 "dtype bf16, train.*training step \(chained\) .* ok.*, 0 failed" -- bash -c "'$BENCH' check '$SMOKE' --pass train --backend onednn --dtype bf16 | tr '\n' ' '"
  expect 0 "batchnorm2d .*cpu kernel: per channel .*\(oneDNN's is its ncsp loop, 5x slower\)" -- "$BENCH" run "$SMOKE" "${FAST[@]}" --pass backward --backend onednn
else
  echo "skip: the onednn checks of the train pass need the onednn backend, which this build lacks"
fi
# a kind without a backward refuses the step by name (stochastic depth drops whole samples in training)
printf 'name: sd\ninput: [4, 5, 5]\nbatch: 2\nlayers:\n  - {name: c, kind: conv2d, out_channels: 4, kernel_size: 3, padding: 1}\n  - {name: skip, kind: stochastic_depth, p: 0.1, mode: row}\n  - {name: r, kind: relu}\n' >"$T/sd.yaml"
expect 0 "training step +not run.*layer 'skip' \(stochastic_depth, fp32\) is not supported on cpu: the kind has no backward" -- "$BENCH" run "$T/sd.yaml" "${FAST[@]}" --pass train

# a model of views only has no step: refused, not a crash
printf 'name: v\ninput: [4, 5, 5]\nlayers:\n  - {kind: flatten}\n' >"$T/views.yaml"
expect 0 "training step +not run.*every layer is a view" -- "$BENCH" run "$T/views.yaml" "${FAST[@]}" --pass train
expect 0 "training step \(chained\).*skipped \(unsupported\).*every layer is a view" -- "$BENCH" check "$T/views.yaml" --pass train

# freezing, as fine-tuning does: requires_grad: false on a layer or a block, or --freeze
# PATTERN. A frozen layer computes no weights' gradient (features.0: its data half only); a
# layer that nothing up to it learns runs no backward in the step (conv1, frozen on the
# input, and r0 after it); a convolution whose input learns nothing has no data half (conv2)
printf '%s\n' 'name: fz' 'input: [3, 12, 12]' 'batch: 2' 'layers:' \
  '  - {kind: conv2d, name: conv1, out_channels: 8, kernel_size: 3, padding: 1, requires_grad: false}' \
  '  - {kind: relu, name: r0}' \
  '  - {kind: conv2d, name: conv2, out_channels: 8, kernel_size: 3, padding: 1}' \
  '  - {kind: batchnorm2d, name: bn1}' \
  '  - kind: block' '    name: features' '    requires_grad: false' '    layers:' \
  '      - {kind: conv2d, out_channels: 8, kernel_size: 3, padding: 1}' '      - {kind: relu}' \
  '  - {kind: conv2d, name: conv3, out_channels: 8, kernel_size: 3, padding: 1}' \
  '  - {kind: adaptive_avgpool2d, name: pool, output_size: 1}' '  - {kind: flatten, name: flat}' \
  '  - {kind: linear, name: fc, out_features: 10}' >"$T/fz.yaml"
"$BENCH" run "$T/fz.yaml" "${FAST[@]}" --pass train --csv "$T/fz.csv" >"$T/fz.out" 2>&1 && ok || bad "run a frozen model: $(tail -3 "$T/fz.out")"
got=$(awk "$COLS_Q"' function v(k) { return f[c[k]] }
  v("mode") == "inmodel" && v("part") != "" { i = v("layer_index"); p[i] = p[i] "/" v("part") }
  v("mode") != "chained" && v("mode") != "inmodel" { fl[v("layer_name")] = v("flops") }
  END { good = p[0] == "/forward" && p[1] == "/forward" && p[2] == "/forward/backward weights" &&
               p[4] == "/forward/backward data" && p[6] == "/forward/backward data/backward weights" &&
               fl["features.0"] + 0 < fl["conv3"] + 0
        print good ? "ok" : sprintf("parts: conv1 %s, r0 %s, conv2 %s, features.0 %s, conv3 %s; flops %s vs %s", p[0], p[1],
                                    p[2], p[4], p[6], fl["features.0"], fl["conv3"]) }' "$T/fz.csv")
[ "$got" = ok ] && ok || bad "a frozen model's step: $got"
grep -q "2 layers frozen (requires_grad: false, --freeze): 808 of the" "$T/fz.out" && ok || bad "no word of the frozen layers: $(head -3 "$T/fz.out")"
expect 0 "training step \(chained\) .* ok: the weights' gradients.*, 0 failed" -- bash -c "'$BENCH' check '$T/fz.yaml' --pass train | tr '\n' ' '"
expect 0 "training step \(chained\) .* ok: the weights' gradients.*, 0 failed" -- bash -c "'$BENCH' check '$SMOKE' --pass train --freeze 'stem,res.*' | tr '\n' ' '"
if grep -q "^onednn " "$T/all.out"; then
  expect 0 "training step \(chained\) .* ok: the weights' gradients.*, 0 failed" -- bash -c "'$BENCH' check '$T/fz.yaml' --pass train --backend onednn | tr '\n' ' '"
  expect 0 "weights none \(frozen\), data" -- "$BENCH" run "$T/fz.yaml" "${FAST[@]}" --pass train --backend onednn --format md
fi
expect 2 "--freeze: 'nothing\*' matches no layer with weights" -- "$BENCH" run "$SMOKE" "${FAST[@]}" --pass train --freeze 'nothing*'
expect 2 "--freeze: expected PATTERN" -- "$BENCH" list "$SMOKE" --freeze ,
expect 0 "training step +not run.*no weights the loss reaches learn" -- "$BENCH" run "$SMOKE" "${FAST[@]}" --pass train --freeze '*'
# --optimizer: one update of every parameter tensor that learns after the backward, each a
# part (update) of its layer inside the step, its state in the step's memory; bench check
# runs one step at a real learning rate and compares the change of the weights
"$BENCH" run "$SMOKE" "${FAST[@]}" --pass train --optimizer adamw --csv "$T/opt.csv" --trace "$T/opt_trace.json" >"$T/opt.out" 2>&1 &&
  ok || bad "run --optimizer adamw: $(tail -3 "$T/opt.out")"
got=$(awk "$COLS_Q"' function v(k) { return f[c[k]] }
  v("mode") == "inmodel" && v("part") == "update" { n++ }
  v("mode") == "chained" { impl = v("impl") }
  END { print n == 7 && impl ~ /adamw update/ ? "ok" : n " update parts; " impl }' "$T/opt.csv")
[ "$got" = ok ] && ok || bad "the optimizer's parts: $got"
grep -q "memory of the training step.*adamw's state 8.7 KiB" "$T/opt.out" && [ "$(grep -c '"pass": "update"' "$T/opt_trace.json")" = 7 ] &&
  ok || bad "the optimizer's memory or trace: $(grep 'memory of' "$T/opt.out" | cut -c1-200)"
for o in sgd adamw; do
  expect 0 "training step \(chained\) .* ok: the weights' gradients.*$o's update [0-9.e+-]+ \(tolerance" -- bash -c "'$BENCH' check '$SMOKE' --pass train --optimizer $o | tr '\n' ' '"
done
expect 2 "--optimizer sgd updates the weights after a training step's backward: give --pass train too" -- "$BENCH" run "$SMOKE" "${FAST[@]}" --optimizer sgd
expect 2 "--optimizer expects none, sgd or adamw" -- "$BENCH" run "$SMOKE" "${FAST[@]}" --pass train --optimizer lion
# a step in bf16 (the cpu's fp32 backward kernels on fp32 copies; linear's and conv2d's on
# the bf16 GEMM tiles where the CPU has AVX512_BF16), and its update through
# fp32 master weights: the step checked, the masters' change compared; timed, the
# backward's conversions are parts of their own (the element-wise kinds' loops read and
# write bf16 themselves) and the masters are in the step's memory
for o in none adamw; do
  expect 0 "dtype bf16, train.*training step \(chained\) .* ok: the weights' gradients.*, 0 failed" -- bash -c "'$BENCH' check '$SMOKE' --pass train --dtype bf16 --optimizer $o | tr '\n' ' '"
done
"$BENCH" run "$SMOKE" "${FAST[@]}" --pass train --dtype bf16 --optimizer sgd --csv "$T/bf16train.csv" >"$T/bf16train.out" 2>&1 &&
  ok || bad "run --pass train --dtype bf16: $(tail -3 "$T/bf16train.out")"
# its utilisation is against the bf16 GEMM's peak where the backend measured one (a
# 16-bit step held against the sgemm's peak read 116%), else says it took fp32's
"$BENCH" run "$SMOKE" "${NOPEAKS[@]}" --pass train --dtype bf16 >"$T/bf16peak.out" 2>&1
if grep -q "bf16 peak (measured)" "$T/bf16peak.out"; then want="of the measured bf16 peak,"; else want="of the measured peak \(fp32's: bf16's not measured\),"; fi
grep -Eq "training step median.*GFLOP/s = [0-9]+% $want" "$T/bf16peak.out" && ok ||
  bad "a bf16 step's utilisation: wanted '$want' in $(grep -E 'peak|step median' "$T/bf16peak.out")"
got=$(awk "$COLS_Q"' function v(k) { return f[c[k]] }
  v("mode") == "chained" { st = v("status") }
  v("mode") == "inmodel" && v("part") ~ /^convert (to|from) fp32$/ { conv++ }
  v("mode") != "chained" && v("mode") != "inmodel" && v("status") == "ok" { n++
    own = v("kind") ~ /^(relu|relu6|sigmoid|silu|tanh|hardswish|hardsigmoid|gelu|add|mul)$/
    gemm = v("kind") ~ /^(linear|conv2d)$/ && v("impl") ~ /then backward (cpu kernel: )?(im2col \+ )?gemm bf16 vdpbf16ps/
    via += !own && !gemm && v("impl") ~ /then backward (cpu kernel: )?fp32 copies/
    native += (own && v("impl") ~ /then backward (cpu kernel: )?direct, (16-bit|bf16) in and out/) || gemm }
  END { good = st == "ok" && conv > 0 && n > 0 && via + native == n && native > 0
        print good ? "ok" : st " step; " conv " conversion parts; " via " of " n " rows on fp32 copies, " native " on 16-bit loops" }' "$T/bf16train.csv")
[ "$got" = ok ] && ok || bad "bf16 train rows: $got"
grep -q "memory of the training step.*sgd keeps no state, fp32 master weights" "$T/bf16train.out" && ok ||
  bad "the bf16 step's memory: $(grep 'memory of' "$T/bf16train.out" | cut -c1-250)"
# a step that cannot fit in the memory the run may take is refused before it is built: a
# linear layer of 16.8 MB of weights under an 80 MiB limit (alone, its train row fits),
# whose step with AdamW (weights, gradients, two moments, a packed copy) cannot
printf 'name: huge\ninput: [2048]\nlayers:\n  - {kind: linear, out_features: 2048}\n' >"$T/huge.yaml"
expect 0 "training step +not run +not run: the training step needs .* \(as planned, and a packed copy of the weights\) beside the isolated layers' .*, and .* is available" -- env LAYERBENCH_MEM_LIMIT=80M "$BENCH" run "$T/huge.yaml" "${FAST[@]}" --pass train --optimizer adamw

printf 'name: g\ninput: [4, 5, 5]\nlayers:\n  - {kind: relu, requires_grad: false}\n' >"$T/grad_relu.yaml"
expect 2 "grad_relu.yaml:4:33: layer '0' \(relu\) has no weights: requires_grad: false applies" -- "$BENCH" list "$T/grad_relu.yaml"
printf 'name: g\ninput: [4, 5, 5]\nlayers:\n  - {kind: conv2d, out_channels: 2, kernel_size: 1, requires_grad: no}\n' >"$T/grad_no.yaml"
expect 2 "grad_no.yaml:4:[0-9]+: requires_grad: expected true or false, got 'no'" -- "$BENCH" list "$T/grad_no.yaml"

echo "test_cli: $pass passed, $fail failed"
[ $fail = 0 ]
