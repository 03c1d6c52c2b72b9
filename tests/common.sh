# Shared by the shell tests, sourced once a test has its BENCH and SRC (and has checked
# what it needs): a scratch folder T removed at exit, the pass and fail counters with
# ok and bad, the timing options, and COLS, an awk prologue mapping a CSV's header to
# its columns (c["median_us"]).
# usage, in a test: BENCH=$1 SRC=$2, then . "$SRC/tests/common.sh"
set -u
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# the algorithm choices bench keeps by default (--algo-cache) go to the scratch folder,
# not the user's ~/.cache
export XDG_CACHE_HOME=$T/cache
SMOKE=$SRC/configs/smoke.yaml
R18=$SRC/configs/resnet18.yaml
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAILED: $*" >&2; }
# a few samples per row, enough for a noise figure
FAST=(--warmup-time 0 --min-time 0.002 --max-noise 5 --min-samples 3 --timeout 0.05 --no-progress --no-peaks)
# one sample per row: only that every row runs
QUICK=(--warmup-time 0 --min-time 0.001 --max-noise 100 --min-samples 1 --timeout 0.001 --no-progress --no-peaks)
# expect CODE PATTERN -- command...: exit code and a regex on stdout+stderr
expect() {
  local code=$1 pattern=$2; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" != "$code" ]; then bad "$* -> exit $rc, expected $code: $(echo "$out" | tail -3)"; return; fi
  if [ -n "$pattern" ] && ! grep -qE -- "$pattern" <<<"$out"; then bad "$* -> output lacks /$pattern/: $(echo "$out" | tail -3)"; return; fi
  ok
}
COLS='NR==1 {for (i = 1; i <= NF; i++) c[$i] = i; next}'
# The same for rows whose quoted fields may hold commas (a decoder's attention and rope
# parameters): each line split into f[1..], the header's names into c, as with COLS
# (awk -F, "$COLS_Q"' f[c["median_us"]] != "" ...'); any awk, mawk included.
COLS_Q='function csv_split(s, out,   n, i, ch, q, v) {
  n = 0; v = ""; q = 0
  for (i = 1; i <= length(s); i++) {
    ch = substr(s, i, 1)
    if (q && ch == "\"" && substr(s, i + 1, 1) == "\"") { v = v ch; i++ }
    else if (ch == "\"") q = !q
    else if (ch == "," && !q) { out[++n] = v; v = "" }
    else v = v ch
  }
  out[++n] = v
  return n
}
{ delete f; nf = csv_split($0, f) }
NR == 1 { for (i = 1; i <= nf; i++) c[f[i]] = i; next }'
# bench check's options for config $1, whose chained forward it checks or not (the
# reference forward costs as much as checking every layer): FORWARD=most (the default)
# every config's but VGG-16's (a plain chain, nothing to wire wrong, the costliest
# reference: 25 s) and ViT-B/16's (BERT's covers the transformer kinds: 15 s);
# FORWARD=few (the sanitizer build) ResNet-18's and the smoke config's only
check_opts() {
  case "${FORWARD:-most}:$(basename "$1" .yaml)" in
    *:resnet18 | *:smoke) ;;
    most:vgg16 | most:vit_b_16 | few:*) echo --no-forward ;;
  esac
}
