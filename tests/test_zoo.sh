#!/usr/bin/env bash
# Every shipped config end to end on the CPU: bench check (every layer, and the chained
# forward's output, against the plain-C reference) and a quick bench run at batch 1 (and
# 8 for the smaller ones): every row timed or a view, the chained forward timed. Their
# layer tables are checked against torch's in tests/test_config.c.
# usage: test_zoo.sh BENCH SOURCE_DIR [most|few: the configs whose chained forward bench
# check checks, common.sh's check_opts]
set -u
BENCH=$1
SRC=$2
FORWARD=${3:-most}
. "$SRC/tests/common.sh"
for cfg in "$SRC"/configs/*.yaml; do
  name=$(basename "$cfg" .yaml)
  out=$("$BENCH" check "$cfg" $(check_opts "$cfg") 2>&1) && grep -q " 0 failed" <<<"$out" && ok ||
    bad "check $name: $(tail -3 <<<"$out")"
  batches="1"
  case "$name" in vgg16 | resnet50 | densenet121 | vit_b_16 | bert_base | convnext_tiny | swin_t) ;; *) batches="1 8" ;; esac
  for b in $batches; do
    "$BENCH" run "$cfg" --batch "$b" "${QUICK[@]}" --csv "$T/$name.csv" >"$T/$name.out" 2>&1 || {
      bad "run $name batch $b: $(tail -3 "$T/$name.out")"
      continue
    }
    why=$(awk -F, "$COLS"' $c["status"]!="ok" && $c["status"]!="view" && !bad {bad=$c["layer_name"] " " $c["status"] ": " $c["note"]} $c["kind"]=="model" && $c["mode"]=="chained" && $c["median_us"] > 0 {chained=1} END {print bad ? bad : chained ? "" : "no chained forward"}' "$T/$name.csv")
    [ -z "$why" ] && ok || bad "run $name batch $b: a row was not timed, or no chained forward: $why ($(tail -2 "$T/$name.out" | tr '\n' ' '))"
  done
done
echo "test_zoo: $pass passed, $fail failed"
[ $fail = 0 ]
