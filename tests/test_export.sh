#!/usr/bin/env bash
# scripts/torch_export.py, where a python3 with torch and torchvision is found (else the
# test is skipped, saying so): ResNet-18 exported from torchvision lists exactly as the
# shipped configs/resnet18.yaml (every name, kind, shape, parameter and FLOP count);
# the transformers (ViT-B/16, the BERT-base encoder) too; ConvNeXt, which needs what
# layerbench does not have, is refused with the list of what is missing and no file
# written.
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

# the transformers: as shipped (bert_base from scripts/transformer_models.py)
same_as_shipped() { # name, then the exporter's arguments
  local name=$1; shift
  (cd "$SRC" && "$PY" scripts/torch_export.py "$@" -o "$T/$name.yaml") 2>"$T/$name.err" ||
    { bad "export $name: $(tail -3 "$T/$name.err")"; return; }
  "$BENCH" list "$T/$name.yaml" --csv "$T/$name.exported.csv" >/dev/null &&
    "$BENCH" list "$SRC/configs/$name.yaml" --csv "$T/$name.shipped.csv" >/dev/null &&
    diff "$T/$name.exported.csv" "$T/$name.shipped.csv" >"$T/diff" && ok ||
    bad "exported $name differs from configs/$name.yaml: $(head -5 "$T/diff")"
}
same_as_shipped vit_b_16 vit_b_16
same_as_shipped bert_base transformer_models:bert_base --input 128,768 --name bert_base

# ConvNeXt needs what layerbench does not have: refused with the list, nothing written,
# and each problem said once (not again for every layer after it)
"$PY" "$SRC/scripts/torch_export.py" convnext_tiny -o "$T/cn.yaml" 2>"$T/cn.err"
rc=$?
[ $rc = 1 ] && [ ! -e "$T/cn.yaml" ] && grep -q "layerbench cannot express .* of convnext_tiny" "$T/cn.err" &&
  grep -q "features.1.0.block.1: module Permute" "$T/cn.err" &&
  grep -q "operation mul on the parameter features.1.0.layer_scale" "$T/cn.err" &&
  ! grep -q "not computed from the model's input" "$T/cn.err" && ok ||
  bad "convnext_tiny: exit $rc, $(head -5 "$T/cn.err")"

echo "test_export: $pass passed, $fail failed"
[ $fail = 0 ]
