import sys, time, torch
torch.set_num_threads(2)
torch.manual_seed(0)
rows = []
for (i, o) in [(768, 3072), (3072, 768), (768, 768)]:
    lin = torch.nn.Linear(i, o)
    x = torch.rand(128, i) * 2 - 1
    q = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8)
    for name, m in (("fp32", lin), ("int8 dynamic", q)):
        with torch.no_grad():
            for _ in range(20): m(x)
            ts = []
            for _ in range(200):
                t = time.perf_counter(); m(x); ts.append(time.perf_counter() - t)
        ts.sort()
        rows.append((f"{i}->{o}", name, ts[len(ts)//2] * 1e6))
print("torch", torch.__version__, "qengine", torch.backends.quantized.engine, "threads", torch.get_num_threads())
print("linear 128 rows   mode           median_us")
for r in rows: print(f"{r[0]:<17} {r[1]:<14} {r[2]:.1f}")
