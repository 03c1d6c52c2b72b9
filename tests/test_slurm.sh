#!/usr/bin/env bash
# bench sweep --slurm and bench merge against a real Slurm: a single-node cluster started
# here (tests/slurm_cluster.sh) with MaxArraySize=4, so that a 6-shard sweep is split
# into two arrays. Skipped (77, with the reason) where Slurm cannot be started.
# usage: test_slurm.sh BENCH SRC
BENCH=$1 SRC=$2
. "$SRC/tests/common.sh"
. "$SRC/tests/slurm_cluster.sh"
LLAMA=$SRC/tests/data/llama_tiny_decode.yaml
OPTS=(--warmup-time 0 --min-time 0.001 --max-noise 100 --min-samples 2 --timeout 0.02 --no-peaks --processes 0 --mode warm)

# ---- what needs no cluster: the command line's own errors
expect 2 "no sbatch|none on PATH" -- env PATH=/nonexistent "$BENCH" sweep "$SMOKE" --batch 1 --slurm "$T/nosb"
[ ! -e "$T/nosb" ] && ok || bad "a refused --slurm left its folder"
expect 2 "one CONFIG" -- "$BENCH" sweep "$SMOKE" "$LLAMA" --batch 1
expect 2 "go with --slurm" -- "$BENCH" sweep "$SMOKE" --dry-run
expect 2 "drop --csv" -- "$BENCH" sweep "$SMOKE" --slurm "$T/x" --csv "$T/x.csv"
expect 2 "needs --threads" -- "$BENCH" sweep "$SMOKE" --slurm "$T/x" --shared
expect 2 "time format" -- "$BENCH" sweep "$SMOKE" --slurm "$T/x" --time-limit 1h
expect 2 "backend expects" -- "$BENCH" sweep "$SMOKE" --slurm "$T/x" --backend cpu,gpu
expect 2 "not the folder of a bench sweep" -- "$BENCH" merge "$T"
expect 2 "$T/bad.yaml:" -- bash -c "printf 'name: x\ninput: [3]\nlayers:\n  - {kind: nope}\n' > '$T/bad.yaml' &&
  '$BENCH' sweep '$SMOKE' '$T/bad.yaml' --slurm '$T/x' --dry-run"

CLUSTER=$T/cluster
# the daemons are stopped however the test ends (common.sh's trap removes $T after)
trap 'slurm_cluster_stop "$CLUSTER"; rm -rf "$T"' EXIT
SLURM_CLUSTER_EXTRA="MaxArraySize=4"
if ! slurm_cluster_start "$CLUSTER"; then
  echo "SKIPPED: no Slurm cluster: $SLURM_CLUSTER_WHY ($pass checks passed without one)"
  [ "$fail" = 0 ] || exit 1
  exit 77
fi
started=$(date +%s)

# ---- --dry-run: the scripts against the shard list, nothing written
SW=$T/sweep
"$BENCH" sweep "$SMOKE" "$LLAMA" --batch 1,2,3 "${OPTS[@]}" --slurm "$SW" --dry-run > "$T/dry.txt" 2>&1
[ ! -e "$SW" ] && ok || bad "--dry-run wrote $SW"
python3 - "$T/dry.txt" "$SMOKE" "$LLAMA" <<'EOF' && ok || bad "the --dry-run scripts do not match the shards"
import re, sys
text = open(sys.argv[1]).read()
configs = sys.argv[2:]
shards = [l.split("\t") for l in text.split("shards.tsv\n", 1)[1].splitlines() if re.match(r"\d+\t", l)]
want = [(c, b) for c in configs for b in "123"]
assert [(s[1].split("/")[-1], s[2]) for s in shards] == [(c.split("/")[-1], b) for c, b in want], shards
seen = {}
for script in re.split(r"# ---- \S+array-0-\d\.sbatch\n", text)[1:]:
    spec = re.search(r"#SBATCH --array=(\S+)", script).group(1)
    tasks = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        tasks |= set(range(int(a), int(b or a) + 1))
    assert max(tasks) < 4, spec  # MaxArraySize=4: task ids up to 3
    cases = re.findall(r"^(\d+)\) shard=(\d+); args=\((\S+) --batch (\d+) --backend (\S+) --dtype (\S+) --pass (\S+)\)",
                       script, re.M)
    assert {int(t) for t, *_ in cases} == tasks, (spec, cases)
    for t, s, cfg, batch, backend, dtype, pass_ in cases:
        row = shards[int(s)]
        assert (cfg, batch, backend, dtype, pass_) == (row[1], row[2], row[3], row[4], row[5]), (s, row)
        assert s not in seen
        seen[s] = t
    assert "--exclusive" in script and "--timeout 0.02" in script and "--csv" in script
assert sorted(map(int, seen)) == list(range(6)), seen
assert "--dependency=afterany:" in text and " merge " in text
EOF

# --pass is a shard axis: a shard per pass, each script naming its own
"$BENCH" sweep "$SMOKE" --batch 1 --pass forward,backward "${OPTS[@]}" --slurm "$T/passes" --dry-run > "$T/passes.txt" 2>&1
[ "$(grep -cE '^[0-9]+'$'\t''.*'$'\t''(forward|backward)'$'\t' "$T/passes.txt")" = 2 ] &&
  grep -q -- "--pass forward)" "$T/passes.txt" && grep -q -- "--pass backward)" "$T/passes.txt" && ok ||
  bad "--pass forward,backward in shards: $(grep -A4 shards.tsv "$T/passes.txt")"

# cuda shards (where this binary has the cuda backend): an array of their own that asks
# for a GPU each, the CPU shards' without
if "$BENCH" sweep "$SMOKE" --batch 1,2 --backend cpu,cuda --slurm "$T/gpu" --dry-run > "$T/gpu.txt" 2>&1; then
  python3 - "$T/gpu.txt" <<'EOF' && ok || bad "cuda shards: $(head -20 "$T/gpu.txt")"
import re, sys
text = open(sys.argv[1]).read()
scripts = re.split(r"# ---- \S+array-0-\d\.sbatch\n", text)[1:]
assert len(scripts) == 2, len(scripts)
cpu, gpu = scripts
assert "--gres" not in cpu and "#SBATCH --gres=gpu:1" in gpu
assert re.findall(r"--backend (\S+)", cpu) == ["cpu", "cpu"] and re.findall(r"--backend (\S+)", gpu) == ["cuda", "cuda"]
EOF
else
  echo "cuda shards not checked: this bench has no cuda backend ($(tail -1 "$T/gpu.txt"))"
fi

# ---- bad input against the cluster
expect 2 "invalid partition|Invalid partition" -- "$BENCH" sweep "$SMOKE" --batch 1 "${OPTS[@]}" --slurm "$T/rejected" \
  --sbatch-args "--partition=nope"
[ ! -e "$T/rejected" ] && ok || bad "an sbatch that refused the script left $T/rejected"

# ---- the sweep: 2 configs x 3 batches, two arrays (4 + 2 tasks), one task cancelled
out=$("$BENCH" sweep "$SMOKE" "$LLAMA" --batch 1,2,3 "${OPTS[@]}" --slurm "$SW" 2>&1); rc=$?
[ "$rc" = 0 ] && ok || bad "sweep --slurm -> $rc: $out"
jobs=$(grep -oE '^(array|merge) job [0-9]+' <<<"$out" | awk '{print $3}')
second=$(grep -E '^array job' <<<"$out" | sed -n 2p | awk '{print $3}' | tr -d :)
[ "$(wc -w <<<"$jobs")" = 3 ] && [ -n "$second" ] && ok || bad "expected two arrays and a merge job: $out"
grep -q "shard = task + 4" <<<"$out" && ok || bad "the second array does not say its base: $out"
scancel "${second}_0"   # shard 4: pending behind the first array on the one node
slurm_wait_jobs 120 $jobs && ok || bad "the jobs did not end: $(squeue)"
expect 1 "shard 4 \(llama_tiny_decode.yaml, batch 2, cpu, fp32\): missing" -- "$BENCH" merge "$SW" -o "$T/m1.csv"
grep -q "shard 4 .*missing" "$SW"/merge-*.out && ok || bad "the merge job did not report shard 4: $(cat "$SW"/merge-*.out)"
[ "$(awk -F, 'NR > 1' "$T/m1.csv" | wc -l)" -gt 100 ] && ok || bad "the incomplete merge kept no rows"
expect 2 "holds files already" -- "$BENCH" sweep "$SMOKE" "$LLAMA" --batch 1,2,3 "${OPTS[@]}" --slurm "$SW"
expect 2 "holds another sweep" -- "$BENCH" sweep "$SMOKE" "$LLAMA" --batch 1,2 "${OPTS[@]}" --slurm "$SW" --resume

# ---- --resume: only shard 4 again
out=$("$BENCH" sweep "$SMOKE" "$LLAMA" --batch 1,2,3 "${OPTS[@]}" --slurm "$SW" --resume 2>&1); rc=$?
[ "$rc" = 0 ] && grep -q "1 shard, tasks 0 (shard = task + 4)" <<<"$out" && ok || bad "--resume -> $rc: $out"
grep -cE '^[0-9]+\) shard=' "$SW"/array-1-0.sbatch | grep -qx 1 && grep -q '^0) shard=4;' "$SW"/array-1-0.sbatch &&
  ok || bad "the resubmitted script is not shard 4 alone: $(cat "$SW"/array-1-*.sbatch)"
slurm_wait_jobs 60 $(grep -oE '^(array|merge) job [0-9]+' <<<"$out" | awk '{print $3}') && ok || bad "the resumed jobs did not end"
expect 0 "merged 6 of 6 shards" -- "$BENCH" merge "$SW" -o "$T/merged.csv"
grep -q "merged 6 of 6" "$SW"/merge-*.out && ok || bad "the resumed merge job did not merge all 6"
expect 0 "nothing to submit" -- "$BENCH" sweep "$SMOKE" "$LLAMA" --batch 1,2,3 "${OPTS[@]}" --slurm "$SW" --resume

# ---- the merged CSV against local sweeps: the same rows, in order, by their keys
for c in "$SMOKE" "$LLAMA"; do
  "$BENCH" sweep "$c" --batch 1,2,3 "${OPTS[@]}" --no-progress --csv "$T/local_$(basename "$c")".csv >/dev/null 2>&1 ||
    bad "local sweep of $c failed"
done
python3 - "$T/merged.csv" "$T/local_smoke.yaml.csv" "$T/local_llama_tiny_decode.yaml.csv" "$T/merged.json" <<'EOF' &&
import csv, json, sys
merged = list(csv.DictReader(open(sys.argv[1])))
local = [r for f in sys.argv[2:4] for r in csv.DictReader(open(f))]
key = ["model", "backend", "mode", "batch", "dtype", "tokens", "kv_len", "layer_index", "layer_name", "kind", "part", "status"]
assert [[r[k] for k in key] for r in merged] == [[r[k] for k in key] for r in local], "rows differ"
extra = ["shard", "host", "slurm_node", "slurm_job_id", "slurm_array_job_id", "slurm_array_task_id", "gpu_name", "gpu_uuid", "gpu_driver"]
assert list(merged[0].keys()) == list(local[0].keys()) + extra, list(merged[0].keys())
assert all(r["slurm_node"] == "localhost" and r["slurm_array_job_id"] and r["host"] for r in merged)
assert {r["shard"] for r in merged} == set(map(str, range(6)))
j = json.load(open(sys.argv[4]))
assert j["state"] == "complete" and j["merged"]["merged"] == 6 and len(j["shards"]) == 6
assert len(j["completed"]) == 6 and all(s["outcome"] == "ok" for s in j["shards"])
assert [c.split("/")[-1] for c in j["config"]] == ["smoke.yaml", "llama_tiny_decode.yaml"], j["config"]
import glob, os
parts = glob.glob(os.path.join(os.path.dirname(j["shards"][0]["part"]), "part-*.json"))
assert len(parts) == 6 and all(json.load(open(p))["slurm"]["node"] == "localhost" for p in parts), parts
EOF
ok || bad "the merged CSV and JSON do not match the local sweeps"
expect 0 "rows compared" -- "$BENCH" compare "$T/merged.csv" "$T/merged.csv"

# ---- a shard whose bench fails on the node: its status, the merge's report
out=$("$BENCH" sweep "$SMOKE" --batch 1,1000000000 "${OPTS[@]}" --slurm "$T/fails" 2>&1); rc=$?
[ "$rc" = 0 ] && ok || bad "sweep --slurm of the failing shard -> $rc: $out"
slurm_wait_jobs 60 $(grep -oE '^(array|merge) job [0-9]+' <<<"$out" | awk '{print $3}') && ok || bad "its jobs did not end"
expect 1 "shard 1 \(smoke.yaml, batch 1000000000, cpu, fp32\): failed \(exit 2 on" -- "$BENCH" merge "$T/fails"
grep -q "needs .* TiB" "$T"/fails/*_1.out && ok || bad "the failed task's output lacks bench's reason"
grep -q "^state=done" "$T"/fails/part-*_1.status && grep -q "^exit=2" "$T"/fails/part-*_1.status && ok ||
  bad "the failed task's status: $(cat "$T"/fails/part-*_1.status)"

echo "slurm: $pass passed, $fail failed ($(($(date +%s) - started)) s with the cluster)"
[ "$fail" = 0 ]
