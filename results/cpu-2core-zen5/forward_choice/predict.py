"""Each convolution's chosen kernel: its time in the search (the kept finalist's, from
LAYERBENCH_CPU_SEARCH_LOG; identical layers share the first one's search) beside its medians
alone and inside the forward, per --algo-for objective. usage: predict.py DIR (forward.err,
forward.csv, alone.err, alone.csv)"""
import csv, re, sys
d = sys.argv[1] if len(sys.argv) > 1 else "/tmp/pred"
def search(err):
    kept = {}
    for line in open(err):
        m = re.match(r"cpu search (\S+): finalist \d+ again: ([\d.]+) us \(kept\)", line)
        if m: kept[m.group(1)] = float(m.group(2))
    return kept
def rows(path):
    out = {}
    for r in csv.DictReader(open(path)):
        if r["kind"] != "conv2d" or r["status"] != "ok": continue
        out.setdefault(r["layer_name"], {})[r["mode"]] = (float(r["median_us"]), r["impl"], r["input_shape"], r["parameters"])
    return out
print("| layer | objective | kernel chosen | its time in the search | alone (warm) | in the forward | search / in the forward |")
print("|---|---|---|---:|---:|---:|---:|")
tot = {}
for obj in ("forward", "alone"):
    k, r = search(f"{d}/{obj}.err"), rows(f"{d}/{obj}.csv")
    by_key = {}
    for name, modes in r.items():
        alone = [v for m, v in modes.items() if m != "inmodel"][0]
        inm = modes["inmodel"][0]
        impl = alone[1].split(" (fastest")[0]
        key = (alone[2], alone[3])
        if name in k: by_key[key] = k[name]
        st = by_key.get(key)
        t = tot.setdefault(obj, [0, 0, 0])
        t[0] += st or 0; t[1] += alone[0]; t[2] += inm
        print(f"| {name} | {obj} | {impl} | {st:.0f} us | {alone[0]:.0f} us | {inm:.0f} us | {st / inm:.2f} |" if st else
              f"| {name} | {obj} | {impl} | - | {alone[0]:.0f} us | {inm:.0f} us | - |")
for obj, t in tot.items():
    print(f"| **all 20** | {obj} | | {t[0]/1000:.3f} ms | {t[1]/1000:.3f} ms | {t[2]/1000:.3f} ms | {t[0]/t[2]:.2f} |")
