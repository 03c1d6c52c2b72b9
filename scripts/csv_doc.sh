#!/usr/bin/env bash
# Prints docs/csv.md from `bench schema`, so the documented columns are the real ones.
# usage: scripts/csv_doc.sh [BENCH] > docs/csv.md    (tests/test_cli.sh checks it)
set -euo pipefail
BENCH=${1:-build/bench}
cat <<'HEAD'
# The results CSV

`bench run --csv FILE` and `bench sweep --csv FILE` write one tidy CSV: one row per
layer per backend per timing mode per batch size and dtype; then, once per backend, batch and dtype, the
whole forward (`kind` = `model`, mode `chained`, and `graph` where the backend replays
graphs) and, for backends with their own memory, the model input and output copies
(`kind` = `copy`, mode `transfer`). It loads with `pandas.read_csv(FILE)` and no options.
Empty cells mean "not applicable" (a skipped row has no statistics). Shapes are written
`NxCxHxW` so no cell needs quoting; names containing commas or quotes are quoted as
RFC 4180 says. The schema is defined once, in `bench/report/report_csv.c`; `bench schema`
prints it and this page is made from it by `scripts/csv_doc.sh`. `bench list --csv`
writes the columns marked "list" only.

| column | list | meaning |
| --- | --- | --- |
HEAD
list=" model batch layer_index layer_name kind input_shape output_shape params macs flops bytes parameters inputs "
"$BENCH" schema | while read -r name doc; do
  l=""
  case "$list" in *" $name "*) l="yes" ;; esac
  echo "| \`$name\` | $l | $doc |"
done
cat <<'TAIL'

Times are per launch, from the kept samples only (README, "How it measures"): layers
are sampled in rounds of chunks (Google Benchmark runs of about `--min-time`) until the
95% confidence interval of the median is within `--max-noise` of it or `--timeout`
passes; warm-up, Google Benchmark's iteration estimate and the first sample of each
later chunk are dropped (`discarded`). CPU samples are read from `CLOCK_MONOTONIC`
around each call; CUDA samples from CUDA events on the layer's stream, which a spinning
kernel holds while the sample is queued. Rows of mode `inmodel` are the layers inside
the chained forward: the time from the previous layer's end to the layer's own
(timestamps on the CPU, events between kernels on a GPU), one per kept chained sample.

## Worker processes, contention and the canary

By default each (batch, backend, mode) set is measured in `--processes` 3 worker
processes, one after the other, each with a third of `--timeout` and `--min-samples`
(a worker that ran in a slow phase of the machine is replaced; below);
a row's statistics are of all their samples pooled (`processes` says how many), and its
`ci_low_us`..`ci_high_us` also holds M +- t(0.975, k-1) s / sqrt(k), s the standard
deviation of the k processes' own medians, so that the interval covers how much one
process's figure differs from the next's (`process_spread_pct`: their range); with two
processes, M +- their distance (t with one degree of freedom, 12.7, would make it nine
times that: ResNet-18's `conv1` at 2093 us read 196 to 3990 us). Example,
ResNet-18's `layer2.0.conv2` in a run where one process ran slow: `median_us` 305.0,
`ci_low_us` 255.5, `ci_high_us` 354.6, `processes` 3, `process_spread_pct` 11.7; in the
next run 269.3, 267.7, 270.9, 3, 0.47.

Every sample reads how long the benchmark's threads waited for a CPU
(`/proc/self/task/*/schedstat`, run_delay) before and after it. A sample that waited
more than 1% of its time is dropped (`disturbed` counts them); the stopping rule counts
only the undisturbed ones. A row that still had fewer than `--min-samples` undisturbed
samples at `--timeout`, or more than a quarter of whose samples were disturbed, is
`contended` = `true`: its statistics are of the undisturbed
samples if it has 3, else of all, and it is slower than the machine runs it. The
table marks it `warm*`, a warning gives the share of contended rows and the other
processes that used the CPUs meanwhile (`pid 4242 (sh) 99% of a CPU`), and `bench
compare` gives it no FASTER or SLOWER verdict.

`canary_us` is a fixed workload timed (five times, the median) at the start of every
round of every process: on the CPU backends 32 joins of the thread pool, every thread
running a chain of 1024 dependent multiply-adds in each; on others a chain on one
thread. It follows the machine's speed and nothing the harness changes. The JSON has its median and drift per
set; `bench compare` divides the two runs' canaries where they time the same thing (rows
of the same `threads`, in runs of the same build: the JSON contexts' version, git
revision, build type and compiler) and, when they differ by 2% or more, says "The
machine ran X% slower in NEW" and widens the threshold on that side only: a slower
machine widens SLOWER's band (a slowdown it explains is not blamed on the layers), a
faster one FASTER's, and neither hides a change the other way. Across thread counts or
builds, or without a JSON context beside a CSV, it says why no drift correction
applies, and the verdicts stand on the rows' own intervals.

## Files, interruptions and --resume

A regular `--csv` file is replaced atomically after every finished (batch, dtype,
backend) set: the whole content goes to a new temporary file beside it
(`FILE.tmp.PID.RANDOM`, created with `O_CREAT|O_EXCL|O_NOFOLLOW`, so nothing planted at
that name, a symbolic link least of all, is written through), then renamed over it. The
file on disk always holds complete sets, whatever stops the run: a SIGINT, SIGTERM or
SIGHUP stops it at the next layer (exit status 128 + the signal; one that comes during
the set-up stops it before its first set, one after the last set still ends it as
interrupted), drops the unfinished set and keeps the rest; a SIGKILL leaves the last
checkpoint. The JSON context is written after the CSV and lists a set only once every
file before it holds that set; a run that finished no set leaves both files as they
were.

`bench sweep ... --csv FILE --resume` (or `run`) reads FILE and the JSON beside it and
keeps the sets that are whole: the JSON lists the set as completed with the number of
rows it wrote (`completed[].rows`), the CSV holds exactly that many, and none is there
twice. A set cut short, one the JSON does not list (a write that failed), or rows
pasted twice are said and measured again; without the JSON nothing is kept. It refuses a
file with another header or another model.

An existing file's permissions are kept and a file the user may not write is refused; a
symbolic link the user names is followed (the file it names is replaced), and one that
names nothing is refused. stdout (`-`, or a path that is stdout's own file, such as
`/dev/stdout` redirected to a file), devices and FIFOs are streams, without a JSON
context: the CSV goes to them row by row as sets finish, a trace or stacks once, whole,
at the end, so the stream holds one valid document (and the tables go to stderr).
Paths that cannot work (a directory, a missing folder, the config itself) and two
outputs that are the same file however they are spelt (`./x.csv`, a hard link, the
JSON beside the CSV, a sweep's per-batch stacks) are refused before anything is
measured, with exit status 2.

Every file bench reads (configs, config.json, results CSVs and JSON, the choices cache,
a sweep folder's lists and statuses) must be a regular file under a size limit (1 MiB
for a YAML config, 16 MiB for a config.json, 512 MiB for a CSV, 64 MiB for the choices
cache, the shard and job lists and a JSON context): a FIFO or a device is refused at
once, never waited on.

Names are restricted to what torch module paths hold (docs/config.md), so no name can
start a spreadsheet formula. Any other text cell that starts with `=`, `+`, `-`, `@`, a
tab or a carriage return and is not a number (a note quoting a library's message, say)
is written with a leading apostrophe, as OWASP advises against CSV injection.

## The JSON run context

Beside `results.csv`, `results.json` records how the numbers were made: the command
line, UTC date, host, OS, CPU model and online cores, layerbench version, git
revision (with `-dirty` for uncommitted changes) and build type, the compiler, the
libyaml and Google Benchmark versions, the timing options and seed, and per backend
its own description (CPU: threads, OpenBLAS configuration and threading mode, the
OpenMP spin setting; CUDA: device, its UUID (`GPU-...`, as `nvidia-smi -L` prints it),
the driver's version (NVML's, else the CUDA version the driver supports), compute
capability, SM clock at start and end, driver and runtime CUDA versions, cuDNN and
cuBLAS versions, math mode, L2 and flush sizes), plus any backend that was asked for and
skipped, with why. A run inside a Slurm job also has `slurm`: `job_id`, `array_job_id`,
`array_task_id`, `node` (`SLURMD_NODENAME`), `cluster` and `partition` (null where Slurm
did not set them); `bench merge` turns them into columns ([slurm.md](slurm.md)). `state` is `complete`, `running` (a
checkpoint of a run still going, or killed), `interrupted` (with `interrupted` saying
where: batch, backend, mode and layer) or `failed`; `completed` lists the finished
(backend, batch, dtype, pass and a decoder's token shape) sets, each with `rows`, how many CSV rows it wrote (what `--resume` and
`bench merge` check a set against), and `resumed_sets` how many came from the file
`--resume` read (listed first).
Each finished set has a `measurement` list, one object per timing mode:

```json
{"mode": "auto", "processes": 3, "process_spread_pct": {"median": 3.389, "max": 45.323},
 "canary_us": 58.1270, "canary_drift_pct": 6.668, "canary_rounds": 21, "timed_rows": 69,
 "contended_rows": 0, "processes_set_aside": 0, "set_aside_slower_pct": 0.0,
 "contention": "", "stream_bytes_per_s": null}
```

`stream_bytes_per_s` is null except for a decoder's decode step measured with the
peaks: then `{"median": 2.9992e+10, "min": 2.7999e+10, "max": 4.3405e+10, "rounds": 15}`, the
read stream timed at the start of rounds (the CSV's `stream_gbytes_per_s` is its
median), which the console's memory limit per token uses.

`processes_set_aside` counts the workers that ran in a slow phase of the machine (their
layers took more than `--phase-band` (5%) longer in all than the fastest worker's) and
were replaced; `set_aside_slower_pct` says how much longer. `options` has `processes`,
`phase_band_pct` (5; null with `--phase-band off`), `disturbed_share` (0.01) and `algo_cache` (null with `--algo-cache none`):
`{"path": "/root/.cache/layerbench/choices.tsv", "taken": 11, "other_context": 0, "malformed": 0}`,
how many choices the file gave this run and how many lines it left unused because they
were made under another context (another CPU, libraries, thread count or settings).
Runs that save into one choices file at once take turns under a lock (`FILE.lock`,
`flock`), each merging its choices into what the last one wrote, so none is lost.
The choices file is text: a header line, then one choice a line, `context<TAB>layer
key<TAB>choice`, e.g. `cpu | AMD EPYC, family 26, model 2, stepping 1 | ... | {"threads": 2,
...}<TAB>conv2d 1x3x224x224 out_channels=64 kernel_size=7x7 stride=2x2
padding=3x3 bias=false<TAB>8 0 9` (the cpu backend's path, its size parameter and how
many candidates it was chosen from; a choice whose candidate count no longer matches is
stale and searched again).

The JSON above is from a default `bench run configs/resnet18.yaml` (its second run, which
took the first's choices) on the 2-vCPU AMD EPYC VM (Zen 5, `OPENBLAS_CORETYPE` unset).
TAIL
