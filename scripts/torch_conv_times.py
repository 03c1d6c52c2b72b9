#!/usr/bin/env python3
"""Times every conv2d of a layerbench config alone in PyTorch on the GPU, the way
layerbench's cuda backend does in its "batch" mode, for a side-by-side comparison.

usage: build/bench list configs/resnet18.yaml --batch 32 --csv - > layers.csv
       python3 scripts/torch_conv_times.py layers.csv [--tf32] > torch_convs.csv

Each convolution is an nn.Conv2d with the layer's parameters, in eval mode, on random
input; torch.backends.cudnn.benchmark = True (cuDNN's timed algorithm search, like
layerbench's --algo search); TF32 off unless --tf32. After a warm-up, CUDA events
time 20 samples of N back-to-back launches (N chosen so a sample lasts about 1 ms)
and the median per launch is printed as CSV: layer_index, layer_name, median_us.
"""
import csv
import statistics
import sys

import torch


def parse_parameters(text):
    """'out_channels=64 kernel_size=3x3 stride=2x2 padding=1x1 bias=false' -> dict"""
    out = {}
    for item in text.split():
        key, value = item.split("=", 1)
        if "x" in value and key != "bias":
            out[key] = tuple(int(v) for v in value.split("x"))
        elif value in ("true", "false"):
            out[key] = value == "true"
        else:
            out[key] = int(value)
    return out


def time_module(module, x):
    with torch.no_grad():
        for _ in range(10):
            module(x)
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        module(x)
        stop.record()
        stop.synchronize()
        once = max(start.elapsed_time(stop) / 1e3, 1e-7)
        launches = max(1, min(1000, int(1e-3 / once)))
        samples = []
        for _ in range(20):
            start.record()
            for _ in range(launches):
                module(x)
            stop.record()
            stop.synchronize()
            samples.append(start.elapsed_time(stop) / 1e3 / launches)
    return statistics.median(samples)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    tf32 = "--tf32" in sys.argv
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    writer = csv.writer(sys.stdout)
    writer.writerow(["layer_index", "layer_name", "median_us"])
    with open(sys.argv[1], newline="") as f:
        for row in csv.DictReader(f):
            if row["kind"] != "conv2d":
                continue
            n, c, h, w = (int(v) for v in row["input_shape"].split("x"))
            p = parse_parameters(row["parameters"])
            conv = torch.nn.Conv2d(c, p["out_channels"], p["kernel_size"], stride=p.get("stride", 1),
                                   padding=p.get("padding", 0), dilation=p.get("dilation", 1),
                                   groups=p.get("groups", 1), bias=p.get("bias", True)).cuda().eval()
            x = torch.rand(n, c, h, w, device="cuda") * 2 - 1
            writer.writerow([row["layer_index"], row["layer_name"], f"{time_module(conv, x) * 1e6:.3f}"])


if __name__ == "__main__":
    main()
