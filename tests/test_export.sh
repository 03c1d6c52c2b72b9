#!/usr/bin/env bash
# scripts/torch_export.py, where a python3 with torch and torchvision is found (else the
# test is skipped, saying so): ResNet-18 exported from torchvision lists exactly as the
# shipped configs/resnet18.yaml (every name, kind, shape, parameter and FLOP count);
# ViT-B/16, which needs kinds layerbench does not have, is refused with the list of what
# is missing and no file written.
# usage: test_export.sh BENCH SOURCE_DIR
set -u
BENCH=$1
SRC=$2
PY=
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import torch, torchvision' 2>/dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
  echo "skip: no python3 with torch and torchvision (Debian: python3-torch python3-torchvision)"
  exit 77
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAILED: $*" >&2; }

"$PY" "$SRC/scripts/torch_export.py" resnet18 -o "$T/r18.yaml" 2>"$T/r18.err" && ok || bad "export resnet18: $(cat "$T/r18.err")"
"$BENCH" list "$T/r18.yaml" --csv "$T/exported.csv" >/dev/null && "$BENCH" list "$SRC/configs/resnet18.yaml" --csv "$T/shipped.csv" >/dev/null &&
  diff "$T/exported.csv" "$T/shipped.csv" >"$T/diff" && ok || bad "exported resnet18 differs from configs/resnet18.yaml: $(head -5 "$T/diff")"

"$PY" "$SRC/scripts/torch_export.py" vit_b_16 -o "$T/vit.yaml" 2>"$T/vit.err"
rc=$?
[ $rc = 1 ] && [ ! -e "$T/vit.yaml" ] && grep -q "layerbench cannot express .* of vit_b_16" "$T/vit.err" &&
  grep -q "encoder.layers.encoder_layer_0.ln_1: module LayerNorm" "$T/vit.err" && ok ||
  bad "vit_b_16: exit $rc, $(head -3 "$T/vit.err")"

echo "test_export: $pass passed, $fail failed"
[ $fail = 0 ]
