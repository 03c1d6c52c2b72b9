#!/usr/bin/env python3
"""Times a layerbench model in PyTorch, layer by layer and as a whole forward, and writes
a side-by-side CSV with layerbench's own figures.

usage:
  build/bench list CONFIG --batch N --csv layers.csv
  build/bench run CONFIG --batch N --backend cuda --csv run.csv
  python3 scripts/torch_compare.py --layers layers.csv --bench run.csv [--dtype bf16] [--out compare.csv]

The model is rebuilt from `bench list --csv` (kind, shapes, parameters and the `inputs`
column that says which layers feed which), as torch.nn modules in eval mode, float32,
with torch.backends.cudnn.benchmark = True (cuDNN's timed algorithm search, like
layerbench's --algo search) and TF32 off unless --dtype tf32 (or --tf32).

--dtype fp32|tf32|bf16|fp16 runs PyTorch in that dtype as layerbench's --dtype does:
modules and inputs converted with .to(dtype), no autocast (it adds casts of its own),
and compares with the layerbench rows of that dtype. --channels-last gives 4-d modules
and inputs torch.channels_last, the layout cuDNN's tensor-core convolutions take: on
by default on cuda for bf16 and fp16 (what model.half().to(memory_format=
torch.channels_last) runs), off on the CPU, where PyTorch 1.13's bf16 convolutions run
through oneDNN on either layout.

- Each layer alone, as layerbench's cuda "batch" mode does: after a warm-up, N calls
  (N chosen so that they last about 1 ms) are captured in one CUDA graph, and CUDA
  events time 25 replays; the median per call is GPU time, not launch time. The CUDA
  kernels one call runs (from torch.profiler) name the algorithm PyTorch got.
- The whole forward: eager (one Python forward per sample, launch costs included, as
  users run it) and captured as one CUDA graph; 50 samples each, median.

The output has one row per layer and one per forward: name, kind, layerbench's median
and mode, PyTorch's median, their ratio (layerbench / PyTorch: above 1 means layerbench
measured more time), the cuDNN algorithm or engine layerbench chose and the kernels
its call ran (its CSV's kernels column), and PyTorch's: the engine its cudnn.benchmark
search chose (torch_engine, the fastest plan cudnn-frontend logged while the layer's
first calls searched; empty where PyTorch used no graph-API plan) and its kernels.
On the CPU (--device cpu --backend cpu --mode any --threads N), the same with a host
clock: each layer alone, as many calls per sample as last about 1 ms, and the eager
forward, PyTorch on N threads (give bench the same --threads), e.g.

  build/bench run configs/resnet18.yaml --threads 2 --csv run.csv
  /usr/bin/python3 scripts/torch_compare.py --layers layers.csv --bench run.csv \
      --device cpu --backend cpu --mode any --threads 2 --out compare.csv

The script re-runs itself once with two settings unless the environment has them:
- OPENBLAS_NUM_THREADS=1: OpenBLAS on one thread inside PyTorch, as MKL runs sequentially
  inside PyTorch's own builds. Debian's torch links the pthreads OpenBLAS, whose threads
  and PyTorch's OpenMP threads otherwise fight over the cores (on a 2-vCPU VM, a 7x7
  convolution took 10.5 ms with both pools and 0.69 ms with OpenBLAS on one thread).
- glibc's malloc keeping freed memory (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_,
  MALLOC_TOP_PAD_; blocks up to 32 MiB, glibc's most), as jemalloc or tcmalloc would in
  a CPU deployment: eager PyTorch allocates every output anew, and a multi-MB block
  from mmap is page-faulted in on every call (a batch norm on 64x56x56 measured
  1.1-1.3 ms that way, 31 us with the memory kept), which times the VM's page faults,
  not the layer. layerbench's buffers are allocated at setup.
"""
import argparse
import csv
import io
import os
import re
import statistics
import sys
import time

# the settings above, before torch and glibc read them: once, by running again; and
# cudnn-frontend's log, where PyTorch's cudnn.benchmark search writes each plan it timed
# ("Plan eng28_k2=3 took 0.0123"): the engine PyTorch chose for each layer is the fastest
# of those its first calls logged (torch_engine)
_SETTINGS = {"OPENBLAS_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "33554432",
             "MALLOC_TRIM_THRESHOLD_": "68719476736", "MALLOC_TOP_PAD_": "268435456",
             "CUDNN_FRONTEND_LOG_INFO": "1",
             "CUDNN_FRONTEND_LOG_FILE": os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                     f"torch_compare_cudnn_{os.getpid()}.log")}
if any(k not in os.environ for k in _SETTINGS):
    os.execve(sys.executable, [sys.executable] + sys.argv, {**_SETTINGS, **os.environ})
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_export  # noqa: E402 (write_file)


def pair(v):
    a, b = v.split("x")
    return (int(a), int(b))


def parse_parameters(text):
    """'out_channels=64 kernel_size=3x3 padding=1x1 bias=false' -> dict of typed values"""
    out = {}
    if text == "-":
        return out
    for item in text.split():
        key, value = item.split("=", 1)
        if value in ("true", "false"):
            out[key] = value == "true"
        elif "x" in value and value.replace("x", "").isdigit():
            out[key] = pair(value)
        else:
            for kind in (int, float, str):  # approximate=tanh stays a name
                try:
                    out[key] = kind(value)
                    break
                except ValueError:
                    pass
    return out


def shape(text):
    return tuple(int(v) for v in text.split("x"))


class Add(nn.Module):
    def forward(self, a, b):
        return a + b


class SelfAttention(nn.Module):
    """layerbench's multihead_attention: self-attention, batch first, no weights returned."""
    def __init__(self, embed_dim, num_heads, bias):
        super().__init__()
        self.mha = nn.MultiheadAttention(embed_dim, num_heads, bias=bias, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


class Flatten(nn.Module):
    def forward(self, x):
        return torch.flatten(x, 1)


def make_module(kind, p, in_shape):
    """The torch.nn module a layerbench layer describes."""
    if kind == "conv2d":
        return nn.Conv2d(in_shape[1], p["out_channels"], p["kernel_size"], stride=p.get("stride", 1),
                         padding=p.get("padding", 0), dilation=p.get("dilation", 1), groups=p.get("groups", 1),
                         bias=p.get("bias", True))
    if kind == "batchnorm2d":
        m = nn.BatchNorm2d(in_shape[1], eps=p.get("eps", 1e-5), affine=p.get("affine", True))
        with torch.no_grad():  # running statistics that are not the identity
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.25, 2.0)
        return m
    if kind in ("relu", "relu6", "sigmoid"):
        return {"relu": nn.ReLU, "relu6": nn.ReLU6, "sigmoid": nn.Sigmoid}[kind]()
    if kind == "maxpool2d":
        return nn.MaxPool2d(p["kernel_size"], stride=p.get("stride"), padding=p.get("padding", 0),
                            dilation=p.get("dilation", 1), ceil_mode=p.get("ceil_mode", False))
    if kind == "avgpool2d":
        return nn.AvgPool2d(p["kernel_size"], stride=p.get("stride"), padding=p.get("padding", 0),
                            ceil_mode=p.get("ceil_mode", False), count_include_pad=p.get("count_include_pad", True))
    if kind == "adaptive_avgpool2d":
        return nn.AdaptiveAvgPool2d(p["output_size"])
    if kind == "flatten":
        return Flatten()
    if kind == "linear":  # over the last dimension, as layerbench's
        return nn.Linear(in_shape[-1], p["out_features"], bias=p.get("bias", True))
    if kind == "layernorm":
        return nn.LayerNorm(p.get("normalized_shape", in_shape[-1]), eps=p.get("eps", 1e-5),
                            elementwise_affine=p.get("elementwise_affine", True))
    if kind == "gelu":
        return nn.GELU(approximate=p.get("approximate", "none"))
    if kind == "multihead_attention":
        return SelfAttention(p["embed_dim"], p["num_heads"], p.get("bias", True))
    if kind == "dropout":
        return nn.Dropout(p.get("p", 0.5))
    if kind == "softmax":
        return nn.Softmax(dim=p.get("dim", 1))
    if kind == "add":
        return Add()
    raise ValueError(f"no torch module for kind '{kind}'")


class Timer:
    """Median seconds of fn() over samples; CUDA events on a GPU, the host clock on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def sample(self, fn):
        if self.cuda:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            return start.elapsed_time(stop) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def median(self, fn, samples):
        return statistics.median(self.sample(fn) for _ in range(samples))


def kernels_of(fn, device):
    """The CUDA kernels one call runs, joined with '+' (empty on the CPU)."""
    if device.type != "cuda":
        return ""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return "+".join(dict.fromkeys(n.split("<")[0][:60] for n in names))


def frontend_log_size():
    try:
        return os.path.getsize(os.environ.get("CUDNN_FRONTEND_LOG_FILE", ""))
    except OSError:
        return 0


def engine_since(offset):
    """The tag of the fastest plan cudnn-frontend logged past offset, or ""."""
    path = os.environ.get("CUDNN_FRONTEND_LOG_FILE", "")
    try:
        with open(path, errors="replace") as f:
            f.seek(offset)
            text = f.read()
    except OSError:
        return ""
    timed = [(float(t), tag) for tag, t in re.findall(r"Plan (\S+) took\s+([0-9.eE+-]+)", text)]
    return min(timed)[1] if timed else ""


def time_layer(module, args, timer, device):
    call = lambda: module(*args)
    logged = frontend_log_size()
    for _ in range(10):  # warm-up; with cudnn.benchmark the algorithm search happens here
        call()
    engine = engine_since(logged) if device.type == "cuda" else ""
    if device.type == "cuda":
        torch.cuda.synchronize()
    once = max(min(timer.sample(call) for _ in range(5)), 1e-7)
    n = max(1, min(1000, int(1e-3 / once)))
    note = f"{n} calls per sample"
    run = lambda: [call() for _ in range(n)]
    if device.type == "cuda":
        try:
            graph = torch.cuda.CUDAGraph()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                run()  # warm-up on the capture stream
            torch.cuda.current_stream().wait_stream(stream)
            with torch.cuda.graph(graph):
                run()
            run = graph.replay
            note += ", captured as one CUDA graph"
        except RuntimeError as e:  # a module that cannot be captured is timed from the stream
            note += f", from the stream (graph capture failed: {str(e)[:60]})"
    return timer.median(run, 25) / n, note, kernels_of(call, device), engine


def main():
    log = os.environ.get("CUDNN_FRONTEND_LOG_FILE", "")
    if os.path.basename(log).startswith("torch_compare_cudnn_"):  # ours, not one the user asked for
        import atexit
        atexit.register(lambda: os.path.exists(log) and os.remove(log))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", required=True, help="bench list --csv output")
    ap.add_argument("--bench", help="bench run --csv output to compare with")
    ap.add_argument("--backend", default="cuda",
                    help="layerbench backend rows to compare (default cuda); several, comma-separated "
                         "(cpu,onednn), give a column set each beside one PyTorch timing")
    ap.add_argument("--mode", default="batch",
                    help="layerbench mode of the layer rows (default batch; any: whichever mode each row used)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--threads", type=int, help="PyTorch's CPU threads (default: PyTorch's own choice)")
    ap.add_argument("--tf32", action="store_true", help="the same as --dtype tf32")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "tf32", "bf16", "fp16"],
                    help="PyTorch's dtype, and the layerbench rows compared (default fp32)")
    ap.add_argument("--channels-last", choices=["auto", "on", "off"], default="auto",
                    help="4-d tensors in torch.channels_last (auto: on for bf16 and fp16 on cuda)")
    ap.add_argument("--out", help="CSV to write (default stdout)")
    args = ap.parse_args()
    for what, path in (("--layers", args.layers), ("--bench", args.bench)):
        if path and not os.path.isfile(path):  # a FIFO would be waited on forever
            sys.exit(f"torch_compare: {what} {path}: not a regular file")
    if args.out:  # refused before the work, not after it
        torch_export.check_output(args.out, "--out", prog="torch_compare")

    device = torch.device(args.device)
    if args.tf32:
        args.dtype = "tf32"
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    channels_last = args.channels_last == "on" or (
        args.channels_last == "auto" and device.type == "cuda" and args.dtype in ("bf16", "fp16"))
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = args.dtype == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"

    def tensor(shape_):
        t = (torch.rand(shape_, device=device) * 2 - 1).to(dtype)
        return t.to(memory_format=torch.channels_last) if channels_last and t.dim() == 4 else t
    torch.manual_seed(1)
    timer = Timer(device)

    rows = torch_export.read_csv(args.layers, "--layers", prog="torch_compare")
    backends = args.backend.split(",")
    ours = {b: {} for b in backends}
    if args.bench:
        for r in torch_export.read_csv(args.bench, "--bench", prog="torch_compare"):
            # a sweep's CSV holds several batches: the layers file's only
            if (r["backend"] not in ours or r["batch"] != rows[0]["batch"] or r.get("part") or
                    r.get("dtype", "fp32") != args.dtype):
                continue
            if r["kind"] == "model":
                ours[r["backend"]][("model", r["mode"])] = r
            elif r["mode"] == args.mode or (args.mode == "any" and r["mode"] != "inmodel"):
                ours[r["backend"]][("layer", r["layer_index"])] = r

    modules = []
    for r in rows:
        m = make_module(r["kind"], parse_parameters(r["parameters"]), shape(r["input_shape"]))
        m = m.to(device=device, dtype=dtype).eval()
        if channels_last:
            m = m.to(memory_format=torch.channels_last)
        modules.append(m)

    out_rows = []
    with torch.no_grad():
        for r, m in zip(rows, modules):
            if r["kind"] in ("flatten", "dropout"):
                continue  # views: nothing to time, as in layerbench
            x = [tensor(shape(r["input_shape"])) for _ in r["inputs"].lstrip("'").split()]
            t, note, kernels, engine = time_layer(m, x, timer, device)
            print(f"{r['layer_name']:32s} {r['kind']:20s} {t * 1e6:10.2f} us  {engine} {kernels[:60]}", file=sys.stderr)
            out_rows.append((r["layer_index"], r["layer_name"], r["kind"], t, note, kernels,
                             {b: o.get(("layer", r["layer_index"])) for b, o in ours.items()}, engine))

        # the whole forward
        x0 = tensor(shape(rows[0]["input_shape"]))
        inputs = [[int(i) for i in r["inputs"].lstrip("'").split()] for r in rows]

        def forward():
            values = {-1: x0}
            for i, m in enumerate(modules):
                values[i] = m(*(values[j] for j in inputs[i]))
            return values[len(modules) - 1]

        for _ in range(10):
            forward()
        eager = timer.median(forward, 50)
        out_rows.append(("-1", rows[0]["model"], "model", eager, "eager forward", "",
                         {b: o.get(("model", "chained")) for b, o in ours.items()}, ""))
        if device.type == "cuda":
            graph = torch.cuda.CUDAGraph()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                forward()
            torch.cuda.current_stream().wait_stream(stream)
            with torch.cuda.graph(graph):
                forward()
            replay = timer.median(graph.replay, 50)
            out_rows.append(("-1", rows[0]["model"], "model", replay, "CUDA graph forward", "",
                             {b: o.get(("model", "graph")) for b, o in ours.items()}, ""))

    out = io.StringIO() if args.out else sys.stdout  # a file is written whole at the end, never half
    w = csv.writer(out)
    # one backend: layerbench_* columns; several: <backend>_* columns each
    prefixes = ["layerbench"] if len(backends) == 1 else backends
    head = ["layer_index", "layer_name", "kind", "batch", "dtype"]
    for p in prefixes:
        head += [f"{p}_mode", f"{p}_us"]
    head.append("torch_us")
    for p in prefixes:
        head += ["ratio" if len(backends) == 1 else f"{p}_ratio", f"{p}_impl", f"{p}_kernels"]
    w.writerow(head + ["torch_engine", "torch_kernels", "torch_note"])
    for idx, name, kind, t, note, kernels, mine, engine in out_rows:
        cells, tail = [idx, name, kind, rows[0]["batch"], args.dtype], []
        for b in backends:
            m = mine[b]
            us = float(m["median_us"]) if m and m.get("median_us") else None
            cells += [m["mode"] if m else "", f"{us:.3f}" if us else ""]
            tail += [f"{us / (t * 1e6):.3f}" if us else "", m["impl"] if m else "", m.get("kernels", "") if m else ""]
        w.writerow(cells + [f"{t * 1e6:.3f}"] + tail + [engine, kernels, note])
    if args.out:
        torch_export.write_file(args.out, out.getvalue(), "--out", prog="torch_compare")

    # a summary on stderr, per backend: the convolutions within 10%, their sums, the forwards
    for b in backends:
        convs = [(r, r[6][b]) for r in out_rows if r[2] == "conv2d" and r[6][b] and r[6][b].get("median_us")]
        # the target (issue 41): within 10% of PyTorch's time or faster, i.e. ratio <= 1.10
        ratios = [float(m["median_us"]) / (r[3] * 1e6) for r, m in convs]
        at_or_under = sum(1 for x in ratios if x <= 1.10)
        faster = sum(1 for x in ratios if x < 0.90)
        if convs:
            ours_sum = sum(float(m["median_us"]) for r, m in convs)
            torch_sum = sum(r[3] * 1e6 for r, m in convs)
            print(f"{b}: convolutions within 10% of PyTorch's time or faster: {at_or_under} of {len(convs)} "
                  f"({faster} more than 10% faster); their sum {ours_sum:.1f} us, PyTorch's {torch_sum:.1f} us",
                  file=sys.stderr)
        for idx, name, kind, t, note, kernels, mine, engine in out_rows:
            m = mine[b]
            if kind == "model" and m and m.get("median_us"):
                print(f"{b}: {note}: PyTorch {t * 1e6:.1f} us, layerbench {m['mode']} {float(m['median_us']):.1f} us",
                      file=sys.stderr)


if __name__ == "__main__":
    main()
