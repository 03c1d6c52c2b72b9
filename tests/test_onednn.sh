#!/usr/bin/env bash
# The onednn backend end to end (built where oneDNN was found): bench check of every
# shipped config against the plain-C reference, a quick run whose rows name oneDNN's
# implementations, --backend all opening it beside cpu, and its JSON context.
# usage: test_onednn.sh BENCH SOURCE_DIR [most|few: as test_zoo.sh]
set -u
BENCH=$1
SRC=$2
FORWARD=${3:-most}
. "$SRC/tests/common.sh"
for cfg in "$SRC"/configs/*.yaml; do
  name=$(basename "$cfg" .yaml)
  out=$("$BENCH" check "$cfg" --backend onednn $(check_opts "$cfg") 2>&1) && grep -q " 0 failed, 0 skipped" <<<"$out" && ok ||
    bad "check $name on onednn: $(tail -3 <<<"$out")"
done
R18=$SRC/configs/resnet18.yaml
"$BENCH" run "$R18" --backend all "${QUICK[@]}" --csv "$T/r.csv" >"$T/out" 2>&1 || bad "run --backend all: $(tail -3 "$T/out")"
# every ResNet-18 layer but flatten runs a oneDNN primitive, each row timed or a view
awk -F, "$COLS"' $c["backend"]=="onednn" && $c["mode"]!="inmodel" && $c["kind"]!="model" {
    n++; if ($c["status"]!="ok" && $c["status"]!="view") bad=1
    if ($c["kind"]!="flatten" && $c["impl"] ~ /^cpu kernel/) bad=1
    if ($c["kind"]=="conv2d" && $c["impl"] !~ /reorder/ && $c["impl"] !~ /gemm/) bad=1 }
  $c["backend"]=="cpu" {cpu=1}
  END {exit bad || n != 69 || !cpu}' "$T/r.csv" && ok || bad "onednn rows of resnet18: $(grep -c onednn "$T/r.csv") rows"
# the chained forward passes oneDNN's layouts from primitive to primitive: no convolution
# but the stem (whose input is the model's plain one) reorders inside the forward, and the
# reorders that do run are part rows of their own; alone, a convolution's reorders ran at
# setup and batch norm runs on the layout a convolution hands it
awk -F, "$COLS"' $c["backend"]=="onednn" && $c["mode"]=="inmodel" && $c["kind"]=="conv2d" && $c["part"]=="" &&
      $c["layer_index"] > 0 && $c["impl"] ~ /reorder/ {bad=1}
  $c["backend"]=="onednn" && $c["mode"]=="inmodel" && $c["part"] ~ /^reorder/ {parts++}
  $c["backend"]=="onednn" && $c["mode"]=="inmodel" && $c["part"]=="" && $c["impl"] ~ /reorder/ {layers++}
  $c["backend"]=="onednn" && $c["mode"]!="inmodel" && $c["kind"]=="conv2d" && $c["impl"] ~ /\+ .*reorder/ {bad=1}
  $c["backend"]=="onednn" && $c["mode"]!="inmodel" && $c["kind"]=="batchnorm2d" && $c["impl"] !~ /reordered at setup/ {bad=1}
  END {exit bad || parts < layers}' "$T/r.csv" && ok || bad "onednn's layouts in the forward: $(grep onednn "$T/r.csv" | grep -c reorder) reorder rows"
grep -q '"onednn": "[0-9]' "$T/r.json" && grep -q '"onednn_isa"' "$T/r.json" && ok ||
  bad "the JSON context does not describe oneDNN"
# a kind without a oneDNN primitive runs the cpu kernel and says so
"$BENCH" run "$SRC/tests/data/doc_transformer.yaml" --backend onednn "${QUICK[@]}" --csv "$T/t.csv" >"$T/out" 2>&1 &&
  grep -q "cpu kernel: sgemm qkv.*(no oneDNN primitive)" "$T/t.csv" && ok ||
  bad "attention on onednn: $(tail -3 "$T/out")"
# bf16 as a CPU without AVX512_BF16 runs it (oneDNN limited to AVX2, our GEMM off):
# every layer still passes, on the cpu backend's kernels over fp32 copies, and says why
ONEDNN_MAX_CPU_ISA=AVX2 LAYERBENCH_CPU_NO_BF16=1 \
  "$BENCH" check "$SRC/configs/smoke.yaml" --dtype bf16 --backend onednn >"$T/avx2" 2>&1 &&
  grep -q "19 passed, 0 failed" "$T/avx2" && ok || bad "bf16 on AVX2: $(tail -2 "$T/avx2")"
ONEDNN_MAX_CPU_ISA=AVX2 LAYERBENCH_CPU_NO_BF16=1 \
  "$BENCH" run "$SRC/configs/smoke.yaml" --dtype bf16 --backend onednn "${QUICK[@]}" --csv "$T/avx2.csv" >/dev/null 2>&1 &&
  grep -q "cpu kernel: fp32 copies: .*(LAYERBENCH_CPU_NO_BF16 set)" "$T/avx2.csv" &&
  ! awk -F, "$COLS"' $c["kind"] == "conv2d" && $c["mode"] != "inmodel" && $c["impl"] ~ /brgconv|jit/ {found=1} END {exit !found}' "$T/avx2.csv" &&
  ok || bad "bf16 on AVX2 does not say how it runs: $(grep -m2 conv2d "$T/avx2.csv" | cut -c1-300)"
# where the CPU has AVX512_BF16, oneDNN's own bf16 convolutions run
if grep -q avx512_bf16 /proc/cpuinfo; then
  "$BENCH" run "$SRC/configs/smoke.yaml" --dtype bf16 --backend onednn "${QUICK[@]}" --csv "$T/bf16.csv" >/dev/null 2>&1 &&
    grep -q "avx512_core_bf16" "$T/bf16.csv" && ok || bad "no bf16 primitive on a CPU with AVX512_BF16"
else
  echo "skipped: this CPU has no AVX512_BF16, oneDNN's bf16 primitives are not checked here"
fi
# the decoder kinds run the cpu kernels (no oneDNN primitive), every layer checked
for phase in prefill decode chunk; do
  out=$("$BENCH" check "$SRC/tests/data/llama_tiny_$phase.yaml" --backend onednn --batch 2 2>&1) &&
    grep -q "36 passed, 0 failed" <<<"$out" && ok || bad "llama_tiny_$phase on onednn: $(tail -3 <<<"$out")"
done
# int8, dynamic quantization: every convolution and linear layer of ResNet-18 and of the
# smoke model on oneDNN's s8 primitives within int8's tolerance, the chained forward too;
# then as a CPU without VNNI runs it (oneDNN limited to AVX2: the inner product's 7-bit
# weights, no saturation)
for isa in "" AVX2; do
  for cfg in smoke resnet18; do
    ONEDNN_MAX_CPU_ISA=$isa "$BENCH" check "$SRC/configs/$cfg.yaml" --dtype int8 --backend onednn >"$T/i8" 2>&1 &&
      grep -q " 0 failed, 0 skipped" "$T/i8" && ok || bad "int8 $cfg${isa:+ on $isa}: $(grep -E 'FAIL|ERROR|skipped' "$T/i8" | head -3)"
  done
done
# the rows: the convolutions and the linear layer in int8, 1 byte per quantized weight
# (the bias in fp32), the quantizing part named; the other kinds fp32 under dtype int8
"$BENCH" run "$SRC/configs/smoke.yaml" --dtype int8 --backend onednn "${QUICK[@]}" --csv "$T/i8.csv" >/dev/null 2>&1 &&
  awk -F, "$COLS"' $c["mode"] != "inmodel" && $c["layer_name"] == "stem" {
      stem = $c["layer_dtype"] == "int8" && $c["weight_bytes"] == 8 * 3 * 3 * 5 + 4 * 8 && $c["impl"] ~ /int8 s8s8s32 \(input quantized per call\)/ }
    $c["mode"] != "inmodel" && $c["kind"] == "batchnorm2d" && $c["dtype"] == "int8" && $c["layer_dtype"] == "fp32" { bn = 1 }
    $c["mode"] != "inmodel" && $c["kind"] == "linear" && $c["status"] == "ok" && $c["layer_dtype"] == "int8" { fc = 1 }
    END { exit !(stem && bn && fc) }' "$T/i8.csv" && ok ||
  bad "int8 rows: $(awk -F, "$COLS"' $c["mode"] == "warm" {print $c["layer_name"], $c["layer_dtype"], $c["weight_bytes"], $c["impl"]}' "$T/i8.csv" | head -4)"
ONEDNN_MAX_CPU_ISA=AVX2 "$BENCH" run "$SRC/configs/smoke.yaml" --dtype int8 --backend onednn "${QUICK[@]}" --csv "$T/i8avx2.csv" >/dev/null 2>&1 &&
  grep -q "7-bit weights: no VNNI" "$T/i8avx2.csv" && ok || bad "int8 on AVX2 does not say its weights are 7-bit"
echo "test_onednn: $pass passed, $fail failed"
[ $fail = 0 ]
