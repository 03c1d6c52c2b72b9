#!/usr/bin/env bash
# Every torchvision classification model through the exporter, checked end to end: for
# each model of torchvision.models.list_models() up to --max-params parameters, export
# it (scripts/torch_export.py), compare `bench list`'s parameter total with torch's for
# the network the exporter builds (GoogLeNet and Inception v3 without their training-only
# auxiliary classifiers), and compare the plain-C reference forward of the export
# (build/ref_dump, batch 1) with torch's own forward on the same input and weights
# (tests/export_torch_check.py). One line per model, then a summary; exit status 1 if
# any model failed. Needs torch and torchvision; takes about an hour on 2 cores.
# usage: scripts/export_torchvision.sh [--build DIR] [--max-params N] [--keep DIR] [MODEL...]
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$SRC/build
MAX=150000000
KEEP=
MODELS=()
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --max-params) MAX=$2; shift 2 ;;
    --keep) KEEP=$2; shift 2 ;;
    -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "export_torchvision: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) MODELS+=("$1"); shift ;;
  esac
done
PY=/usr/bin/python3
"$PY" -c 'import torch, torchvision' 2>/dev/null || { echo "export_torchvision: needs torch and torchvision in $PY" >&2; exit 2; }
for tool in bench ref_dump; do
  [ -x "$BUILD/$tool" ] || { echo "export_torchvision: no $BUILD/$tool (build first, or give --build DIR)" >&2; exit 2; }
done
W=${KEEP:-$(mktemp -d)}
mkdir -p "$W"
[ -n "$KEEP" ] || trap 'rm -rf "$W"' EXIT
export PYTHONWARNINGS=ignore PYTHONPATH="$SRC/scripts${PYTHONPATH:+:$PYTHONPATH}"
[ ${#MODELS[@]} -gt 0 ] || read -r -a MODELS <<<"$("$PY" -c 'import torchvision.models as t; print(" ".join(t.list_models(module=t)))')"
pass=0 fail=0 skip=0
for m in "${MODELS[@]}"; do
  start=$(date +%s)
  want=$("$PY" -c "import torch_export; print(sum(p.numel() for p in torch_export.build('$m').parameters()))" 2>"$W/$m.err") ||
    { echo "$m: FAILED to build: $(tail -1 "$W/$m.err")"; fail=$((fail + 1)); continue; }
  if [ "$want" -gt "$MAX" ]; then
    echo "$m: skipped, $want parameters (over --max-params $MAX)"; skip=$((skip + 1)); continue
  fi
  "$PY" "$SRC/scripts/torch_export.py" "$m" -o "$W/$m.yaml" 2>"$W/$m.err" ||
    { echo "$m: FAILED to export: $(tail -2 "$W/$m.err" | tr '\n' ' ')"; fail=$((fail + 1)); continue; }
  got=$("$BUILD/bench" list "$W/$m.yaml" | sed -n 's/^Totals: \([0-9]*\) params.*/\1/p')
  mkdir -p "$W/$m.dump"
  e2e=$("$BUILD/ref_dump" "$W/$m.yaml" "$W/$m.dump" 1 1 2>&1 >/dev/null &&
    "$PY" "$SRC/tests/export_torch_check.py" "$W/$m.dump" "$m" 2>&1 | tail -1)
  ok=$?
  rm -rf "$W/$m.dump"
  if [ "$got" = "$want" ] && [ $ok = 0 ]; then
    pass=$((pass + 1)); verdict=ok
  else
    fail=$((fail + 1)); verdict=FAILED
  fi
  echo "$m: $verdict: $got parameters (torch $want); ${e2e#export_torch_check: }; $(($(date +%s) - start)) s"
done
echo "export_torchvision: $pass passed, $fail failed, $skip skipped (of ${#MODELS[@]})"
[ $fail = 0 ]
