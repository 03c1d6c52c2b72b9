#!/usr/bin/env bash
# The add-a-kind and add-an-output-format recipes of docs/architecture.md, followed
# literally: the patch tests/data/recipe_kind.patch adds the test-only kind recipe_scale
# (y = alpha * x) by its steps, and tests/data/recipe_output.patch the output --rows FILE
# by its. This test checks that the patch touches the files the recipe names (every
# required step, nothing else), applies it to a copy of the tree, builds that copy (the
# cuda module aside: its table is compiled for syntax where the CUDA headers are), and
# checks the new kind end to end: the kernel tests on cpu and onednn against its
# reference, `bench list`, `bench check`, `bench run`, a config error, and the cuda
# cell's reason. When the recipe or the files it names change, this test says which.
# usage: test_recipe.sh BENCH SOURCE_DIR   (BENCH: unused, the copy is built here)
set -u
SRC=$2
. "$SRC/tests/common.sh"
PATCH=$SRC/tests/data/recipe_kind.patch
PATCH_OUTPUT=$SRC/tests/data/recipe_output.patch

# 1. each patch touches what its recipe lists: each file matches a path of the recipe
# (<...> standing for a name), and each required step is touched (the kind's 1 to 7, the
# output format's 1 to 6)
python3 - "$SRC/docs/architecture.md" "$PATCH" "$PATCH_OUTPUT" <<'EOF' && ok || bad "a patch and its recipe disagree"
import re, sys
doc = open(sys.argv[1]).read()
def pattern(p):
    return re.compile('^' + re.sub(r'<[^>]+>', '[a-z0-9_]+', re.escape(p).replace(r'\<', '<').replace(r'\>', '>')) + '$')
ok = True
for title, patch, required in [('add a kind', sys.argv[2], 7), ('add an output format', sys.argv[3], 6)]:
    start = doc.index('## Recipe: ' + title)
    end = doc.find('\n## ', start + 1)
    recipe = doc[start:end if end >= 0 else len(doc)]
    steps = re.split(r'\n(?=\d+\. )', recipe)[1:]
    files = re.findall(r'^\+\+\+ b/(\S+)', open(patch).read(), re.M)
    touched = set()
    for f in files:
        hit = [i for i, s in enumerate(steps) for p in re.findall(r'`([\w./<>-]+\.(?:c|h|md|txt|py|sh))`', s)
               if pattern(p).match(f)]
        if not hit:
            print(f'{patch}: touches {f}, which no step of the "{title}" recipe names', file=sys.stderr)
            ok = False
        touched.update(hit)
    for i, s in enumerate(steps[:required]):
        if i not in touched:
            print(f'"{title}" recipe step {i + 1} is not followed by {patch}: {s.splitlines()[0]}', file=sys.stderr)
            ok = False
    print(f'recipe "{title}": {len(files)} files, steps touched: {sorted(i + 1 for i in touched)}')
sys.exit(0 if ok else 1)
EOF

# 1b. the recipes against the tree: every file that names a kind (a LAYER_<KIND> of
# layers/layer.h's enum) is one the add-a-kind recipe names, and every file that names a
# dtype other than fp32 (a DTYPE_<T> of layers/dtype.h's) one the add-a-dtype recipe
# names, so that a file that starts naming them is listed where the next author will
# look; and each file the recipes' last step lists for what it names still names one
python3 - "$SRC" <<'EOF' && ok || bad "the add-a-kind or add-a-dtype recipe and the files that name kinds or dtypes disagree"
import os, re, sys
src = sys.argv[1]
doc = open(os.path.join(src, 'docs/architecture.md')).read()
def section(title):
    start = doc.index('## Recipe: ' + title)
    end = doc.find('\n## ', start + 1)
    return doc[start:end if end >= 0 else len(doc)]
def enum_of(header, start, end, drop):
    text = open(os.path.join(src, header)).read()
    return set(re.findall(r'\b([A-Z][A-Z0-9_]+)\b', text[text.index(start):text.index(end)])) - drop
def pattern(p):
    return re.compile('^' + re.sub(r'<[^>]+>', '[a-z0-9_]+', re.escape(p).replace(r'\<', '<').replace(r'\>', '>')) + '$')
def names_in(rel, names, prefix):
    path = os.path.join(src, rel)
    if not os.path.exists(path):
        return set()
    return names & set(re.findall(r'\b%s[A-Z0-9_]+\b' % prefix, open(path, errors='replace').read()))
bad = 0
for title, what, names, prefix, last in [
        ('add a kind', 'kinds', enum_of('layers/layer.h', 'typedef enum layer_kind {', '} layer_kind;',
                                        {'LAYER_KIND_COUNT'}), 'LAYER_', '9'),
        ('add a dtype', 'dtypes', enum_of('layers/dtype.h', 'typedef enum dtype {', '} dtype_t;',
                                          {'DTYPE_COUNT', 'DTYPE_FP32'}), 'DTYPE_', '5')]:
    recipe, before = section(title), bad
    listed = [pattern(p) for p in re.findall(r'`([\w./<>-]+\.(?:c|h|cc|cu))`', recipe)]
    for top in ('bench', 'layers', 'tests', 'fuzz'):
        for root, _, files in os.walk(os.path.join(src, top)):
            for n in sorted(files):
                rel = os.path.relpath(os.path.join(root, n), src)
                named = names_in(rel, names, prefix) if n.endswith(('.c', '.h', '.cc', '.cu')) else set()
                if named and not any(p.match(rel) for p in listed):
                    bad += 1
                    print(f'{rel} names {what} ({", ".join(sorted(named)[:3])}{", ..." if len(named) > 3 else ""}), '
                          f'and the "{title}" recipe (docs/architecture.md) does not list it', file=sys.stderr)
    for rel in re.findall(r'`([\w./-]+\.(?:c|h|cc|cu))`', recipe[recipe.index('\n%s. ' % last):]):
        if not names_in(rel, names, prefix):
            bad += 1
            print(f'{rel}: step {last} of the "{title}" recipe lists it for the {what} it names, and it names none '
                  f'(or is gone)', file=sys.stderr)
    if bad == before:
        print(f'recipe "{title}": {len(names)} {what}; the files that name them and step {last}\'s list agree')
sys.exit(1 if bad else 0)
EOF

# 2. a copy of the tree with the patch applied, built
mkdir -p "$T/src"
for p in CMakeLists.txt README.md cmake bench layers tests scripts fuzz configs docs; do cp -a "$SRC/$p" "$T/src/"; done
# git apply (git is a build dependency, patch(1) may be missing on a fresh machine), outside
# any repository the scratch folder may sit in
for p in "$PATCH" "$PATCH_OUTPUT"; do
  if ! (cd "$T/src" && GIT_CEILING_DIRECTORIES="$T" git apply "$p"); then
    bad "tests/data/$(basename "$p") no longer applies to the tree: rebase it on the files it touches"
    echo "test_recipe: $pass passed, $fail failed"; exit 1
  fi
done
ok
DEPS=()
if [ -n "${LAYERBENCH_DEPS_PREFIX:-}" ]; then DEPS=(-DLAYERBENCH_DEPS_PREFIX="$LAYERBENCH_DEPS_PREFIX"); fi
if ! cmake -S "$T/src" -B "$T/build" -DCMAKE_BUILD_TYPE=Release -DLAYERBENCH_CUDA=OFF "${DEPS[@]}" >"$T/cfg.log" 2>&1 ||
   ! cmake --build "$T/build" -j"$(nproc)" --target test_layers bench >"$T/build.log" 2>&1; then
  bad "the patched tree does not build: $(grep -m3 -E 'error' "$T/build.log" "$T/cfg.log")"
  echo "test_recipe: $pass passed, $fail failed"; exit 1
fi
ok
B=$T/build/bench
HAVE_ONEDNN=0
grep -q 'onednn backend: on' "$T/cfg.log" && HAVE_ONEDNN=1
if [ $HAVE_ONEDNN = 1 ]; then cmake --build "$T/build" --target layerbench_onednn >>"$T/build.log" 2>&1 || bad "onednn module"; fi

# 3. the kernel tests: the new kind's cases against its reference, on every backend built
"$T/build/test_layers" cpu >"$T/cpu.txt" 2>&1 && grep -q '^  recipe_scale .*alpha 2.5' "$T/cpu.txt" && ok ||
  bad "test_layers cpu with recipe_scale: $(tail -3 "$T/cpu.txt")"
if [ $HAVE_ONEDNN = 1 ]; then
  "$T/build/test_layers" onednn >"$T/od.txt" 2>&1 && grep -q '^  recipe_scale .*cpu kernel: direct' "$T/od.txt" && ok ||
    bad "test_layers onednn with recipe_scale: $(tail -3 "$T/od.txt")"
fi
# the cuda cell, compiled for syntax where the toolkit's headers are
CUDA_INC=${CUDAToolkit_ROOT:-/usr/local/cuda}/include
if [ -f "$CUDA_INC/cudnn.h" ] && [ -f "$CUDA_INC/cublas_v2.h" ]; then
  cc -fsyntax-only -Wall -Wextra -Werror -Wno-deprecated-declarations -I"$T/src/layers" -I"$T/src/layers/cuda" \
    -I"$CUDA_INC" "$T/src/layers/cuda/backend_cuda.c" 2>"$T/cuda.txt" && ok || bad "cuda table: $(head -3 "$T/cuda.txt")"
else
  echo "test_recipe: the cuda table is not compiled here: no CUDA headers under $CUDA_INC"
fi

# 4. the kind in a config, end to end
cat >"$T/scale.yaml" <<'EOF'
name: recipe
input: [3, 9, 7]
batch: 2
layers:
  - {kind: conv2d, name: conv, out_channels: 4, kernel_size: 3, padding: 1}
  - {kind: recipe_scale, name: scale, alpha: 0.5}
  - {kind: relu, name: relu}
EOF
expect 0 'scale +recipe_scale .*504 ' -- "$B" list "$T/scale.yaml"   # 2*4*9*7 multiplies
BACKENDS=cpu
[ $HAVE_ONEDNN = 1 ] && BACKENDS=all
expect 0 ' 0 failed, 0 skipped' -- "$B" check "$T/scale.yaml" --backend "$BACKENDS"
"$B" run "$T/scale.yaml" --backend cpu --processes 0 "${QUICK[@]}" --csv "$T/r.csv" >"$T/run.txt" 2>&1 &&
  awk -F, "$COLS"' $c["layer_name"]=="scale" && $c["mode"]!="inmodel" {n++; if ($c["impl"]!="direct" || $c["status"]!="ok" || $c["flops"]!=504) bad=1}
    END {exit bad || n != 1}' "$T/r.csv" && ok || bad "run with recipe_scale: $(tail -3 "$T/run.txt")"
sed 's/alpha: 0.5/alpha: -1/' "$T/scale.yaml" >"$T/bad.yaml"
expect 2 'bad.yaml:6:[0-9]+: alpha must not be negative' -- "$B" list "$T/bad.yaml"

# 5. the output format (--rows, tests/data/recipe_output.patch), with the new kind in it
"$B" run "$T/scale.yaml" --backend cpu --processes 0 "${QUICK[@]}" --rows "$T/rows.txt" >"$T/rows.out" 2>&1 &&
  awk -F'\t' '$1 == "cpu" && $4 == "scale" && $5 > 0 {n++} END {exit n != 1}' "$T/rows.txt" && ok ||
  bad "run --rows: $(tail -3 "$T/rows.out")"
expect 2 "is the same file as --csv's" -- "$B" run "$T/scale.yaml" "${QUICK[@]}" --csv "$T/x.txt" --rows "$T/x.txt"
expect 0 "--rows FILE" -- "$B" run --help

echo "test_recipe: $pass passed, $fail failed"
[ $fail = 0 ]
