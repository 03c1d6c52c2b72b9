#!/usr/bin/env python3
"""Plots of layerbench results (the CSV of `bench run` or `bench sweep`, and the JSON
context beside it), as PNGs a person would put in a report.

usage:
  /usr/bin/python3 scripts/plot.py RESULTS.csv [MORE.csv ...] [--out DIR] [--top N]

Writes into DIR (default: beside the first CSV), for each model:
  <model>_layers_<backend>_b<batch>.png   the N slowest layers alone (default 15),
                                          coloured by kind, with the in-model time
  <model>_scaling.png                     with several batch sizes: items/s of the
                                          chained forward per backend, and the time
                                          per item of each kind of layer
  <model>_roofline_<backend>_b<batch>.png every timed layer on the backend's measured
                                          roofline (needs the peaks: not --no-peaks)
  <model>_cpu_vs_<gpu>_b<batch>.png       each layer's time on the CPU against the GPU,
                                          where both ran
  <model>_decode_<backend>.png            a decoder's sweep over --kv-len (and --batch):
                                          time per step and tokens/s against the cache
                                          length, a line per batch size
A dtype other than fp32, a backward pass and a decoder's token shape (tokens, cached tokens) are part of
each name (..._b1_bf16_t1_kv1024.png), so the sets of a grid do not overwrite each other.
Reads only the CSV (docs/csv.md). Needs matplotlib and pandas (Debian:
python3-matplotlib python3-pandas). Prints the files it wrote.
"""
import argparse
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.patches
    import matplotlib.pyplot as plt
    import pandas as pd
except ImportError as e:
    sys.exit(f"plot.py: {e}: needs matplotlib and pandas (Debian: apt-get install python3-matplotlib "
             f"python3-pandas, then run it with /usr/bin/python3)")

ISOLATED = ("warm", "cold", "batch")

# one colour per kind, stable across plots (the first kinds get the most distinct ones)
KIND_ORDER = ["conv2d", "linear", "batchnorm2d", "relu", "maxpool2d", "add", "adaptive_avgpool2d", "avgpool2d",
              "conv_transpose2d", "concat", "mul", "silu", "hardswish", "hardsigmoid", "sigmoid", "relu6", "tanh",
              "softmax", "upsample", "layernorm", "gelu", "multihead_attention", "flatten", "dropout",
              "stochastic_depth"]


def kind_colour(kind):
    cmap = plt.get_cmap("tab20")
    i = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER) + hash(kind) % 7
    return cmap(i % 20)


def fmt_time(us):
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.1f} us" if us >= 1 else f"{us * 1000:.0f} ns"


def load(paths):
    frames = []
    for p in paths:
        df = pd.read_csv(p, keep_default_na=False, na_values=[""])
        for col in ("model", "backend", "mode", "batch", "layer_name", "kind", "median_us", "status"):
            if col not in df.columns:
                sys.exit(f"plot.py: {p} is not a layerbench results CSV: no '{col}' column")
        df["source"] = os.path.splitext(os.path.basename(p))[0]
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    for col in ("dtype", "tokens", "kv_len", "pass"):  # older CSVs: fp32, no token shape, forward
        if col not in df.columns:
            df[col] = {"dtype": "fp32", "pass": "forward"}.get(col, float("nan"))
    df["dtype"] = df["dtype"].fillna("fp32")
    df["pass"] = df["pass"].fillna("forward")
    # what a set is besides its model, backend and batch: its dtype, pass and token shape
    df["shape"] = [("" if d == "fp32" else f"_{d}") + ("" if p == "forward" else f"_{p}") +
                   ("" if t != t else f"_t{int(t)}_kv{int(k) if k == k else 0}")
                   for d, p, t, k in zip(df["dtype"], df["pass"], df["tokens"], df["kv_len"])]
    # a (model, backend, batch) measured in more than one file: the file names tell them apart
    keys = df.groupby(["model", "backend", "batch", "shape"])["source"].nunique()
    dup = set(keys[keys > 1].index)
    df["tag"] = [sh + (f"_{src}" if (m, b, n, sh) in dup else "") for m, b, n, sh, src in
                 zip(df["model"], df["backend"], df["batch"], df["shape"], df["source"])]
    return df


def isolated_rows(df):
    """Per (model, backend, batch): the layers alone, in the first isolated mode of the run."""
    rows = df[(df["layer_index"] >= 0) & df["mode"].isin(ISOLATED) & (df["status"].isin(["ok", "dedupe"]))]
    return rows


def save(fig, out, name, written):
    path = os.path.join(out, name)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    written.append(path)


def plot_layers(df, out, top, written):
    iso = isolated_rows(df)
    inmodel = df[df["mode"] == "inmodel"]
    for (model, backend, batch, shape, src), g in iso.groupby(["model", "backend", "batch", "shape", "source"]):
        tag = g["tag"].iloc[0]
        g = g.drop_duplicates("layer_index").sort_values("median_us", ascending=False).head(top)
        g = g.iloc[::-1]  # slowest at the top
        im = inmodel[(inmodel["model"] == model) & (inmodel["backend"] == backend) & (inmodel["batch"] == batch) &
                     (inmodel["shape"] == shape) & (inmodel["source"] == src)]
        im = im.set_index("layer_index")["median_us"] if len(im) else None
        fig, ax = plt.subplots(figsize=(9, 0.38 * len(g) + 1.6))
        y = range(len(g))
        ax.barh(y, g["median_us"], color=[kind_colour(k) for k in g["kind"]], height=0.7)
        xs = [im.get(i, float("nan")) if im is not None else float("nan") for i in g["layer_index"]]
        handles = [matplotlib.patches.Patch(color=kind_colour(k), label=k) for k in dict.fromkeys(g["kind"][::-1])]
        if im is not None:
            handles.append(ax.scatter(xs, list(y), marker="|", s=160, color="black", zorder=3,
                                      label="the same layer inside the forward"))
        ax.legend(handles=handles, loc="lower right", fontsize=8)
        ax.set_yticks(list(y))
        ax.set_yticklabels([f"{n}  ({k})" for n, k in zip(g["layer_name"], g["kind"])], fontsize=8)
        right = 0
        for yi, v, w in zip(y, g["median_us"], xs):
            at = max(v, w) if w == w else v
            right = max(right, at)
            ax.text(at, yi, "  " + fmt_time(v), va="center", fontsize=7)
        ax.set_xlabel("median time per call, alone (microseconds)")
        ax.set_xlim(0, right * 1.2)
        total = iso[(iso["model"] == model) & (iso["backend"] == backend) & (iso["batch"] == batch) &
                    (iso["shape"] == shape) & (iso["source"] == src)]
        total = total.drop_duplicates("layer_index")["median_us"].sum()
        ax.set_title(f"{model} on {backend}, batch {batch}{describe(g)}: the {len(g)} slowest layers "
                     f"({100 * g['median_us'].sum() / total:.0f}% of {fmt_time(total)})", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        save(fig, out, f"{model}_layers_{backend}_b{batch}{tag}.png", written)


def describe(g):
    """", bf16, 1 token after 1024 cached" for a set's title."""
    r = g.iloc[0]
    text = ("" if r["dtype"] == "fp32" else f", {r['dtype']}") + ("" if r["pass"] == "forward" else f", {r['pass']}")
    if r["tokens"] == r["tokens"]:
        kv = int(r["kv_len"]) if r["kv_len"] == r["kv_len"] else 0
        text += f", {int(r['tokens'])} token{'s' if r['tokens'] != 1 else ''}" + (f" after {kv} cached" if kv else "")
    return text


def plot_scaling(df, out, written):
    chained = df[(df["mode"] == "chained") & (df["status"] == "ok")]
    iso = isolated_rows(df)
    for (model, shape), g in chained.groupby(["model", "shape"]):
        g = g.drop_duplicates(["backend", "batch"])
        if g["batch"].nunique() < 2:
            continue
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
        for backend, b in g.groupby("backend"):
            b = b.sort_values("batch")
            a1.plot(b["batch"], b["items_per_s"], marker="o", label=backend)
        a1.set_xscale("log", base=2)
        batches = sorted(g["batch"].unique())
        a1.set_xticks(batches)
        a1.set_xticklabels([str(b) for b in batches])
        a1.minorticks_off()
        a1.set_xlabel("batch size")
        if g["backend"].nunique() > 1:  # a CPU and a GPU differ by orders of magnitude
            a1.set_yscale("log")
            a1.set_ylabel("items per second (chained forward, log scale)")
        else:
            a1.set_ylim(bottom=0)
            a1.set_ylabel("items per second (chained forward)")
        a1.set_title(f"{model}{describe(g)}: throughput against batch size", fontsize=10)
        a1.grid(alpha=0.3, which="both")
        a1.legend(fontsize=8)
        backend = g["backend"].iloc[0]
        m = iso[(iso["model"] == model) & (iso["backend"] == backend) & (iso["shape"] == shape)]
        m = m.drop_duplicates(["batch", "layer_index"])
        m = m[m["batch"].isin(g[g["backend"] == backend]["batch"])]
        per = m.groupby(["batch", "kind"])["median_us"].sum().unstack(fill_value=0)
        per = per.div(per.index.to_series(), axis=0) / 1000  # ms per item
        kinds = per.sum().sort_values(ascending=False).index
        bottom = None
        x = [str(b) for b in per.index]
        for k in kinds:
            a2.bar(x, per[k], bottom=bottom, color=kind_colour(k), label=k)
            bottom = per[k] if bottom is None else bottom + per[k]
        a2.set_xlabel("batch size")
        a2.set_ylabel("milliseconds per item (layers alone, summed)")
        a2.set_title(f"{model} on {backend}: time per item by kind", fontsize=10)
        a2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
        a2.grid(axis="y", alpha=0.3)
        save(fig, out, f"{model}_scaling{shape}.png", written)


def plot_decode(df, out, written):
    """A decoder's steps over cache lengths: per backend and dtype, the chained forward's
    median against kv_len, a line per batch size (and tokens per step)."""
    chained = df[(df["mode"] == "chained") & (df["status"] == "ok") & df["kv_len"].notna()]
    for (model, backend, dtype), g in chained.groupby(["model", "backend", "dtype"]):
        g = g.drop_duplicates(["batch", "tokens", "kv_len"])
        if g["kv_len"].nunique() < 2:
            continue
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
        for (batch, tokens), b in g.groupby(["batch", "tokens"]):
            b = b.sort_values("kv_len")
            label = f"batch {batch}" + (f", {int(tokens)} tokens" if tokens != 1 else "")
            a1.plot(b["kv_len"], b["median_us"] / 1000, marker="o", label=label)
            a2.plot(b["kv_len"], batch * tokens / (b["median_us"] * 1e-6), marker="o", label=label)
        for a in (a1, a2):
            a.set_xscale("log", base=2)
            kvs = sorted(g["kv_len"].unique())
            a.set_xticks(kvs)
            a.set_xticklabels([str(int(k)) for k in kvs])
            a.minorticks_off()
            a.set_xlabel("tokens in the KV cache")
            a.set_ylim(bottom=0)
            a.grid(alpha=0.3)
            a.legend(fontsize=8)
        a1.set_ylabel("milliseconds per step (chained forward, median)")
        a1.set_title(f"{model} on {backend}, {dtype}: time per step", fontsize=10)
        a2.set_ylabel("tokens per second")
        a2.set_title(f"{model} on {backend}, {dtype}: throughput", fontsize=10)
        save(fig, out, f"{model}_decode_{backend}{'' if dtype == 'fp32' else '_' + dtype}.png", written)


def plot_roofline(df, out, written):
    iso = isolated_rows(df)
    if "peak_gflops_per_s" not in df.columns:
        return
    iso = iso[iso["peak_gflops_per_s"].notna() & (iso["bytes"] > 0)]
    for (model, backend, batch, shape, src), g in iso.groupby(["model", "backend", "batch", "shape", "source"]):
        tag = g["tag"].iloc[0]
        g = g.drop_duplicates("layer_index")
        peak_f = g["peak_gflops_per_s"].iloc[0]
        peak_b = g["peak_gbytes_per_s"].iloc[0]
        peak_c = g["peak_cache_gbytes_per_s"].iloc[0] if "peak_cache_gbytes_per_s" in g else float("nan")
        inten = g["flops"] / g["bytes"]
        # a layer without FLOPs sits at the left edge, its rate in GB/s times that intensity
        lo = max(min(inten[inten > 0].min() if (inten > 0).any() else 0.1, 0.1) / 2, 1e-3)
        hi = max(inten.max() * 2, 4 * peak_f / peak_b)
        x = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        fig, ax = plt.subplots(figsize=(8, 5.5))
        ax.plot(x, [min(peak_f, peak_b * v) for v in x], color="black", lw=1.5,
                label=f"memory {peak_b:.0f} GB/s, compute {peak_f:.0f} GFLOP/s")
        if peak_c == peak_c and peak_c > 0:
            ax.plot(x, [min(peak_f, peak_c * v) for v in x], color="grey", lw=1, ls="--",
                    label=f"from the caches {peak_c:.0f} GB/s")
        shown = set()
        for _, r in g.iterrows():
            i = r["flops"] / r["bytes"] if r["flops"] > 0 else lo
            y = r["gflops_per_s"] if r["flops"] > 0 else r["gbytes_per_s"] * lo
            ax.scatter(i, y, s=28, color=kind_colour(r["kind"]), edgecolor="black", lw=0.3, zorder=3,
                       label=r["kind"] if r["kind"] not in shown else None)
            shown.add(r["kind"])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
        ax.set_ylabel("achieved GFLOP/s (layers without FLOPs: GB/s x the left edge)")
        ax.set_title(f"{model} on {backend}, batch {batch}{describe(g)}: each layer alone on the measured roofline",
                     fontsize=10)
        ax.grid(which="both", alpha=0.25)
        ax.legend(fontsize=7, loc="lower right")
        save(fig, out, f"{model}_roofline_{backend}_b{batch}{tag}.png", written)


def plot_cpu_vs_gpu(df, out, written):
    iso = isolated_rows(df)
    for (model, batch, shape, src), g in iso.groupby(["model", "batch", "shape", "source"]):
        backends = set(g["backend"])
        if "cpu" not in backends or len(backends) < 2:
            continue
        for gpu in sorted(backends - {"cpu"}):
            c = g[g["backend"] == "cpu"].drop_duplicates("layer_index").set_index("layer_index")
            d = g[g["backend"] == gpu].drop_duplicates("layer_index").set_index("layer_index")
            both = c.join(d[["median_us"]], rsuffix="_gpu", how="inner")
            if both.empty:
                continue
            fig, ax = plt.subplots(figsize=(7, 6))
            shown = set()
            for _, r in both.iterrows():
                ax.scatter(r["median_us"], r["median_us_gpu"], s=26, color=kind_colour(r["kind"]), edgecolor="black",
                           lw=0.3, label=r["kind"] if r["kind"] not in shown else None, zorder=3)
                shown.add(r["kind"])
            lo = min(both["median_us"].min(), both["median_us_gpu"].min()) / 2
            hi = max(both["median_us"].max(), both["median_us_gpu"].max()) * 2
            for f, style in ((1, "-"), (10, "--"), (100, ":")):
                ax.plot([lo, hi], [lo / f, hi / f], color="grey", lw=0.8, ls=style, label=f"{gpu} {f}x faster")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo / 100, hi)
            ax.set_xlabel("cpu: median per call (microseconds)")
            ax.set_ylabel(f"{gpu}: median per call (microseconds)")
            total_c, total_g = both["median_us"].sum(), both["median_us_gpu"].sum()
            ax.set_title(f"{model}, batch {batch}: each layer alone, cpu against {gpu}\n"
                         f"(sums {fmt_time(total_c)} and {fmt_time(total_g)}: {total_c / total_g:.1f}x)", fontsize=10)
            ax.grid(which="both", alpha=0.25)
            ax.legend(fontsize=7, loc="upper left")
            save(fig, out, f"{model}_cpu_vs_{gpu}_b{batch}{g['tag'].iloc[0]}.png", written)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", help="layerbench results CSVs (bench run/sweep --csv)")
    ap.add_argument("--out", help="folder for the PNGs (default: beside the first CSV)")
    ap.add_argument("--top", type=int, default=15, help="layers in the per-layer plots (default 15)")
    args = ap.parse_args()
    out = args.out or os.path.dirname(os.path.abspath(args.csv[0]))
    os.makedirs(out, exist_ok=True)
    df = load(args.csv)
    written = []
    plot_layers(df, out, args.top, written)
    plot_scaling(df, out, written)
    plot_roofline(df, out, written)
    plot_cpu_vs_gpu(df, out, written)
    plot_decode(df, out, written)
    for p in written:
        print(p)
    if not written:
        sys.exit("plot.py: nothing to plot (no timed rows)")


main()
