#!/usr/bin/env bash
# Numbers that hold between runs, end to end: the worker processes (pooled rows, a
# killed worker's row fails and the run goes on), --algo-cache (a round trip; a foreign,
# malformed or stale cache is not trusted and is said), and bench compare on hand-made
# CSVs (impl changes, contended rows, the canary's drift, invalid medians, duplicate
# rows, a byte-order mark). usage: test_processes.sh BENCH SOURCE_DIR
set -u
BENCH=$1
SRC=$2
. "$SRC/tests/common.sh"

# --- the worker processes. With --phase-band off every worker is pooled: the timed rows
# pool 1 to 3 processes, some 2 or more (fewer only where a process was left out of a
# row: another auto mode, or contended, which the suite's tests running side by side can
# make), and the JSON says how they spread and how many rounds timed the canary (none
# where every timing of it was disturbed)
pooled() {
  awk -F, "$COLS"' $c["status"]=="ok" && $c["mode"]!="inmodel" {several += $c["processes"]>=2; bad += $c["processes"]<1 || $c["processes"]>3}
    END {exit bad > 0 || several == 0}' "$1"
}
expect 0 "" -- "$BENCH" run "$SMOKE" "${FAST[@]}" --phase-band off --csv "$T/p.csv"
if ! pooled "$T/p.csv"; then
  echo "test_processes: no row pooled 2 or more processes (every row contended?); measured again"
  "$BENCH" run "$SMOKE" "${FAST[@]}" --phase-band off --csv "$T/p.csv" >/dev/null 2>&1
fi
pooled "$T/p.csv" && ok || bad "the timed rows do not pool 1 to 3 processes, some 2 or more"
grep -qE '"measurement": \[\{"mode": "auto", "processes": 3, "process_spread_pct"' "$T/p.json" && grep -q '"canary_rounds": [0-9]' "$T/p.json" \
  && grep -q '"processes_set_aside": 0,' "$T/p.json" && grep -q '"phase_band_pct": null,' "$T/p.json" \
  && ok || bad "--phase-band off: the JSON lacks 3 processes, none set aside, or the canary: $(grep -o '"measurement".\{0,300\}' "$T/p.json")"
# the default band (5%): a worker set aside ran more than 5% slower in all, and the
# workers pooled and set aside are at most twice --processes (whether any is set aside
# is the machine's doing)
expect 0 "" -- "$BENCH" run "$SMOKE" "${FAST[@]}" --csv "$T/pb.csv"
sed -n 's/.*"measurement": \[{"mode": "auto", "processes": \([0-9]*\),.*"processes_set_aside": \([0-9]*\), "set_aside_slower_pct": \([0-9.]*\),.*/\1 \2 \3/p' "$T/pb.json" \
  | awk '{ok = $1 >= 1 && $1 <= 3 && $1 + $2 <= 6 && ($2 == 0 ? $3 == 0 : $3 > 5)} END {exit !(NR == 1 && ok)}' \
  && grep -q '"phase_band_pct": 5,' "$T/pb.json" \
  && ok || bad "the default band: $(grep -o '"measurement".\{0,300\}' "$T/pb.json")"
expect 2 "--phase-band expects" -- "$BENCH" run "$SMOKE" --phase-band fast
expect 0 "" -- "$BENCH" run "$SMOKE" "${FAST[@]}" --processes 0 --csv "$T/p0.csv"
awk -F, "$COLS"' $c["status"]=="ok" && $c["processes"]!=0 {bad++} END {exit bad>0}' "$T/p0.csv" && ok || bad "--processes 0 pooled"
expect 2 "--processes expects" -- "$BENCH" run "$SMOKE" --processes 65
# a worker's command line by hand: its set comes only through a parent's pipe
expect 2 "descriptors 3 and 4 are not pipes from a bench process" -- "$BENCH" --worker 3,1,3
expect 2 "what descriptor 4 held is not a set" -- bash -c '"$0" --worker 3,1,3 3> >(cat >/dev/null) 4< <(printf "not a set")' "$BENCH"

# a worker killed mid-run: the row it was on fails with the reason, the rest is measured
"$BENCH" run "$R18" --min-time 0.05 --timeout 1 --no-progress --no-peaks --csv "$T/k.csv" >/dev/null 2>"$T/k.err" &
pid=$!
# (its own first worker: the suite runs other tests' workers beside it)
for _ in $(seq 100); do w=$(pgrep -P "$pid" -f -- '--worker 3,1,3' | head -1); [ -n "$w" ] && break; sleep 0.1; done
sleep 2
[ -n "$w" ] && kill -KILL "$w"
wait $pid; rc=$?
[ "$rc" = 1 ] && ok || bad "a run whose worker was killed exited $rc, expected 1: $(tail -3 "$T/k.err")"
grep -q "worker process 1 of 3 .* ended (signal 9" "$T/k.err" && ok || bad "the killed worker was not said: $(tail -3 "$T/k.err")"
# (the killed row is a layer, or the chained forward, whose in-model rows then go with it:
# every other layer's row is timed either way, 68 of ResNet-18's 69 but the view)
awk -F, "$COLS"' $c["status"]=="failed" && $0 ~ /ended \(signal 9/ {f++} $c["status"]=="ok" && $c["mode"]!="inmodel" {o++}
  END {exit !(f == 1 && o >= 67)}' "$T/k.csv" \
  && ok || bad "not one failed row and the rest timed: $(grep -c ',failed,' "$T/k.csv") failed, $(grep -c ',ok,' "$T/k.csv") ok"

# --- the choices are kept by default ($XDG_CACHE_HOME/layerbench/choices.tsv; common.sh
# points it at the scratch folder); --algo-cache none keeps none
expect 0 "" -- "$BENCH" run "$R18" "${QUICK[@]}" --processes 0 --batch 2
[ "$(grep -c $'\t' "$XDG_CACHE_HOME/layerbench/choices.tsv" 2>/dev/null)" -ge 10 ] && ok || bad "no default choices file"
expect 0 "algorithm choices from .*choices.tsv" -- "$BENCH" run "$R18" "${QUICK[@]}" --processes 0 --batch 2
rm -rf "$XDG_CACHE_HOME"
expect 0 "" -- "$BENCH" run "$R18" "${QUICK[@]}" --processes 0 --batch 2 --algo-cache none --csv "$T/none.csv"
[ ! -e "$XDG_CACHE_HOME" ] && grep -q '"algo_cache": null' "$T/none.json" && ok || bad "--algo-cache none kept choices"

# --- --algo-cache: made, then taken; the same kernels run
C=$T/choices.tsv
expect 0 "" -- "$BENCH" run "$R18" "${QUICK[@]}" --processes 1 --algo-cache "$C" --csv "$T/a1.csv"
[ "$(grep -c $'\t' "$C")" -ge 10 ] && head -1 "$C" | grep -q "layerbench algorithm choices" && ok || bad "no choices saved: $(head -3 "$C")"
expect 0 "" -- "$BENCH" run "$R18" "${QUICK[@]}" --processes 0 --algo-cache "$C" --csv "$T/a2.csv"
grep -qE '"algo_cache": \{"path": ".*", "taken": [1-9][0-9]*, "other_context": 0, "malformed": 0\}' "$T/a2.json" \
  && ok || bad "the second run took no choice: $(grep -o '"algo_cache".\{0,120\}' "$T/a2.json")"
impls() { awk -F, "$COLS"' $c["kind"]=="conv2d" && $c["mode"]!="inmodel" {print $c["layer_name"], $c["impl"]}' "$1"; }
[ "$(impls "$T/a1.csv")" = "$(impls "$T/a2.csv")" ] && ok || bad "the cached choices ran other kernels"
# a cache made under another context (another machine): not used, said
sed $'2,$s/^cpu | /cpu | another machine, /' "$C" >"$T/foreign.tsv"
expect 0 "made under another context .* not used" -- "$BENCH" run "$SMOKE" "${QUICK[@]}" --processes 0 --algo-cache "$T/foreign.tsv"
grep -q "another machine" "$T/foreign.tsv" && ok || bad "the other context's lines were not kept"
# --algo-for: what the choices were timed for is part of their context: those made for
# the forward (the default) are not taken by --algo-for alone, and each impl says which
expect 0 "made under another context .* not used" -- \
  "$BENCH" run "$R18" "${QUICK[@]}" --processes 0 --algo-for alone --algo-cache "$C" --csv "$T/alone.csv"
impls "$T/alone.csv" | grep -q "(fastest of [0-9]* timed warm alone)" && ! impls "$T/alone.csv" | grep -q "forward's" &&
  impls "$T/a1.csv" | grep -q "(fastest of [0-9]* in the forward's conditions)" && grep -q '"algo_for": "alone"' "$T/alone.json" &&
  ok || bad "--algo-for: $(impls "$T/alone.csv" | head -2)"
# bf16's choices (our kernel or fp32 copies) under keys of their own: an fp32 run keeps
# them, and the next bf16 run takes them, none stale
B16=$T/bf16.tsv
expect 0 "" -- "$BENCH" run "$SMOKE" "${QUICK[@]}" --processes 0 --dtype bf16 --algo-cache "$B16"
n16=$(grep -c "dtype=bf16" "$B16")
expect 0 "" -- "$BENCH" run "$SMOKE" "${QUICK[@]}" --processes 0 --algo-cache "$B16"
"$BENCH" run "$SMOKE" "${QUICK[@]}" --processes 0 --dtype bf16 --algo-cache "$B16" >"$T/b16.out" 2>&1
[ "$n16" -ge 1 ] && [ "$(grep -c "dtype=bf16" "$B16")" = "$n16" ] && ! grep -q "no longer applied" "$T/b16.out" &&
  [ "$(cut -f2 "$B16" | sort | uniq -d | wc -l)" = 0 ] && ok ||
  bad "bf16 choices: $n16 saved, $(grep -c "dtype=bf16" "$B16") after fp32 and bf16 runs; $(grep "choices" "$T/b16.out")"
# a stale choice (its candidate count no longer matches): searched again, said
awk -F'\t' -v OFS='\t' 'NR > 1 {split($3, v, " "); $3 = v[1] " " v[2] " " v[3] + 7} {print}' "$C" >"$T/stale.tsv"
expect 0 "no longer applied" -- "$BENCH" run "$R18" "${QUICK[@]}" --processes 0 --algo-cache "$T/stale.tsv"
printf '%s\nnot a choice\n' "$(head -1 "$C")" >"$T/bad.tsv"
expect 0 "line that is no choice was ignored|lines that are no choice were ignored" -- "$BENCH" run "$SMOKE" "${QUICK[@]}" --processes 0 --algo-cache "$T/bad.tsv"
# a broken default file: said, and left alone; a broken file given: an error
mkdir -p "$XDG_CACHE_HOME/layerbench" && echo garbage >"$XDG_CACHE_HOME/layerbench/choices.tsv"
expect 0 "is not a layerbench choices file .*not used" -- "$BENCH" run "$SMOKE" "${QUICK[@]}" --processes 0
[ "$(cat "$XDG_CACHE_HOME/layerbench/choices.tsv")" = garbage ] && ok || bad "the broken default file was overwritten"
rm -rf "$XDG_CACHE_HOME"
echo "model,backend" >"$T/other.tsv"
expect 2 "is not a layerbench choices file" -- "$BENCH" run "$SMOKE" "${QUICK[@]}" --algo-cache "$T/other.tsv"

# --- compare on hand-made CSVs
H='model,backend,mode,batch,layer_index,layer_name,kind,part,impl,status,median_us,ci_low_us,ci_high_us,noise_pct,contended,process_spread_pct,canary_us'
row() { echo "m,cpu,warm,1,$1,$2,conv2d,,${3:-algo A},ok,$4,$(awk -v m="$4" 'BEGIN {print m * 0.99 "," m * 1.01}'),0.5,${5:-false},1.0,${6:-80}"; }
{ echo "$H"; row 0 a "" 100; row 1 b "" 100; row 2 c "" 100; row 3 d "" 100; } >"$T/base.csv"
{ echo "$H"; row 0 a "algo B" 150; row 1 b "" 150 true; row 2 c "" 300; row 3 d "" 100; } >"$T/new.csv"
expect 1 "a .*IMPL CHANGED  algo A -> algo B" -- "$BENCH" compare "$T/base.csv" "$T/new.csv"
expect 1 "b .*CONTENDED" -- "$BENCH" compare "$T/base.csv" "$T/new.csv"
expect 1 "1 SLOWER, 0 FASTER, 1 SAME .*1 IMPL CHANGED .*1 CONTENDED" -- "$BENCH" compare "$T/base.csv" "$T/new.csv"
# drift: NEW's canary 10% slower, its layers 8% slower: said, and not SLOWER, where the
# canaries time the same thing (one build, said by the JSON context beside each CSV)
{ echo "$H"; row 0 a "" 108 false 90; row 1 b "" 108 false 90; row 2 c "" 108 false 90; row 3 d "" 108 false 90; } >"$T/drift.csv"
{ echo "$H"; row 0 a "" 100 false 90; row 1 b "" 100 false 90; row 2 c "" 100 false 90; row 3 d "" 100 false 90; } >"$T/flat.csv"
build() { printf '{"layerbench_version": "0.1.0", "git_revision": "%s", "build_type": "Release", "compiler": "gcc"}\n' "$1"; }
for f in base drift flat; do build abc >"$T/$f.json"; done
expect 0 "The machine ran .* slower in .*drift.csv.*0 SLOWER" -- bash -c "'$BENCH' compare '$T/base.csv' '$T/drift.csv' | tr '\n' ' '"
expect 1 "4 SLOWER" -- "$BENCH" compare "$T/flat.csv" "$T/drift.csv" --threshold 2
# ... never across builds: no correction, said, and the slowdown is SLOWER
build def >"$T/drift.json"
expect 1 "No drift correction: the runs were made by different builds.*4 SLOWER" -- bash -c "set -o pipefail; '$BENCH' compare '$T/base.csv' '$T/drift.csv' | tr '\n' ' '"
rm "$T/drift.json"
expect 1 "No drift correction: a CSV has no JSON context.*4 SLOWER" -- bash -c "set -o pipefail; '$BENCH' compare '$T/base.csv' '$T/drift.csv' | tr '\n' ' '"
build abc >"$T/drift.json"
# ... and only on its own side: a machine 10% faster in NEW hides no slowdown (layers 8%
# slower stay SLOWER), and a speed-up of the same size as the drift is not called FASTER
{ echo "$H"; row 0 a "" 108 false 72; row 1 b "" 108 false 72; row 2 c "" 92 false 72; row 3 d "" 92 false 72; } >"$T/fastm.csv"
build abc >"$T/fastm.json"
expect 1 "The machine ran .* faster in .*fastm.csv.*2 SLOWER, 0 FASTER, 2 SAME" -- bash -c "set -o pipefail; '$BENCH' compare '$T/base.csv' '$T/fastm.csv' | tr '\n' ' '"
# ... and never across thread counts (the canary joins a thread pool)
Ht="$H,threads"
sed "1s/.*/$Ht/; 2,\$s/\$/,2/" "$T/base.csv" >"$T/t2.csv"
sed "1s/.*/$Ht/; 2,\$s/\$/,1/" "$T/drift.csv" >"$T/t1.csv"
for f in t1 t2; do build abc >"$T/$f.json"; done
expect 1 "No drift correction: the runs used other thread counts.*4 SLOWER" -- bash -c "set -o pipefail; '$BENCH' compare '$T/t2.csv' '$T/t1.csv' | tr '\n' ' '"
# invalid medians: no verdict, called invalid
for bad_median in 0 -5 nan inf 1e400 12abc; do
  { echo "$H"; row 0 a "" 100; echo "m,cpu,warm,1,1,b,conv2d,,algo A,ok,$bad_median,,,0.5,false,1.0,80"; } >"$T/inv.csv"
  expect 0 "b .*INVALID  invalid median in new" -- "$BENCH" compare "$T/base.csv" "$T/inv.csv"
done
# a duplicated row: an error naming its line
{ echo "$H"; row 0 a "" 100; row 1 b "" 100; row 1 b "" 100; } >"$T/dup.csv"
expect 2 "dup.csv:4: the same row as line 3" -- "$BENCH" compare "$T/base.csv" "$T/dup.csv"
# a byte-order mark, as spreadsheets save CSV: read as if it were not there
printf '\xEF\xBB\xBF' | cat - "$T/base.csv" >"$T/bom.csv"
expect 0 "4 rows compared: 0 SLOWER, 0 FASTER, 4 SAME" -- "$BENCH" compare "$T/bom.csv" "$T/base.csv"

echo "test_processes: $pass passed, $fail failed"
[ "$fail" = 0 ]
