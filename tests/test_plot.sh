#!/usr/bin/env bash
# scripts/plot.py on a fresh sweep (two batch sizes, the peaks measured): every plot is
# written as a PNG, and a CSV that is not layerbench's is refused. Needs python3 with
# matplotlib and pandas (scripts/setup.sh --test installs them); skipped, saying so,
# without them. A decoder's grid (batch x cache length) gets a plot per set and the
# decode plot.
# usage: test_plot.sh BENCH SOURCE_DIR
set -u
BENCH=$1
SRC=$2
PY=
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import matplotlib, pandas' 2>/dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
  echo "skip: no python3 with matplotlib and pandas (scripts/setup.sh --test installs them)"
  exit 77
fi
. "$SRC/tests/common.sh"
FAST=(--warmup-time 0 --min-time 0.002 --max-noise 5 --min-samples 3 --timeout 0.05 --no-progress) # with the peaks: the roofline plot needs them

"$BENCH" sweep "$SRC/configs/smoke.yaml" --batch 1,2 "${FAST[@]}" --csv "$T/smoke.csv" >/dev/null 2>&1 ||
  bad "sweep failed"
"$PY" "$SRC/scripts/plot.py" "$T/smoke.csv" --out "$T/png" --top 5 >"$T/out" 2>&1 || bad "plot.py: $(tail -3 "$T/out")"
for f in smoke_layers_cpu_b1 smoke_layers_cpu_b2 smoke_scaling smoke_roofline_cpu_b1 smoke_roofline_cpu_b2; do
  # a PNG: its signature, and more than a blank canvas
  if [ "$(head -c 8 "$T/png/$f.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] &&
    [ "$(wc -c <"$T/png/$f.png")" -gt 20000 ]; then ok; else bad "$f.png: $(ls -l "$T/png" 2>&1 | head -8)"; fi
done
grep -c '\.png$' "$T/out" | grep -qx 5 && ok || bad "plot.py listed: $(cat "$T/out")"

# a decoder's grid over batch and cache length: a set per shape (none overwrites
# another) and the decode plot
"$BENCH" sweep "$SRC/tests/data/hf/tiny-llama" --phase decode --batch 1,2 --kv-len 8,16 "${FAST[@]}" --csv "$T/dec.csv" \
  >/dev/null 2>&1 || bad "decode sweep failed"
"$PY" "$SRC/scripts/plot.py" "$T/dec.csv" --out "$T/dpng" >"$T/dout" 2>&1 || bad "plot.py on the decode grid: $(tail -3 "$T/dout")"
for f in tiny-llama_decode_cpu tiny-llama_layers_cpu_b1_t1_kv8 tiny-llama_layers_cpu_b2_t1_kv16 tiny-llama_roofline_cpu_b2_t1_kv8; do
  if [ "$(head -c 8 "$T/dpng/$f.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] &&
    [ "$(wc -c <"$T/dpng/$f.png")" -gt 20000 ]; then ok; else bad "$f.png: $(ls "$T/dpng" 2>&1 | head -12)"; fi
done
# 4 sets: layers and roofline each, a scaling plot per cache length, the decode plot
grep -c '\.png$' "$T/dout" | grep -qx 11 && ok || bad "plot.py listed for the grid: $(cat "$T/dout")"

out=$("$PY" "$SRC/scripts/plot.py" "$SRC/tests/data/not_results.csv" --out "$T/x" 2>&1)
[ $? != 0 ] && grep -q "is not a layerbench results CSV" <<<"$out" && ok || bad "a foreign CSV: $out"

echo "test_plot: $pass passed, $fail failed"
[ $fail = 0 ]
