#!/usr/bin/env python3
"""Checks a layerbench --trace file (and, optionally, --stacks files) as a trace viewer
and a flame-graph tool would read them, with the standard library only.

usage: check_trace.py TRACE.json [STACKS ...] --layers N [--parts N] [--blocks NAME ...]

The trace: well-formed JSON; a traceEvents list; every complete event ("X") has a
name, a category, numeric ts and dur >= 0 in microseconds, a pid and a tid; on every
thread the spans nest properly (a span starts after its parent's start and ends
before its parent's end, or starts after it ended); every thread's timeline is one
model span whose duration is the sum of its layer spans; the forward thread of each
process has N layer spans, --parts part spans (default 0; each inside a layer span, the
parts of a layer together no longer than it) and a span for every --blocks name. Every stacks file: lines
of ';'-separated frames, a space and an integer; its total is the forward span of the
trace (in ns) for the backend named in its frames' file, when one trace forward matches.
Exits 1 with the first problem."""
import json
import sys


def fail(msg):
    print(f"check_trace: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    args = sys.argv[1:]
    if "--layers" not in args:
        fail("usage: check_trace.py TRACE.json [STACKS ...] --layers N [--parts N] [--blocks NAME ...]")
    i = args.index("--layers")
    files, n_layers = args[:i], int(args[i + 1])
    n_parts = int(args[args.index("--parts") + 1]) if "--parts" in args else 0
    blocks = args[args.index("--blocks") + 1:] if "--blocks" in args else []
    trace_path, stacks = files[0], files[1:]
    with open(trace_path) as f:
        doc = json.load(f)
    events = doc.get("traceEvents")
    if not isinstance(events, list) or not events:
        fail("no traceEvents list")
    threads = {}
    names = {}
    for e in events:
        if e.get("ph") == "M":
            if e.get("name") == "thread_name":
                names[(e["pid"], e["tid"])] = e["args"]["name"]
            continue
        if e.get("ph") != "X":
            fail(f"unexpected phase {e.get('ph')!r}")
        for k in ("name", "cat", "ts", "dur", "pid", "tid"):
            if k not in e:
                fail(f"an X event without {k}: {e}")
        if not isinstance(e["ts"], (int, float)) or not isinstance(e["dur"], (int, float)) or e["dur"] < 0:
            fail(f"bad ts/dur: {e}")
        threads.setdefault((e["pid"], e["tid"]), []).append(e)
    forwards = {}
    for key, evs in threads.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        eps = 1e-6
        for e in evs:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - eps and not (
                    e["dur"] == 0 and e["ts"] < stack[-1]["ts"] + stack[-1]["dur"]):
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + eps:
                fail(f"thread {names.get(key, key)}: {e['name']} [{e['ts']}, +{e['dur']}] overlaps the end of "
                     f"{stack[-1]['name']} [{stack[-1]['ts']}, +{stack[-1]['dur']}]")
            stack.append(e)
        roots = [e for e in evs if e["cat"] == "model"]
        if len(roots) != 1:
            fail(f"thread {names.get(key, key)}: {len(roots)} model spans")
        layers = [e for e in evs if e["cat"] not in ("model", "block", "part")]
        parts = [e for e in evs if e["cat"] == "part"]
        for layer in layers:
            inside = [p for p in parts if layer["ts"] - 1e-6 <= p["ts"] < layer["ts"] + layer["dur"]]
            if sum(round(p["dur"] * 1000) for p in inside) > round(layer["dur"] * 1000):
                fail(f"thread {names.get(key, key)}: the parts of {layer['name']} take longer than it")
        total = sum(round(e["dur"] * 1000) for e in layers)
        if abs(total - round(roots[0]["dur"] * 1000)) > 0:
            fail(f"thread {names.get(key, key)}: layers add up to {total} ns, the model span is "
                 f"{roots[0]['dur'] * 1000:.0f} ns")
        if "forward" in names.get(key, ""):
            if len(layers) != n_layers:
                fail(f"thread {names[key]}: {len(layers)} layer spans, expected {n_layers}")
            if len(parts) != n_parts:
                fail(f"thread {names[key]}: {len(parts)} part spans, expected {n_parts}")
            have = {e["name"] for e in evs if e["cat"] == "block"}
            missing = [b for b in blocks if b not in have]
            if missing:
                fail(f"thread {names[key]}: no span for block(s) {missing}")
            forwards[key] = round(roots[0]["dur"] * 1000)
    if not forwards:
        fail("no forward thread")
    for path in stacks:
        total = 0
        with open(path) as f:
            for n, line in enumerate(f, 1):
                frames, _, count = line.rstrip("\n").rpartition(" ")
                if not frames or not count.isdigit() or "" in frames.split(";"):
                    fail(f"{path}:{n}: not a folded stack line: {line!r}")
                total += int(count)
        if total not in forwards.values():
            fail(f"{path}: adds up to {total} ns; the trace's forwards take {sorted(forwards.values())} ns")
    print(f"check_trace: {len(threads)} timelines, {sum(len(v) for v in threads.values())} spans, "
          f"{len(stacks)} stacks file(s): ok")


main()
