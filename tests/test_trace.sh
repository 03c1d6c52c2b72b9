#!/usr/bin/env bash
# --trace and --stacks: the trace loads as JSON, has one span per layer and per block,
# nests, and its forward adds up exactly; the folded stacks add up to the same time
# (tests/check_trace.py). Needs python3 (scripts/setup.sh --test installs it); skipped,
# saying so, without it.
# usage: test_trace.sh BENCH SOURCE_DIR
set -u
BENCH=$1
SRC=$2
if ! command -v python3 >/dev/null; then
  echo "skip: no python3 to read the trace with (scripts/setup.sh --test installs it)"
  exit 77
fi
. "$SRC/tests/common.sh"
R18=$SRC/configs/resnet18.yaml

# ResNet-18: 69 layers, flatten a view: 68 spans; every block of the hierarchy
"$BENCH" run "$R18" "${FAST[@]}" --trace "$T/r18.json" --stacks "$T/r18.folded" >/dev/null 2>"$T/err" ||
  bad "run with --trace: $(tail -2 "$T/err")"
python3 "$SRC/tests/check_trace.py" "$T/r18.json" "$T/r18.folded" --layers 68 --blocks layer1 layer1.0 \
  layer1.1 layer2 layer2.0 layer2.0.downsample layer2.1 layer3 layer3.0 layer3.0.downsample layer3.1 layer4 \
  layer4.0 layer4.0.downsample layer4.1 && ok || bad "ResNet-18 trace"
grep -q '^resnet18;layer2;layer2.0;layer2.0.downsample;0 [0-9]*$' "$T/r18.folded" && ok ||
  bad "stacks: no resnet18;layer2;layer2.0;layer2.0.downsample;0 line: $(head -3 "$T/r18.folded")"

# a sweep: one stacks file per batch, both forwards in one trace
"$BENCH" sweep "$SRC/configs/smoke.yaml" --batch 1,3 "${FAST[@]}" --trace "$T/s.json" --stacks "$T/s.folded" \
  >/dev/null 2>"$T/err" || bad "sweep with --stacks: $(tail -2 "$T/err")"
[ -s "$T/s.batch1.folded" ] && [ -s "$T/s.batch3.folded" ] && [ ! -e "$T/s.folded" ] && ok ||
  bad "sweep stacks files: $(ls "$T")"
python3 "$SRC/tests/check_trace.py" "$T/s.json" "$T/s.batch1.folded" "$T/s.batch3.folded" --layers 16 \
  --blocks res down down.downsample && ok || bad "smoke sweep trace"

# attention's parts inside the forward: in the trace (inside the layer's span), in the
# stacks (children of the layer), in the CSV (in-model rows whose FLOPs add up to the layer's)
TB=$SRC/tests/data/doc_transformer.yaml
"$BENCH" run "$TB" "${FAST[@]}" --trace "$T/tb.json" --stacks "$T/tb.folded" --csv "$T/tbr.csv" >"$T/tb.out" \
  2>"$T/err" || bad "transformer block with --trace: $(tail -2 "$T/err")"
python3 "$SRC/tests/check_trace.py" "$T/tb.json" "$T/tb.folded" --layers 8 --parts 5 --blocks block &&
  ok || bad "transformer block trace"
for part in in_proj qk softmax av out_proj; do
  grep -q "^encoder_block;block;self_attention;$part [0-9]*$" "$T/tb.folded" || bad "stacks: no $part part"
done
grep -Eq "multihead_attention +softmax +1 " "$T/tb.out" && ok || bad "no parts table: $(grep -A3 'by part' "$T/tb.out")"
python3 - "$T/tbr.csv" <<'PY' && ok || bad "CSV part rows"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
whole = [r for r in rows if r["mode"] == "inmodel" and r["kind"] == "multihead_attention" and not r["part"]]
parts = [r for r in rows if r["part"]]
assert len(whole) == 1 and [r["part"] for r in parts] == ["in_proj", "qk", "softmax", "av", "out_proj"], parts
assert all(r["mode"] == "inmodel" and r["layer_name"] == "block.self_attention." + r["part"] for r in parts)
assert sum(int(r["flops"]) for r in parts) == int(whole[0]["flops"])
assert all(r["status"] == "ok" and float(r["median_us"]) > 0 for r in parts)
assert not any(r["part"] for r in rows if r["mode"] != "inmodel")
PY

# the results files must differ, and a trace path is checked before anything runs
out=$("$BENCH" run "$R18" "${FAST[@]}" --csv "$T/x.csv" --trace "$T/x.json" 2>&1)
[ $? = 2 ] && grep -q "is the same file as" <<<"$out" && ok || bad "--trace onto the CSV's JSON: $out"
out=$("$BENCH" run "$R18" "${FAST[@]}" --trace "$T/no/dir/t.json" 2>&1)
[ $? = 2 ] && grep -q "^bench: --trace: cannot write" <<<"$out" && ok || bad "--trace into a missing folder: $out"

echo "test_trace: $pass passed, $fail failed"
[ $fail = 0 ]
