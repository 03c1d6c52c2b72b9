#!/usr/bin/env python3
"""Our per-layer figures beside torch.profiler's, the anchor users already trust.

usage:
  build/bench list CONFIG --batch N --csv layers.csv
  build/bench run CONFIG --batch N --backend all --threads T --csv run.csv
  /usr/bin/python3 scripts/torch_profile_compare.py --layers layers.csv --bench run.csv \\
      --threads T [--backend cpu,onednn] [--iters 30] [--out compare.md] [--csv compare.csv]
  (--pass backward: run.csv from bench run --pass backward; torch's convolution_backward
  calls of a training step beside our convolutions' backward rows; --pass train: run.csv
  from bench run --pass train; torch's whole eager training step beside our chained one,
  and its convolution_backward calls beside our convolutions' backward inside the step)

The model is rebuilt in PyTorch from `bench list --csv`, as scripts/torch_compare.py
rebuilds it (the same modules, shapes and graph; float32 (bf16 with --dtype bf16), eval mode, on the CPU with
PyTorch on T threads, OpenBLAS inside it on --blas-threads, one by default). After 10
forwards it runs --iters
more under torch.profiler (record_shapes) and reads
key_averages(group_by_input_shape=True): each convolution is an aten::conv2d and each
linear layer an aten::linear call, told apart by their input and weight shapes; a
multihead_attention layer (several aten calls inside nn.MultiheadAttention) is the
record_function scope the forward puts around it. Our layers are grouped the same way
(kind, input shape, weight shape), and each group's mean per call is set beside
torch's: our in-model figure (the layer inside the chained forward) and our alone
figure (the layer timed by itself), for each backend of run.csv, and their ratios to
torch's. A layer of ours torch has no call for, or a torch call that matches no layer
of ours, is listed, never dropped. The forward: torch's eager forward (timed without
the profiler, median of 30) and its mean under the profiler, beside our chained
median.

With --pass backward the modules run in training mode (batch norm on the batch's
statistics) on an input that requires its gradient, and each iteration is a forward
and a backward of a random output gradient under the profiler; each convolution's
aten::convolution_backward call (its input's and its weight's gradients, and its
bias's) is set beside our backward row of that convolution, timed alone (there is no
in-model backward in a backward run). The step's line is torch's eager forward and
backward.

With --pass train, torch runs the step as our chained train row does: the modules in
training mode, the input without a gradient, the forward, the loss (cross-entropy over
the last linear's logits against random labels, else a weighted sum of the output with
random weights), and the loss's backward; each aten::convolution_backward call beside
the backward of our convolution inside our step (its in-model part rows: "backward", or
"backward data" and "backward weights" summed), and the step's eager median beside our
chained step's; each step sets the parameters' gradients to None first (zero_grad), so
that torch writes them afresh as ours are. --freeze PATTERNS freezes the same layers'
parameters in torch as bench run --freeze does in ours (fine-tuning); --optimizer sgd or
adamw adds torch's single-tensor optimizer step at a learning rate of 0, as bench run
--optimizer times ours.

What torch's figure holds: the whole aten call, as the profiler's CPU total counts it
(its dispatch, any layout reorder inside the call, the output's allocation), on the
model's own data flow, so it is an in-model figure. Where ours and torch's differ by
more than 20% the markdown says so and leaves the why to the reader's notes (a
reorder inside torch's call, framework overhead, another kernel).

Needs torch (Debian: python3-torch); runs with /usr/bin/python3."""
import argparse
import fnmatch
import csv
import io
import os
import statistics
import sys
import time

# --blas-threads N, read before torch is loaded: OpenBLAS's threads inside PyTorch (1 by
# default, as scripts/torch_compare.py runs it), and with more than one OpenMP's threads
# sleeping when idle (OMP_WAIT_POLICY=PASSIVE), so that the two pools take turns
for i, a in enumerate(sys.argv):
    n = a.split("=", 1)[1] if a.startswith("--blas-threads=") else \
        sys.argv[i + 1] if a == "--blas-threads" and i + 1 < len(sys.argv) else None
    if n is not None and os.environ.get("OPENBLAS_NUM_THREADS") != n:
        if not n.isdigit() or int(n) < 1:
            sys.exit(f"torch_profile_compare: --blas-threads expects a whole number of at least 1, got '{n}'")
        env = {**os.environ, "OPENBLAS_NUM_THREADS": n}
        if int(n) > 1:
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_compare as tc  # noqa: E402 (re-runs the script with its settings, then imports torch)
import torch_export  # noqa: E402 (write_file)
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

KINDS = {"conv2d": "aten::conv2d", "linear": "aten::linear"}
# --pass backward: the convolutions' backward, whose input shapes are (grad_output, input,
# weight, ...): their input and weight shapes at 1 and 2
BACKWARD_KINDS = {"conv2d": "aten::convolution_backward"}


def weight_shape(kind, p, in_shape):
    if kind == "conv2d":
        k = p["kernel_size"] if isinstance(p["kernel_size"], tuple) else (p["kernel_size"],) * 2
        return (p["out_channels"], in_shape[1] // p.get("groups", 1)) + tuple(k)
    if kind == "linear":
        return (p["out_features"], in_shape[-1])
    return ()


def group_key(kind, in_shape, w_shape):
    return kind, tuple(in_shape), tuple(w_shape)


def key_text(key):
    kind, x, w = key
    return f"{kind} {'x'.join(map(str, x))}" + (f" w {'x'.join(map(str, w))}" if w else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", required=True, help="bench list --csv output")
    ap.add_argument("--bench", required=True, help="bench run --csv output (with its in-model rows)")
    ap.add_argument("--backend", help="backends of run.csv to set beside torch (default: every one in it)")
    ap.add_argument("--threads", type=int, required=True, help="PyTorch's threads: give bench run the same --threads")
    ap.add_argument("--iters", type=int, default=30, help="forwards under the profiler (default 30)")
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="OpenBLAS's threads inside PyTorch (default 1; Debian's torch runs nn.Linear through OpenBLAS, "
                         "so give a GEMM-bound model such as BERT --threads here; its convolutions run on oneDNN's "
                         "OpenMP threads, whose idle ones then sleep)")
    ap.add_argument("--pass", dest="pass_", choices=("forward", "backward", "train"), default="forward",
                    help="forward (default); backward: torch's convolution_backward calls of a training step "
                         "beside the backward rows of run.csv (bench run --pass backward); train: torch's eager "
                         "training step beside our chained one (bench run --pass train), its convolution_backward "
                         "calls beside our convolutions' backward inside the step")
    ap.add_argument("--optimizer", choices=("none", "sgd", "adamw"), default="none",
                    help="with --pass train: torch's optimizer step after the backward (foreach=False, lr 0), as bench "
                         "run --optimizer times ours")
    ap.add_argument("--freeze", help="with --pass train: comma-separated shell patterns of layer names whose "
                    "parameters torch freezes (requires_grad False), as bench run --freeze PATTERN")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="the model's dtype: fp32 (default), or bf16 (torch's modules and tensors cast to bfloat16, "
                         "as model.to(torch.bfloat16) trains; our rows of that dtype)")
    ap.add_argument("--out", help="the markdown table (default stdout)")
    ap.add_argument("--csv", help="the same as CSV")
    args = ap.parse_args()
    if args.iters < 1:
        sys.exit("torch_profile_compare: --iters must be at least 1")
    for what, path in (("--layers", args.layers), ("--bench", args.bench)):
        if not os.path.isfile(path):  # a FIFO would be waited on forever
            sys.exit(f"torch_profile_compare: {what} {path}: not a regular file")
    for what, path in (("--out", args.out), ("--csv", args.csv)):
        if path:  # refused before the work, not after it
            torch_export.check_output(path, what, prog="torch_profile_compare")
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    tdtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32

    rows = torch_export.read_csv(args.layers, "--layers", prog="torch_profile_compare")
    if not rows:
        sys.exit(f"torch_profile_compare: {args.layers} has no layers")
    batch = rows[0]["batch"]
    layers = []  # (row, module, key)
    for r in rows:
        p, x = tc.parse_parameters(r["parameters"]), tc.shape(r["input_shape"])
        m = tc.make_module(r["kind"], p, x).eval().to(tdtype)
        layers.append((r, m, group_key(r["kind"], x, weight_shape(r["kind"], p, x))))

    # ours: per backend, per layer index, the in-model and the alone median
    ours, backends = {}, []
    for r in torch_export.read_csv(args.bench, "--bench", prog="torch_profile_compare"):
        # a layer's backward inside the step: its part "backward", or its halves "backward data" and
        # "backward weights" (conv2d, linear), summed below
        train_part = args.pass_ == "train" and r["mode"] == "inmodel" and r.get("part", "").startswith("backward")
        if r["batch"] != batch or (r.get("part") and not train_part) or r.get("dtype", "fp32") != args.dtype or \
                r["status"] != "ok" or r.get("pass", "forward") != args.pass_:
            continue
        if args.pass_ == "train" and r["kind"] != "model" and not train_part:
            continue  # a train row alone is its forward and backward together: torch has no such call
        if r["backend"] not in backends:
            backends.append(r["backend"])
        side = "inmodel" if r["mode"] == "inmodel" else "chained" if r["kind"] == "model" else "alone"
        if r["kind"] == "model" and r["mode"] != "chained":
            continue
        # the first alone row of a layer (a run of several --mode gives one per mode); a backward's halves summed
        got = ours.setdefault(r["backend"], {})
        if train_part:
            got[(side, r["layer_index"])] = got.get((side, r["layer_index"]), 0.0) + float(r["median_us"])
        else:
            got.setdefault((side, r["layer_index"]), float(r["median_us"]))
    if args.backend:
        wanted = args.backend.split(",")
        missing = [b for b in wanted if b not in backends]
        if missing:
            sys.exit(f"torch_profile_compare: {args.bench} has no {args.dtype} rows of backend {', '.join(missing)} at "
                     f"batch {batch}")
        backends = wanted
    if not backends:
        sys.exit(f"torch_profile_compare: {args.bench} has no {args.dtype} {args.pass_} rows at the layers' batch {batch}")

    backward, train = args.pass_ != "forward", args.pass_ == "train"
    kinds = BACKWARD_KINDS if backward else KINDS
    x0 = (torch.rand(tc.shape(rows[0]["input_shape"])) * 2 - 1).to(tdtype)
    if backward:  # batch norm on the batch's statistics, dropout's mask drawn
        x0.requires_grad_(not train)  # a backward run's every input gradient; a step's none for the input
        for _, m, _ in layers:
            m.train()
    if args.freeze:  # fine-tuning: the matched layers' parameters learn nothing, as bench run --freeze
        pats = [p for p in args.freeze.split(",") if p]
        for r, m, _ in layers:
            if any(fnmatch.fnmatchcase(r["layer_name"], p) for p in pats):
                for w in m.parameters():
                    w.requires_grad_(False)
    inputs = [[int(i) for i in r["inputs"].lstrip("'").split()] for r in rows]

    def forward():
        values = {-1: x0}
        for i, (r, m, key) in enumerate(layers):
            args_ = [values[j] for j in inputs[i]]
            if r["kind"] == "multihead_attention":  # several aten calls: one scope, named by its shape
                with record_function(key_text(key)):
                    values[i] = m(*args_)
            else:
                values[i] = m(*args_)
        return values[len(layers) - 1]

    grad_out = None

    labels = None
    params = [w for _, m, _ in layers for w in m.parameters() if w.requires_grad]
    optimizer = None
    if args.optimizer != "none":  # single-tensor (foreach=False) at lr 0, as bench run --optimizer times it
        make = torch.optim.SGD if args.optimizer == "sgd" else torch.optim.AdamW
        optimizer = make(params, lr=0.0, foreach=False)

    def step():  # the forward; with --pass backward the backward of a fixed random gradient; train: a loss's
        nonlocal grad_out, labels
        if train:  # gradients written afresh each step, as ours are (zero_grad(set_to_none=True))
            for w in params:
                w.grad = None
        y = forward()
        if train and layers[-1][0]["kind"] == "linear":
            if labels is None:
                labels = torch.randint(0, y.shape[-1], y.shape[:-1])
            torch.nn.functional.cross_entropy(y.reshape(-1, y.shape[-1]), labels.reshape(-1), reduction="sum").backward()
        elif backward:
            if grad_out is None:
                grad_out = (torch.rand(y.shape) * 2 - 1).to(tdtype)
            (y * grad_out).sum().backward() if train else y.backward(grad_out)
        if optimizer is not None:
            optimizer.step()

    with torch.set_grad_enabled(backward):
        for _ in range(10):
            step()
        eager = []
        for _ in range(30):
            t0 = time.perf_counter()
            step()
            eager.append(time.perf_counter() - t0)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(args.iters):
                with record_function("forward"):
                    step()
    events = prof.key_averages(group_by_input_shape=True)

    # torch's calls per group: mean us per call, calls per forward
    torch_groups, unmatched_torch, profiled = {}, [], None
    scopes = {key_text(k): k for _, _, k in layers if k[0] == "multihead_attention"}
    for e in events:
        if e.key == "forward":
            profiled = e.cpu_time_total / e.count
            continue
        kind = next((k for k, op in kinds.items() if op == e.key), None)
        if kind:
            shapes = [tuple(s) for s in e.input_shapes][1 if backward else 0:]
            key = group_key(kind, shapes[0], shapes[1] if len(shapes) > 1 else ())
        elif e.key in scopes:
            key = scopes[e.key]
        else:
            continue
        g = torch_groups.setdefault(key, [0.0, 0])
        g[0] += e.cpu_time_total
        g[1] += e.count

    ours_groups = {}
    for r, m, key in layers:
        if r["kind"] in kinds or (r["kind"] == "multihead_attention" and not backward):
            ours_groups.setdefault(key, []).append(r["layer_index"])
    for key in torch_groups:
        if key not in ours_groups:
            unmatched_torch.append(key)

    def mean(b, side, idx):
        v = [ours.get(b, {}).get((side, i)) for i in idx]
        return statistics.fmean(v) if all(x is not None for x in v) else None

    head = ["group", "our layers", "torch calls per forward", "torch us per call"]
    for b in backends:
        head += [f"{b} in-model us", f"{b} alone us", f"{b} in-model / torch", f"{b} alone / torch"]
    head.append("note")
    table, sums = [], {}
    for key, idx in ours_groups.items():
        t = torch_groups.get(key)
        per_call = t[0] / t[1] if t and t[1] else None
        calls = t[1] / args.iters if t else 0
        cells = [key_text(key), str(len(idx)), f"{calls:g}", f"{per_call:.3f}" if per_call else "no torch call"]
        far = False
        if train and not t and all(mean(b, "inmodel", idx) is None for b in backends):
            # frozen with nothing before it learning (--freeze): neither side runs its backward
            table.append((cells[:3] + ["no backward on either side"] + ["-"] * (4 * len(backends)) + [""], False))
            continue
        for b in backends:
            inm, alone = mean(b, "inmodel", idx), mean(b, "alone", idx)
            cells += [f"{inm:.3f}" if inm else "-", f"{alone:.3f}" if alone else "-"]
            for v in (inm, alone):
                cells.append(f"{v / per_call:.3f}" if v and per_call else "-")
            far |= bool(inm and per_call and abs(inm / per_call - 1) > 0.2)
            s = sums.setdefault((key[0], b), [0.0, 0.0, 0.0, 0])
            s[0] += (inm or 0) * len(idx)
            s[1] += (alone or 0) * len(idx)
            s[2] += (per_call or 0) * len(idx)
            has = inm if train else (inm or backward) and alone  # train: the backward inside the step only
            s[3] += 0 if has and per_call else len(idx)  # layers without a figure: no sum
        cells.append("in-model over 20% from torch" if far else "")
        table.append((cells, far))

    out = io.StringIO() if args.out else sys.stdout
    print(f"{'Backward inside a training step' if train else 'Backward' if backward else 'Forward'} per call, batch {batch}, {args.threads} thread(s), OpenBLAS inside torch on "
          f"{os.environ.get('OPENBLAS_NUM_THREADS')} (OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY', 'unset')}); torch "
          f"{torch.__version__}, {args.iters} forwards under torch.profiler (CPU total per aten call, grouped by input "
          f"shape).\n", file=out)
    print("| " + " | ".join(head) + " |", file=out)
    print("|" + "---|" * len(head), file=out)
    for cells, far in table:
        print("| " + " | ".join(cells) + " |", file=out)
    print("", file=out)
    print("| sums per forward | " + " | ".join(f"{b} in-model | {b} alone" for b in backends) + " | torch |", file=out)
    print("|---|" + "---|---|" * len(backends) + "---|", file=out)
    for kind in ("conv2d", "linear", "multihead_attention"):
        if any((kind, b) in sums for b in backends):
            cells = [f"{'-' if backward and not train else f'{sums[(kind, b)][0] / 1e3:.3f} ms'} | "
                     f"{'-' if train else f'{sums[(kind, b)][1] / 1e3:.3f} ms'}"
                     if not sums[(kind, b)][3]
                     else f"- | - ({sums[(kind, b)][3]} layers without a figure)" for b in backends]
            print(f"| {kind} | " + " | ".join(cells) + f" | {sums[(kind, backends[0])][2] / 1e3:.3f} ms |", file=out)
    chained = [ours.get(b, {}).get(("chained", "-1")) for b in backends]
    what = "the training step (ours: chained median; torch: eager forward, loss and backward" if train else \
        "the training step (torch: eager forward and backward" if backward else \
        "the forward (ours: chained median; torch: eager median"
    print(f"| {what}, and mean under the profiler) | " +
          " | ".join(f"{c / 1e3:.3f} ms | -" if c else "- | -" for c in chained) +
          f" | {statistics.median(eager) * 1e3:.3f} ms ({profiled / 1e3:.3f} ms profiled) |", file=out)
    if unmatched_torch:
        print("\ntorch calls no layer of ours matches (inside a layer of another kind): " +
              "; ".join(key_text(k) for k in unmatched_torch), file=out)
    missing = [key_text(k) for k, (cells, _) in zip(ours_groups, table) if cells[3] == "no torch call"]
    if missing:
        print("\nlayers of ours torch made no call for: " + "; ".join(missing), file=out)
    # whole or not at all, never through a link planted at the temporary name
    if args.out:
        torch_export.write_file(args.out, out.getvalue(), "--out", prog="torch_profile_compare")
    if args.csv:
        text = io.StringIO()
        w = csv.writer(text)
        w.writerow(head)
        for cells, _ in table:
            w.writerow(cells)
        torch_export.write_file(args.csv, text.getvalue(), "--csv", prog="torch_profile_compare")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
