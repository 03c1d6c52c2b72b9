"""Every layer's backward reference against torch.autograd: tests/ref_dump.c --grads wrote
the input, every layer's weights and training-mode output, and for each layer with a
backward reference a random output gradient (dout<i>.bin), the gradients of its inputs
(din<i>_<k>.bin) and of its weights (dw<i>.bin). This runs each layer in torch
(llm_torch_check.layer_forward, batch norm in training mode) on the same inputs (our own
outputs of the layers before it) and weights, back-propagates the same output gradient
with torch.autograd and compares every gradient with ours. Token ids have none: ours
must be zeros. A weight torch does not learn (batch norm's running statistics) has a zero
gradient on both sides.
usage: grad_torch_check.py DUMP_DIR [TOLERANCE]   (exit 1 if a gradient differs)"""
import os
import sys

import numpy as np
import torch

import llm_torch_check as ref


def shape_of(text):
    return [int(v) for v in text.strip("[]").split(",")]


def rel(a, b):
    return ((a.double() - b.double()).norm() / max(b.double().norm().item(), 1e-30)).item()


def main():
    out_dir = sys.argv[1]
    tol = float(sys.argv[2]) if len(sys.argv) > 2 else 1e-5
    rows = [line.rstrip("\n").split("\t") for line in open(f"{out_dir}/manifest.tsv")]
    load = lambda name: torch.from_numpy(np.fromfile(f"{out_dir}/{name}", dtype="<f4"))
    first = [r for r in rows if r[5].split(",")[0] == "0"]
    vals = [load("input.bin").reshape(shape_of(first[0][7])) if first else load("input.bin")]
    vals += [load(f"out{r[0]}.bin").reshape(shape_of(r[4])) for r in rows]
    worst, bad, checked, without = 0.0, 0, {}, {}
    for idx, name, kind, wn, shape, ins, ptext, in_shape in rows:
        if not os.path.exists(f"{out_dir}/dout{idx}.bin"):
            without[kind] = without.get(kind, 0) + 1
            continue
        p = ref.params(ptext)
        ids = kind == "embedding"
        x = [vals[int(i)].clone().requires_grad_(not ids) for i in ins.split(",")]
        w = load(f"w{idx}.bin").requires_grad_(True) if int(wn) else None
        y = ref.layer_forward(kind, p, ptext, x, w, in_shape, train=True)
        if y is None:
            print(f"grad_torch_check: no torch counterpart for kind {kind}", file=sys.stderr)
            return 2
        y.reshape(shape_of(shape)).backward(load(f"dout{idx}.bin").view(shape_of(shape)))
        grads = [(f"input {k}", t.grad if t.grad is not None else torch.zeros_like(t), f"din{idx}_{k}.bin")
                 for k, t in enumerate(x)]
        if w is not None:
            grads.append(("weights", w.grad if w.grad is not None else torch.zeros_like(w), f"dw{idx}.bin"))
        for what, theirs, file in grads:
            ours = load(file)
            err = rel(ours, theirs.reshape(-1)) if theirs.abs().sum() > 0 else ours.abs().max().item()
            worst = max(worst, err)
            if err > tol:
                bad += 1
                print(f"  {name} ({kind}) {what}: relative error {err:.2e} above {tol:.0e}")
        checked[kind] = checked.get(kind, 0) + 1
    print("  checked: " + ", ".join(f"{k} {n}" for k, n in checked.items()))
    if without:
        print("  no backward reference yet: " + ", ".join(f"{k} {n}" for k, n in without.items()))
    print(f"grad_torch_check: {sum(checked.values())} layers' gradients, worst relative error {worst:.2e}, "
          f"{bad} above {tol:.0e}")
    return 1 if bad or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
