#!/usr/bin/env bash
# Hostile input to every surface of bench, by class: what is read (FIFOs, devices, links,
# sizes, NUL bytes), what is written (links planted at temporary names, two outputs in one
# file however spelt, streams), generated scripts (a --slurm folder whose name holds a
# line break), what is read back (a half-finished set, a part of another shard, a status
# that is no status, a JSON that is not JSON), signals, resource limits (ulimit -s -f -v),
# a stopped worker, config.json and safetensors files that lie, the environment, compare's
# inputs and the command line. Every case must end in a clear message and its exit
# status: never a crash, a hang (every command runs under timeout), exit 0 on an error,
# a wrong file, or lost work. The reproducers of issue 36 are among them.
# usage: test_hostile.sh BENCH SOURCE_DIR
set -u
BENCH=$(realpath "$1")
SRC=$(realpath "$2")
. "$SRC/tests/common.sh"
B() { timeout 60 "$BENCH" "$@"; }
# no signal death (exit 124: the timeout, 128+N: a signal): the exit status of "$@"
alive() { "$@" >"$T/alive.out" 2>&1; local rc=$?; [ "$rc" -lt 124 ] && return 0; bad "$* -> exit $rc: $(tail -3 "$T/alive.out")"; return 1; }
RUN=(--processes 0 --algo-cache none "${QUICK[@]}")

# ---- files read: only regular files, bounded, no NUL, never waited on --------------------
mkfifo "$T/fifo.yaml" "$T/fifo.json" "$T/fifo.tsv" "$T/fifo.csv"
expect 2 "fifo.yaml': a FIFO, not a regular file" -- timeout 5 "$BENCH" list "$T/fifo.yaml"
expect 2 "a FIFO, not a regular file" -- timeout 5 "$BENCH" list "$T/fifo.json"
expect 2 "algo-cache: '$T/fifo.tsv': a FIFO" -- timeout 5 "$BENCH" run "$SMOKE" "${QUICK[@]}" --processes 0 --algo-cache "$T/fifo.tsv"
expect 2 "'/dev/full': a character device" -- timeout 5 "$BENCH" run "$SMOKE" "${QUICK[@]}" --processes 0 --algo-cache /dev/full
expect 2 "fifo.csv': a FIFO" -- timeout 5 "$BENCH" compare "$T/fifo.csv" "$T/fifo.csv"
expect 2 "--resume needs --csv FILE" -- timeout 5 "$BENCH" run "$SMOKE" "${RUN[@]}" --csv "$T/fifo.csv" --resume
printf '# layerbench algorithm choices (bench --algo-cache), format 1: context\tlayer\tchoice\nx\ty\tz\n\0after\n' >"$T/nul.tsv"
expect 2 "a NUL byte at offset" -- B run "$SMOKE" "${QUICK[@]}" --processes 0 --algo-cache "$T/nul.tsv"
# a config.json of 17 MB: refused by its size at once, not read whole
mkdir -p "$T/huge"
python3 -c "import sys; sys.stdout.write('{\"model_type\": \"llama\", \"pad\": \"' + 'x' * (17 << 20) + '\"}')" >"$T/huge/config.json"
expect 2 "larger than the 16 MiB" -- timeout 5 "$BENCH" list "$T/huge"
ln -s "$T/nowhere.yaml" "$T/dangling.yaml"
expect 2 "dangling.yaml': cannot open" -- B list "$T/dangling.yaml"

# ---- files written --------------------------------------------------------------------
# a link planted where a temporary could go is never written through, nor is the file it names
echo "victim" >"$T/victim"
for n in 1 2 99999 $$; do ln -s "$T/victim" "$T/out.csv.tmp.$n"; done
expect 0 "" -- B run "$SMOKE" "${RUN[@]}" --csv "$T/out.csv"
[ "$(cat "$T/victim")" = victim ] && [ "$(stat -c %a "$T/victim")" != 600 ] && ok || bad "a planted link was written through"
[ -L "$T/out.csv.tmp.99999" ] && ok || bad "a planted link (not ours) was removed"
ls "$T"/out.csv.tmp.* 2>/dev/null | grep -vq 'tmp\.\(1\|2\|99999\|'$$'\)$' && bad "a temporary was left: $(ls "$T"/out.csv.tmp.*)" || ok
# two outputs that are one file, however spelt: refused before anything runs
expect 2 "same file" -- B run "$SMOKE" "${RUN[@]}" --csv "$T/x.csv" --trace "$T/./x.csv"
expect 2 "same file" -- B run "$SMOKE" "${RUN[@]}" --csv "$T/y.csv" --trace "$T/y.json"
touch "$T/h1.txt" && ln "$T/h1.txt" "$T/h2.txt"
expect 2 "same file" -- B run "$SMOKE" "${RUN[@]}" --trace "$T/h1.txt" --stacks "$T/h2.txt"
expect 2 "same file" -- B sweep "$SMOKE" "${RUN[@]}" --batch 1,2 --stacks "$T/s.txt" --csv "$T/s.batch1.txt"
[ ! -e "$T/s.batch1.txt" ] && ok || bad "a refused sweep wrote its CSV"
expect 2 "same file" -- B run "$SMOKE" "${RUN[@]}" --csv - --trace /dev/stdout
expect 2 "symbolic link to a file that does not exist" -- B run "$SMOKE" "${RUN[@]}" --csv "$T/dangling.yaml"
# a trace to stdout (or a FIFO) is one JSON document, and the tables go to stderr
B sweep "$SMOKE" "${RUN[@]}" --batch 1,2 --trace /dev/stdout >"$T/trace_out.json" 2>"$T/trace_err.txt"
python3 -c "import json, sys; json.load(open(sys.argv[1]))" "$T/trace_out.json" 2>/dev/null && ok ||
  bad "--trace /dev/stdout > f: not one JSON document: $(head -c 200 "$T/trace_out.json")"
grep -q "Chained median" "$T/trace_err.txt" && ok || bad "--trace /dev/stdout: the sweep's table was lost"
mkfifo "$T/trace.fifo"
cat "$T/trace.fifo" >"$T/from_fifo.json" & reader=$!
B sweep "$SMOKE" "${RUN[@]}" --batch 1,2 --trace "$T/trace.fifo" >/dev/null 2>&1
wait $reader
python3 -c "import json, sys; json.load(open(sys.argv[1]))" "$T/from_fifo.json" 2>/dev/null && ok || bad "--trace FIFO: not one JSON document"

# ---- generated scripts: nothing a path holds becomes a command ---------------------------
(cd "$T" && expect 2 "holds a control character" -- timeout 20 "$BENCH" sweep "$SMOKE" --batch 1,2 --dry-run --slurm "$(printf 'sw\ntouch INJECTED #')")
[ ! -e "$T/INJECTED" ] && ok || bad "a --slurm folder name ran a command"
(cd "$T" && B sweep "$SMOKE" --batch 1 --dry-run --slurm "q'\$(touch INJECTED2)\`touch INJECTED3\`" >"$T/dry_q.txt" 2>&1)
[ ! -e "$T/INJECTED2" ] && [ ! -e "$T/INJECTED3" ] && ! grep -q '^#SBATCH --output=.*\$(' "$T/dry_q.txt" && ok ||
  bad "a quote, \$ or backquote reached a script unquoted"
bash -n <(awk '/^# ---- .*array-0-0.sbatch/{f=1; next} /^# submitted as/{f=0} f' "$T/dry_q.txt") && ok || bad "the script does not parse"

# ---- a sweep folder read back: merge and --resume trust nothing --------------------------
SW=$T/sw
B sweep "$SMOKE" --batch 1,2 --dry-run --slurm "$SW" >"$T/dry.txt"
mkdir -p "$SW" && awk '/^# ---- .*shards.tsv/{f=1; next} f' "$T/dry.txt" >"$SW/shards.tsv"
# the part shard S writes as array job A's task T, by the same command its script runs
part() {
  local shard=$1 job=$2 batch=$3 state=${4:-done} rc=${5:-0}
  (cd "$T" && timeout 120 "$BENCH" sweep "$SMOKE" --batch "$batch" --backend cpu --dtype fp32 "${RUN[@]}" --csv "$SW/part-${job}_0.csv" >/dev/null 2>&1)
  printf 'shard=%s\nstate=%s\nexit=%s\nhost=h\nslurm_node=n\nslurm_job_id=%s\nslurm_array_job_id=%s\nslurm_array_task_id=0\n' \
    "$shard" "$state" "$rc" "$job" "$job" >"$SW/part-${job}_0.status"
}
part 0 100 1 && part 1 101 2
expect 0 "merged 2 of 2 shards" -- B merge "$SW" -o "$T/m.csv"
# -o onto the sweep's own files: refused, nothing replaced
cp "$SW/part-100_0.csv" "$T/keep.csv"
expect 2 "a file of the sweep" -- B merge "$SW" -o "$SW/part-100_0.csv"
expect 2 "a file of the sweep" -- B merge "$SW" -o "$SW/shards.tsv"
ln -s "$SW/part-101_0.csv" "$T/link.csv"
expect 2 "a file of the sweep" -- B merge "$SW" -o "$T/link.csv"
cmp -s "$SW/part-100_0.csv" "$T/keep.csv" && ok || bad "merge -o replaced its own input"
# a part cut short (19 of its rows): not merged, the shard failed
head -n 10 "$T/keep.csv" >"$SW/part-100_0.csv"
expect 1 "shard 0 .*the CSV holds 9 of its [0-9]+ rows.*merged 1 of 2" -- bash -c "set -o pipefail; timeout 60 '$BENCH' merge '$SW' -o '$T/m.csv' 2>&1 | tr '\n' ' '"
cp "$T/keep.csv" "$SW/part-100_0.csv"
# shard 0's part holding batch 2's rows
cp "$SW/part-101_0.csv" "$SW/part-100_0.csv" && cp "$SW/part-101_0.json" "$SW/part-100_0.json"
expect 1 "shard 0 .*holds rows of batch 2 .*not of its shard" -- B merge "$SW" -o "$T/m.csv"
part 0 100 1
# a JSON context that is not JSON
echo "{not json" >"$SW/part-100_0.json"
expect 1 "shard 0 .*not JSON" -- B merge "$SW" -o "$T/m.csv"
part 0 100 1
# rows twice
tail -n 3 "$SW/part-100_0.csv" >>"$SW/part-100_0.csv"
expect 1 "shard 0 .*repeats a row" -- B merge "$SW" -o "$T/m.csv"
part 0 100 1
# a status that is no status: shard=abc is not shard 0
sed -i 's/^shard=0$/shard=abc/' "$SW/part-100_0.status"
expect 1 "status file .* not one a shard's task writes.*shard 0 .*missing" -- bash -c "set -o pipefail; timeout 60 '$BENCH' merge '$SW' -o '$T/m.csv' 2>&1 | tr '\n' ' '"
part 0 100 1
# a FIFO as a status or a part JSON: never waited on
mkfifo "$SW/part-300_0.status"
rm "$SW/part-101_0.json" && mkfifo "$SW/part-101_0.json"
expect 1 "shard 1 .*a FIFO" -- timeout 20 "$BENCH" merge "$SW" -o "$T/m.csv"
rm -f "$SW/part-300_0.status" "$SW/part-101_0.json" && part 1 101 2
# jobs.tsv with a base outside the shard list (was: a write outside a buffer)
for base in -5 -1 99999; do
  printf '0\tarray\t123\t%s\t%s/array-0-0.sbatch\t0\n' "$base" "$SW" >"$SW/jobs.tsv"
  expect 2 "jobs.tsv:1: not a line bench sweep --slurm writes" -- B sweep "$SMOKE" --batch 1,2 --resume --dry-run --slurm "$SW"
done

# ---- --resume keeps only whole sets -----------------------------------------------------
B sweep "$SMOKE" "${RUN[@]}" --batch 1,2 --csv "$T/r.csv" >/dev/null 2>&1
rows=$(wc -l <"$T/r.csv")
head -n $((rows - 5)) "$T/r.csv" >"$T/r_cut.csv" && cp "$T/r.json" "$T/r_cut.json"
expect 0 "batch 2 on cpu in fp32 in .*r_cut.csv: the CSV holds [0-9]+ of its [0-9]+ rows: measured again" -- \
  B sweep "$SMOKE" "${RUN[@]}" --batch 1,2 --csv "$T/r_cut.csv" --resume
[ "$(wc -l <"$T/r_cut.csv")" = "$rows" ] && ok || bad "--resume of a cut set: $(wc -l <"$T/r_cut.csv") lines, expected $rows"
grep -q "batch 1 .*kept from the previous run" <(B sweep "$SMOKE" "${RUN[@]}" --batch 1,2 --csv "$T/r_cut.csv" --resume 2>&1) && ok ||
  bad "--resume did not keep a whole set"
cp "$T/r.csv" "$T/r_nojson.csv"
expect 0 "r_nojson.json is not there: nothing says which sets" -- B sweep "$SMOKE" "${RUN[@]}" --batch 1,2 --csv "$T/r_nojson.csv" --resume

# ---- signals -----------------------------------------------------------------------------
# SIGINT at once: a background job starts with SIGINT ignored, the handler comes first.
# The signal goes as soon as the handler is there (SigCgt in /proc): before it, no
# program could see it (under a sanitizer on a busy machine, 50 ms can pass before main)
handler_up() {
  local i m
  for i in $(seq 1 1000); do
    m=$(awk '/^SigCgt:/ { print $2 }' "/proc/$1/status" 2>/dev/null) || return 1
    [ -n "$m" ] && [ $(( 0x$m & 2 )) != 0 ] && return 0
    sleep 0.01
  done
  return 1
}
bash -c "exec '$BENCH' sweep '$SMOKE' ${RUN[*]} --batch 1,2,4 --csv '$T/sig.csv'" >/dev/null 2>&1 &
pid=$!
handler_up $pid
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
[ "$rc" = 130 ] && ok || bad "SIGINT as soon as its handler is up: exit $rc, expected 130"

# ... and a run stopped before it finished a set leaves the previous run's CSV and JSON as
# they were (the two describe the same sets)
B run "$SMOKE" "${RUN[@]}" --csv "$T/prev.csv" >/dev/null 2>&1
cp "$T/prev.csv" "$T/prev_keep.csv" && cp "$T/prev.json" "$T/prev_keep.json"
bash -c "exec '$BENCH' run '$SMOKE' ${RUN[*]} --csv '$T/prev.csv'" >/dev/null 2>&1 &
pid=$!
handler_up $pid
kill -INT $pid 2>/dev/null
wait $pid
cmp -s "$T/prev.csv" "$T/prev_keep.csv" && cmp -s "$T/prev.json" "$T/prev_keep.json" && ok ||
  bad "a run interrupted before its first set changed the previous run's CSV or JSON"

# ---- runs at once on one choices file: none loses its choices ------------------------------
for th in 1 2; do
  for cfg in "$SMOKE" "$SRC/tests/data/doc_examples.yaml"; do
    "$BENCH" run "$cfg" "${QUICK[@]}" --processes 0 --threads $th --algo-cache "$T/shared.tsv" >/dev/null 2>&1 &
  done
done
wait
# each run's choices: the two configs' convolutions under both thread counts' contexts
contexts=$(awk -F'\t' 'NR > 1 {print $1}' "$T/shared.tsv" | sort -u | wc -l)
for th in 1 2; do
  for cfg in "$SMOKE" "$SRC/tests/data/doc_examples.yaml"; do
    "$BENCH" run "$cfg" "${QUICK[@]}" --processes 0 --threads $th --algo-cache "$T/shared.tsv" --csv "$T/again.csv" >"$T/again.out" 2>&1
    grep -q "algorithm choices\? from" "$T/again.out" && ! grep -q "searched again" "$T/again.out" && ok ||
      bad "runs at once on one cache: $cfg at $th threads lost its choices ($contexts contexts): $(tail -2 "$T/again.out")"
  done
done

# ---- resource limits -----------------------------------------------------------------------
# (AddressSanitizer maps terabytes of shadow and grows the stack: under the sanitizers the
# -s, -v and -n limits test the sanitizer, not bench, and are skipped)
sanitized=false
ldd "$BENCH" 2>/dev/null | grep -q 'libasan\|libubsan' && sanitized=true
if $sanitized; then
  echo "skip: ulimit -s, -v and -n under the sanitizers (AddressSanitizer's shadow memory and stacks need more)"
else
  # a 64 KiB stack with a choices file in use
  mkdir -p "$T/cache1"
  alive bash -c "ulimit -s 64; XDG_CACHE_HOME='$T/cache1' exec timeout 120 '$BENCH' run '$SMOKE' ${QUICK[*]} --processes 0" && ok
  alive bash -c "ulimit -s 64; XDG_CACHE_HOME='$T/cache1' exec timeout 120 '$BENCH' run '$SMOKE' ${QUICK[*]} --processes 0" && ok
fi
# ulimit -f: the cache and the CSV cannot be written; said, and no worker dies of SIGXFSZ
mkdir -p "$T/cache2"
bash -c "ulimit -f 1; XDG_CACHE_HOME='$T/cache2' exec timeout 120 '$BENCH' run '$SMOKE' ${QUICK[*]} --processes 2 --csv '$T/f.csv'" >"$T/f.out" 2>&1
rc=$?
[ "$rc" = 1 ] && grep -q "File too large" "$T/f.out" && ! grep -q "signal 25\|rows failed" "$T/f.out" && ok ||
  bad "ulimit -f: exit $rc: $(tail -3 "$T/f.out")"
if ! $sanitized; then
  # ulimit -v under what OpenBLAS needs: refused at once (it would wait forever), as it
  # loads and, with more threads, as the backend starts
  expect 2 "address-space limit \(ulimit -v\) is [0-9]+ MiB, under the 384 MiB that OpenBLAS takes" -- bash -c "ulimit -v 300000; exec timeout 20 '$BENCH' check '$SMOKE'"
  expect 2 "address-space limit \(ulimit -v\) is [0-9]+ MiB, under the [0-9]+ MiB the cpu backend needs with 4 threads" -- bash -c "ulimit -v 600000; exec timeout 20 '$BENCH' check '$SMOKE' --threads 4"
  # ulimit -n: few descriptors
  alive bash -c "ulimit -n 16; exec timeout 120 '$BENCH' run '$SMOKE' ${QUICK[*]} --processes 1 --algo-cache none --csv '$T/n.csv'" && ok
fi

# ---- workers: one stopped is killed, with its pid named ------------------------------------
"$BENCH" run "$SMOKE" "${QUICK[@]}" --processes 1 --algo-cache none --min-samples 100000 --timeout 0.5 --csv "$T/stop.csv" >"$T/stop.out" 2>&1 &
pid=$!
for _ in $(seq 100); do w=$(pgrep -P $pid | head -1); [ -n "$w" ] && break; sleep 0.1; done
if [ -n "${w:-}" ]; then
  sleep 0.5 && kill -STOP "$w"
  # the guard's output away from ctest's pipe, and its sleep stopped with it: a sleep left
  # holding the pipe kept ctest waiting its 90 s after the test had finished
  ( sleep 90; kill -9 $pid 2>/dev/null ) >/dev/null 2>&1 & guard=$!
  wait $pid
  pkill -P $guard sleep 2>/dev/null; kill $guard 2>/dev/null
  grep -q "pid $w was stopped for" "$T/stop.out" && ok || bad "a stopped worker: $(tail -3 "$T/stop.out")"
else
  kill $pid 2>/dev/null; wait $pid; bad "no worker process seen to stop"
fi

# ---- config.json that lies, and costs without bound ----------------------------------------
HFQ=$SRC/configs/hf/Qwen2.5-0.5B/config.json
hf() { mkdir -p "$T/hf/$1" && python3 -c "import json, sys; d = json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(d, open(sys.argv[3], 'w'), indent=2)" "$HFQ" "$2" "$T/hf/$1/config.json"; }
hf act "d['hidden_act'] = 5" && expect 2 "config.json:[0-9]+:[0-9]+: hidden_act: expected a string" -- B list "$T/hf/act"
hf dt "d['torch_dtype'] = 16" && expect 2 "torch_dtype: expected a string" -- B list "$T/hf/dt"
hf rope "d['rope_scaling'] = {'rope_type': ['yarn']}" && expect 2 "rope_type: expected a string" -- B list "$T/hf/rope"
hf gptq "d['quantization_config'] = {'quant_method': 'gptq', 'bits': 4}" && expect 2 "quantization_config: quantized weights \(gptq\)" -- B list "$T/hf/gptq"
hf mt "d['model_type'] = 5" && expect 2 "model_type: expected a string" -- B list "$T/hf/mt"
hf wrap "d['num_attention_heads'] = 2**62; d['head_dim'] = 4" && expect 2 "num_attention_heads: [0-9]+ is larger than" -- B list "$T/hf/wrap"
hf l1000 "d['num_hidden_layers'] = 1000" && expect 0 "lm_head" -- B list "$T/hf/l1000"
hf esc "d['model_type'] = '\x1b]0;owned\x07qwen'" && expect 2 "'\\\\x1b\]0;owned\\\\x07qwen' is not built" -- B list "$T/hf/esc"
B list "$T/hf/esc" 2>&1 | grep -q $'\x1b' && bad "an escape sequence reached the terminal" || ok
mkdir -p "$T/hf/bom" && { printf '\xef\xbb\xbf'; cat "$HFQ"; } >"$T/hf/bom/config.json"
expect 0 "lm_head" -- B list "$T/hf/bom"
# an error in what is built names no position the config.json does not have
hf big "d['hidden_size'] = 2**31 - 1; d['num_attention_heads'] = 1; d['num_key_value_heads'] = 1"
expect 2 "config.json: the decoder built from it is refused: " -- B list "$T/hf/big"
# names times repeat: refused by their length, in milliseconds
python3 -c "print('name: m\ninput: [4]\nlayers:\n  - kind: block\n    name: ' + 'a' * 300000 + '\n    repeat: 100000\n    layers: [{kind: relu}]')" >"$T/long.yaml"
expect 2 "long.yaml:[0-9]+:[0-9]+: name: 300000 characters, more than the 256" -- timeout 5 "$BENCH" list "$T/long.yaml"
# the multi-head attention's scores: threads x S x S past int64
printf 'name: m\ninput: [134217728, 1]\nlayers:\n  - {kind: multihead_attention, name: a, embed_dim: 1, num_heads: 1}\n' >"$T/mha.yaml"
expect 1 "setup failed: out of memory" -- B run "$T/mha.yaml" --threads 1024 --processes 0 --algo-cache none --no-peaks "${QUICK[@]}"
# check: what the reference would take is said first, and --timeout bounds it
mkdir -p "$T/hf/long" && python3 -c "import json, sys; d = json.load(open(sys.argv[1])); d['max_position_embeddings'] = 2000000; json.dump(d, open(sys.argv[2], 'w'))" "$SRC/tests/data/hf/tiny-llama/config.json" "$T/hf/long/config.json"
timeout 120 "$BENCH" check "$T/hf/long" --tokens 200000 --timeout 2 >"$T/long.out" 2>&1
rc=$?
[ "$rc" = 0 ] && grep -q "takes about .* at the 1 GFLOP/s" "$T/long.out" && grep -q "not checked: its reference would take" "$T/long.out" &&
  ok || bad "check --timeout: exit $rc: $(head -3 "$T/long.out")"

# ---- safetensors that lie -------------------------------------------------------------------
ST() { python3 "$SRC/tests/make_safetensors.py" "$SRC/tests/data/hf/$1/config.json" "$T/st/$2" "${@:3}"; }
ST tiny-llama overlap --overlap && expect 2 "overlaps that of" -- B list "$T/st/overlap" --tokens 8
mkdir -p "$T/st/dangle" && cp "$SRC/tests/data/hf/tiny-llama/config.json" "$T/st/dangle/" && ln -s nowhere "$T/st/dangle/model.safetensors"
expect 2 "model.safetensors: a symbolic link to a file that is not there" -- B list "$T/st/dangle" --tokens 8
mkdir -p "$T/st/loop" && cp "$SRC/tests/data/hf/tiny-llama/config.json" "$T/st/loop/" && ln -s model.safetensors "$T/st/loop/model.safetensors"
expect 2 "a loop of symbolic links" -- B list "$T/st/loop" --tokens 8
mkdir -p "$T/st/fifo" && cp "$SRC/tests/data/hf/tiny-llama/config.json" "$T/st/fifo/" && mkfifo "$T/st/fifo/model.safetensors"
expect 2 "model.safetensors: a FIFO" -- timeout 5 "$BENCH" list "$T/st/fifo" --tokens 8
ST tiny-llama wrong --shards 2 --misplace model.norm.weight &&
  expect 2 "index.json: names 'model.norm.weight' in model-00001-of-00002.safetensors, whose header does not hold it \(it is in model-00002" -- B list "$T/st/wrong" --tokens 8

# ---- the environment ------------------------------------------------------------------------
expect 2 "LAYERBENCH_CPU_CONV_ALGO='wino': expected" -- env LAYERBENCH_CPU_CONV_ALGO=wino timeout 20 "$BENCH" run "$SMOKE" "${RUN[@]}"
expect 2 "LAYERBENCH_CPU_CONV_ALGO='winograd:5x': expected" -- env LAYERBENCH_CPU_CONV_ALGO=winograd:5x timeout 20 "$BENCH" check "$SMOKE"
expect 2 "LAYERBENCH_CPU_ATTN_BWD='flash': expected plain or blocks" -- env LAYERBENCH_CPU_ATTN_BWD=flash timeout 20 "$BENCH" check "$SMOKE"
expect 2 "LAYERBENCH_CPU_GEMM_ISA='avx9': expected avx512, avx2 or generic" -- env LAYERBENCH_CPU_GEMM_ISA=avx9 timeout 20 "$BENCH" check "$SMOKE"
expect 0 "OMP_WAIT_POLICY='spin' is neither ACTIVE nor PASSIVE" -- env OMP_WAIT_POLICY=spin timeout 60 "$BENCH" run "$SMOKE" "${RUN[@]}"

# ---- compare's inputs, and the command line -----------------------------------------------
H='model,backend,mode,batch,layer_index,layer_name,kind,part,impl,status,median_us,ci_low_us,ci_high_us,noise_pct'
{ echo "$H"; echo "m,cpu,warm,1,0,a,relu,,x,ok,10,9.9,10.1,1"; printf 'm,cpu,warm,1,1,"b\x1b[2J\nx",relu,,x,ok,10,9.9,10.1,1\n'; echo "m,cpu,warm,1,2,c,relu,,x,ok,10,9.9,10.1,1"; } >"$T/c1.csv"
{ echo "$H"; echo "m,cpu,warm,1,0,a,relu,,x,ok,1e300,1e299,1e301,1"; printf 'm,cpu,warm,1,1,"b\x1b[2J\nx",relu,,x,ok,10,9.9,10.1,1\n'; echo "m,cpu,warm,1,2,c,relu,,x,ok,10,9.9,10.1,1"; } >"$T/c2.csv"
B compare "$T/c1.csv" "$T/c2.csv" >"$T/cmp.out" 2>&1
grep -q $'\x1b' "$T/cmp.out" && bad "compare: an escape sequence reached the terminal" || ok
grep -q 'b\\x1b\[2J\\x0ax' "$T/cmp.out" && ok || bad "compare: a name's control characters not shown: $(cat "$T/cmp.out")"
grep -q "INVALID" "$T/cmp.out" && ! grep -qi "nan" "$T/cmp.out" && ok || bad "compare: 1e300: $(cat "$T/cmp.out")"
expect 2 "each once" -- B sweep "$SMOKE" "${RUN[@]}" --batch 1,1
expect 2 "option '--t' is ambiguous: it could be .*--threads, " -- B run "$SMOKE" --t 1
printf 'name: m\ninput: [4]\nlayers:\n  - {kind: relu, name: a}\n  - {kind: relu, name: b, input: "a\\0garbage"}\n' >"$T/nul.yaml"
expect 2 "nul.yaml:5:[0-9]+: a NUL character" -- B list "$T/nul.yaml"

# ---- the exporter: names it cannot write are refused, never written raw --------------------
if /usr/bin/python3 -c "import torch, torchvision" 2>/dev/null; then
  mkdir -p "$T/mods" && cat >"$T/mods/hostile.py" <<'EOF'
import torch.nn as nn


def commas():
    s = nn.Sequential()
    s.add_module("c, stride: 2", nn.Linear(4, 4))
    return s


def fine():
    return nn.Sequential(nn.Linear(4, 4))
EOF
  X() { PYTHONPATH="$T" timeout 120 /usr/bin/python3 "$SRC/scripts/torch_export.py" "$@" >"$T/x.out" 2>&1; }
  X mods.hostile:commas --input 4 -o "$T/h.yaml"
  [ $? = 1 ] && grep -q "not names bench takes" "$T/x.out" && grep -q "'c, stride: 2'" "$T/x.out" && [ ! -e "$T/h.yaml" ] &&
    ok || bad "the exporter and a name it cannot write: $(cat "$T/x.out")"
  for c in "-o $T/no/such/x.yaml:its folder does not exist" "-o $T:it is a directory" "--table $T/no/t.txt:its folder does not exist"; do
    X mods.hostile:fine --input 4 ${c%%:*}
    [ $? = 1 ] && grep -q "${c#*:}" "$T/x.out" && ! grep -q Traceback "$T/x.out" && ok || bad "the exporter, ${c%%:*}: $(tail -2 "$T/x.out")"
  done
else
  echo "skip: the exporter's cases need python3 with torch and torchvision (apt-get install python3-torch python3-torchvision)"
fi

echo "test_hostile: $pass passed, $fail failed"
[ "$fail" = 0 ]
