#!/usr/bin/env bash
# Results files and interruptions: what --csv may and may not replace, paths refused
# before any measuring, write errors, an interrupted sweep that keeps its finished
# batches and resumes, and hostile configs that must fail fast with file:line.
# usage: test_outputs.sh BENCH SOURCE_DIR
set -u
BENCH=$1
SRC=$2
. "$SRC/tests/common.sh"
SMOKE=$SRC/configs/smoke.yaml

# --- paths refused at once (exit 2, nothing measured: well under a second) -------------
cp "$SMOKE" "$T/conf.yaml"
cp "$SMOKE" "$T/keep.yaml"
expect 2 "cannot write '$T/conf.yaml': it is the config being read" -- "$BENCH" list "$T/conf.yaml" --csv "$T/conf.yaml"
cmp -s "$T/conf.yaml" "$T/keep.yaml" && ok || bad "list --csv CONFIG changed the config"
expect 2 "it is the config being read" -- "$BENCH" run "$T/conf.yaml" "${FAST[@]}" --csv "$T/conf.yaml"
cp "$SMOKE" "$T/c2.json"
expect 2 "JSON context beside --csv: cannot write '$T/c2.json': it is the config being read" -- \
  "$BENCH" run "$T/c2.json" "${FAST[@]}" --csv "$T/c2.csv"
[ ! -e "$T/c2.csv" ] && ok || bad "a refused JSON path still left a CSV"
expect 2 "cannot write '$T': it is a directory" -- timeout 5 "$BENCH" run "$SMOKE" "${FAST[@]}" --csv "$T"
expect 2 "cannot write '': the path is empty" -- timeout 5 "$BENCH" sweep "$SMOKE" "${FAST[@]}" --csv ""
expect 2 "its folder '$T/no/such' does not exist" -- timeout 5 "$BENCH" run "$SMOKE" "${FAST[@]}" --csv "$T/no/such/x.csv"
expect 2 "--resume needs --csv FILE" -- "$BENCH" sweep "$SMOKE" "${FAST[@]}" --resume
if [ "$(id -u)" != 0 ]; then
  echo "keep" >"$T/ro.csv"; chmod 444 "$T/ro.csv"
  expect 2 "cannot write '$T/ro.csv': Permission denied" -- "$BENCH" list "$SMOKE" --csv "$T/ro.csv"
  [ "$(cat "$T/ro.csv")" = keep ] && ok || bad "a read-only file was replaced"
else
  echo "skip: the read-only --csv case needs a user other than root (root may write any file)"
fi

# --- what is written where ----------------------------------------------------------------
# a device stays a device (as root, a rename would have turned it into a file), no JSON beside it
"$BENCH" run "$SMOKE" "${FAST[@]}" --csv /dev/null >/dev/null 2>&1 && [ -c /dev/null ] && [ ! -e /dev/null.json ] && ok ||
  bad "--csv /dev/null: $(ls -la /dev/null /dev/null.json 2>&1)"
# through a symbolic link: the file it names is replaced, the link stays
echo old >"$T/real.csv"; ln -s real.csv "$T/link.csv"
"$BENCH" list "$SMOKE" --csv "$T/link.csv" >/dev/null 2>&1
[ -L "$T/link.csv" ] && head -1 "$T/real.csv" | grep -q '^model,batch' && ok || bad "--csv through a symlink: $(ls -la "$T")"
# into a FIFO: written in place, read by the other end
mkfifo "$T/pipe.csv"
cat "$T/pipe.csv" >"$T/from_pipe.csv" & reader=$!
timeout 20 "$BENCH" list "$SMOKE" --csv "$T/pipe.csv" >/dev/null 2>&1; wait $reader
[ -p "$T/pipe.csv" ] && [ "$(wc -l <"$T/from_pipe.csv")" = 19 ] && ok || bad "--csv FIFO: $(wc -l <"$T/from_pipe.csv") lines"
# an existing file's permissions are kept
echo old >"$T/mode.csv"; chmod 640 "$T/mode.csv"
"$BENCH" list "$SMOKE" --csv "$T/mode.csv" >/dev/null 2>&1
[ "$(stat -c %a "$T/mode.csv")" = 640 ] && ok || bad "permissions of the replaced file: $(stat -c %a "$T/mode.csv")"
# a temporary file a killed run left behind is removed by the next run
touch "$T/stale.csv.tmp.999999999"
"$BENCH" list "$SMOKE" --csv "$T/stale.csv" >/dev/null 2>&1
[ ! -e "$T/stale.csv.tmp.999999999" ] && ok || bad "a dead run's temporary file is still there"

# --- write errors ---------------------------------------------------------------------------
expect 1 "writing to standard output failed" -- bash -c "'$BENCH' list '$SMOKE' >/dev/full"
expect 1 "writing to standard output failed" -- bash -c "'$BENCH' --help >/dev/full"

# --- an interrupted sweep keeps its finished batches and resumes ----------------------------
SLOW=(--warmup-time 0.01 --min-time 0.02 --max-noise 0.1 --timeout 0.2 --no-progress)
"$BENCH" sweep "$SMOKE" "${SLOW[@]}" --batch 1,2,3,4 --csv "$T/sw.csv" >"$T/sw.out" 2>&1 & pid=$!
for _ in $(seq 1 300); do [ -f "$T/sw.csv" ] && break; sleep 0.1; done
kill -INT $pid; wait $pid; rc=$?
[ $rc = 130 ] && ok || bad "interrupted sweep: exit $rc, expected 130: $(tail -2 "$T/sw.out")"
[ "$(head -1 "$T/sw.csv")" = "$("$BENCH" schema | awk '{print $1}' | paste -sd, -)" ] && ok || bad "interrupted CSV header"
batches=$(awk -F, "$COLS"' {print $c["batch"]}' "$T/sw.csv" | sort -u | paste -sd' ')
[ "${batches%% *}" = 1 ] && ok || bad "the interrupted CSV does not hold batch 1: '$batches'"
awk -F, "$COLS"' {n[$c["batch"]]++} END {for (b in n) if (n[b] != 37) exit 1}' "$T/sw.csv" && ok ||
  bad "the interrupted CSV holds an incomplete batch"
grep -q '"state": "interrupted"' "$T/sw.json" && grep -q '"interrupted": "batch' "$T/sw.json" && ok ||
  bad "the JSON context does not say where the sweep was interrupted: $(grep -E 'state|interrupted' "$T/sw.json")"
ls "$T" | grep -q 'sw.csv.tmp' && bad "an interrupted sweep left a temporary file" || ok
"$BENCH" sweep "$SMOKE" "${FAST[@]}" --batch 1,2,3,4 --csv "$T/sw.csv" --resume >"$T/resume.out" 2>&1; rc=$?
[ $rc = 0 ] && ok || bad "--resume: exit $rc: $(tail -3 "$T/resume.out")"
grep -q "batch 1 on cpu: kept from the previous run" "$T/resume.out" && ok || bad "--resume measured batch 1 again"
[ "$(awk -F, "$COLS"' {print $c["batch"]}' "$T/sw.csv" | sort | uniq -c | awk '{print $1}' | sort -u)" = 37 ] &&
  [ "$(awk -F, "$COLS"' {print $c["batch"]}' "$T/sw.csv" | sort -u | wc -l)" = 4 ] && ok ||
  bad "after --resume: $(awk -F, "$COLS"' {print $c["batch"]}' "$T/sw.csv" | sort | uniq -c | tr '\n' ' ')"
grep -q '"state": "complete"' "$T/sw.json" && grep -q '"resumed_sets": 1' "$T/sw.json" && ok || bad "resumed JSON state"
printf 'a,b\n1,2\n' >"$T/other.csv"
expect 2 "not a layerbench CSV" -- "$BENCH" sweep "$SMOKE" "${FAST[@]}" --csv "$T/other.csv" --resume
"$BENCH" list "$SRC/configs/resnet18.yaml" >/dev/null
expect 2 "holds model 'smoke', not 'resnet18'" -- "$BENCH" sweep "$SRC/configs/resnet18.yaml" "${FAST[@]}" --csv "$T/sw.csv" --resume
# killed outright (SIGKILL): the file on disk is the last checkpoint, complete
"$BENCH" sweep "$SMOKE" "${SLOW[@]}" --batch 1,2,3,4 --csv "$T/k.csv" >/dev/null 2>&1 & pid=$!
for _ in $(seq 1 300); do [ -f "$T/k.csv" ] && break; sleep 0.1; done
kill -KILL $pid; wait $pid 2>/dev/null
awk -F, "$COLS"' {n[$c["batch"]]++} END {for (b in n) if (n[b] != 37) exit 1; exit NR < 38}' "$T/k.csv" && ok ||
  bad "after SIGKILL the CSV is not the last complete checkpoint"

# --- hostile configs fail fast with file:line:col -----------------------------------------
printf 'name: t\ninput: [16777216, 1048576, 1048576]\nlayers: [{kind: maxpool2d, kernel_size: 2}]\n' >"$T/wrap.yaml"
for cmd in list run check; do # (the timing options go with run only)
  opts=(); [ $cmd = run ] && opts=("${FAST[@]}")
  expect 2 "wrap.yaml:2:8: input: more than 2\^40 elements" -- timeout 10 "$BENCH" $cmd "$T/wrap.yaml" "${opts[@]}"
done
printf 'name: t\ninput: [2147483647, 1, 1]\nlayers:\n  - {kind: conv2d, out_channels: 4, kernel_size: 2147483647, padding: 1073741823}\n' >"$T/k.yaml"
expect 2 "k.yaml:4:5: .*beyond 2\^62" -- timeout 10 "$BENCH" check "$T/k.yaml"
printf 'name: t\ninput: [1, 1, 1]\nlayers:\n  - kind: block\n    repeat: 1000\n    layers: [{kind: adaptive_avgpool2d, output_size: [2147483647, 512]}]\n' >"$T/ad.yaml"
start=$(date +%s%N)
timeout 10 "$BENCH" list "$T/ad.yaml" >/dev/null 2>&1
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ $ms -lt 3000 ] && ok || bad "a tiny config with huge adaptive outputs took $ms ms to list"
printf 'name: "=cmd|calc"\ninput: [3]\nlayers: [{kind: relu}]\n' >"$T/f.yaml"
expect 2 "f.yaml:1:7: name: use at most" -- "$BENCH" list "$T/f.yaml"
mkfifo "$T/fifo.yaml"
expect 2 "fifo.yaml': a FIFO, not a regular file" -- timeout 5 "$BENCH" list "$T/fifo.yaml"
expect 2 "^bench: --batch 2147483647: batch 2147483647 makes" -- "$BENCH" list "$SRC/configs/resnet18.yaml" --batch 2147483647

# --resume reads its CSV back: a stream (stdout, a FIFO) is refused by what it is
expect 2 "'-' is a stream" -- "$BENCH" run "$SMOKE" "${FAST[@]}" --csv - --resume

echo "test_outputs: $pass passed, $fail failed"
[ $fail = 0 ]
