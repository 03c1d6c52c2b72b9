#!/usr/bin/env bash
# Prints docs/csv.md from `bench schema`, so the documented columns are the real ones.
# usage: scripts/csv_doc.sh [BENCH] > docs/csv.md    (tests/test_cli.sh checks it)
set -euo pipefail
BENCH=${1:-build/bench}
cat <<'HEAD'
# The results CSV

`bench run --csv FILE` and `bench sweep --csv FILE` write one tidy CSV: one row per
layer per backend per timing mode per batch size; then, once per backend and batch, the
whole forward (`kind` = `model`, mode `chained`, and `graph` where the backend replays
graphs) and, for backends with their own memory, the model input and output copies
(`kind` = `copy`, mode `transfer`). It loads with `pandas.read_csv(FILE)` and no options.
Empty cells mean "not applicable" (a skipped row has no statistics). Shapes are written
`NxCxHxW` so no cell needs quoting; names containing commas or quotes are quoted as
RFC 4180 says. The schema is defined once, in `bench/report_csv.c`; `bench schema`
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

## Files, interruptions and --resume

A regular `--csv` file is replaced atomically (written to `FILE.tmp.PID` beside it, then
renamed over it) after every finished (batch, backend) set, so the file on disk always
holds complete sets, whatever stops the run: a SIGINT, SIGTERM or SIGHUP stops it at the
next layer (exit status 128 + the signal), drops the unfinished set and keeps the rest;
a SIGKILL leaves the last checkpoint. `bench sweep ... --csv FILE --resume` (or `run`)
reads FILE, keeps its rows and measures only the sets it lacks; it refuses a file with
another header or another model. An existing file's permissions are kept and a file the
user may not write is refused; a symbolic link is followed (the file it names is
replaced); stdout (`-`), devices and FIFOs are written in place, without a JSON context.
Paths that cannot work (a directory, a missing folder, the config itself) are refused
before anything is measured, with exit status 2.

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
OpenMP spin setting; CUDA: device, compute capability, SM clock at start and end,
driver, runtime, cuDNN and cuBLAS versions, math mode, L2 and flush sizes), plus any
backend that was asked for and skipped, with why. `state` is `complete`, `running` (a
checkpoint of a run still going, or killed), `interrupted` (with `interrupted` saying
where: batch, backend, mode and layer) or `failed`; `completed` lists the finished
(backend, batch) sets and `resumed_sets` how many came from the file `--resume` read.
TAIL
