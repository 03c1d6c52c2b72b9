"""An exported model end to end against torch: tests/ref_dump.c wrote the plain-C reference
forward of the config scripts/torch_export.py made from MODEL (its input, every layer's
weights, every layer's output); this builds MODEL again, sets every parameter and
buffer from those weights (a layer named by its module path takes that module's
parameters in torch's order; BatchNorm2d its running statistics too; window_attention
in layerbench's order; a model_input layer's values are the forward's further
argument), runs torch's own forward on the same input (token ids where the first layer is
an embedding, read from the drawn values as the embedding kind reads them) and compares
its output with the reference's last layer. It checks what no per-layer test does: that the exported graph
computes what the module computes.
usage: export_torch_check.py DUMP_DIR MODEL [TOLERANCE] (MODEL as torch_export.py takes
it; exit 1 if the outputs differ, 2 if a layer's weights cannot be placed)"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import torch_export  # noqa: E402


def shape_of(text):
    return [int(v) for v in text.strip("[]").split(",")]


def window_tensors(m):
    """A window_attention layer's tensors in layerbench's order (layers/window.c)."""
    from torchvision.models import maxvit
    if isinstance(m, maxvit.RelativePositionalMultiHeadAttention):
        return [m.to_qkv.weight, m.to_qkv.bias, m.merge.weight, m.merge.bias, m.relative_position_bias_table]
    t = [m.qkv.weight, m.qkv.bias, m.proj.weight, m.proj.bias]
    if hasattr(m, "cpb_mlp"):
        t += [m.logit_scale, m.cpb_mlp[0].weight, m.cpb_mlp[0].bias, m.cpb_mlp[2].weight]
    else:
        t += [m.relative_position_bias_table]
    return [x for x in t if x is not None]


def layer_tensors(kind, name, modules, params, n):
    """The tensors layer `name` of `kind` holds, in the order its weights were drawn."""
    m = modules.get(name)
    if m is not None:
        if kind == "window_attention":
            return window_tensors(m)
        if kind == "batchnorm2d":
            return [m.weight, m.bias, m.running_mean, m.running_var]
        if kind == "moe" and hasattr(m, "gate_up_proj"):  # gpt-oss's fused experts: place_fused_experts
            return [m.gate_up_proj, m.gate_up_proj_bias, m.down_proj, m.down_proj_bias]
        if kind == "linear" and hasattr(m, "e_score_correction_bias"):  # DeepSeek-V3's router: the moe holds its bias
            return [m.weight]
        if kind == "moe":  # layers/moe.c: per expert gate (w1), down (w2), up (w3); then DeepSeek-V3's score bias
            # each expert's gate, down and up by what it computes (torch_export.expert_roles), their
            # biases after them where they have them
            roles = [torch_export.expert_roles(e) for e in m]
            experts = [t for r in roles for t in [c.weight for c in r] + [c.bias for c in r if c.bias is not None]]
            gate = getattr(modules.get(name.rsplit(".", 1)[0]), "gate", None)
            bias = getattr(gate, "e_score_correction_bias", None)
            return experts + ([bias] if bias is not None and sum(t.numel() for t in experts) < n else [])
        return list(m.parameters())
    if kind == "mla":  # layers/mla.c: the attention module's kv_a_layernorm, then kv_b_proj
        parent = modules.get(name.rsplit(".", 1)[0])
        return [parent.kv_a_layernorm.weight, parent.kv_b_proj.weight] if parent is not None else None
    parent = modules.get(name.rsplit(".", 1)[0]) if "." in name else None
    if isinstance(parent, torch.nn.MultiheadAttention) and name.rsplit(".", 1)[1] in ("in_proj_q", "in_proj_kv"):
        # cross-attention: in_proj's first embed_dim rows read the query, the others the memory
        e = parent.embed_dim
        rows = slice(0, e) if name.endswith("_q") else slice(e, 3 * e)
        return [t[rows] for t in (parent.in_proj_weight, parent.in_proj_bias) if t is not None]
    if name in params:  # layer_scale, class_token, pos_embedding: named after the parameter
        return [params[name]]
    parent = modules.get(name.rsplit(".", 1)[0]) if "." in name else None
    if parent is not None:  # F.layer_norm in a module's own forward (LayerNorm2d): its own parameters
        own = list(parent.parameters(recurse=False))
        if sum(t.numel() for t in own) == n:
            return own
    return None


def place_fused_experts(m, w):
    """gpt-oss's experts from layers/moe.c's order (per expert w1 [F, H], w2 [H, F], w3 [F, H], b1
    [F], b2 [H], b3 [F]): gate_up_proj [E, H, 2F] holds w1^T in its even columns and w3^T in its
    odd ones, down_proj [E, F, H] w2^T, and the biases the same way."""
    e_n, h, f2 = m.gate_up_proj.shape
    f = f2 // 2
    per = 3 * h * f + 2 * f + h
    for e in range(e_n):
        x = w[e * per:(e + 1) * per]
        w1, w2, w3 = x[:h * f].view(f, h), x[h * f:2 * h * f].view(h, f), x[2 * h * f:3 * h * f].view(f, h)
        b1, b2, b3 = x[3 * h * f:3 * h * f + f], x[3 * h * f + f:3 * h * f + f + h], x[3 * h * f + f + h:]
        m.gate_up_proj[e, :, 0::2] = w1.t()
        m.gate_up_proj[e, :, 1::2] = w3.t()
        m.down_proj[e] = w2.t()
        m.gate_up_proj_bias[e, 0::2] = b1
        m.gate_up_proj_bias[e, 1::2] = b3
        m.down_proj_bias[e] = b2


def main():
    out_dir, spec = sys.argv[1], sys.argv[2]
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
    rows = [line.rstrip("\n").split("\t") for line in open(f"{out_dir}/manifest.tsv")]
    load = lambda name: torch.from_numpy(np.fromfile(f"{out_dir}/{name}", dtype="<f4"))  # noqa: E731
    model = torch_export.build(spec).eval()
    modules = dict(model.named_modules())
    for idx, name, kind, wn, shape, ins, ptext, in_shape in rows:
        if "tied_weights=true" in ptext.split() and name in modules:
            # lm_head tied to embed_tokens: the reference draws the layer a table of its own (a
            # tied layer is counted once, and computes as any linear), so torch's is untied too
            m = modules[name]
            m.weight = torch.nn.Parameter(m.weight.detach().clone())
    params = dict(model.named_parameters())
    extras, placed = [], set()
    with torch.no_grad():
        for idx, name, kind, wn, shape, ins, ptext, in_shape in rows:
            if not int(wn):
                continue
            w = load(f"w{idx}.bin")
            if kind == "model_input":
                extras.append(w.view(shape_of(shape)))
                continue
            tensors = layer_tensors(kind, name, modules, params, w.numel())
            if tensors is None or sum(t.numel() for t in tensors) != w.numel():
                print(f"export_torch_check: {name} ({kind}): cannot place its {w.numel()} weights in the model",
                      file=sys.stderr)
                return 2
            if any(id(t) in placed for t in tensors):
                print(f"export_torch_check: {name}: its module runs twice (one set of weights in torch, two in the "
                      f"export): not checkable end to end", file=sys.stderr)
                return 2
            if kind == "moe" and hasattr(modules.get(name), "gate_up_proj"):
                place_fused_experts(modules[name], w)
                placed.update(id(t) for t in tensors)
                continue
            off, conv1d = 0, "hf_conv1d=true" in ptext.split()
            for k, t in enumerate(tensors):
                piece = w[off:off + t.numel()]
                if conv1d and k == 0:  # Hugging Face's Conv1D keeps the linear's [out, in] weight as [in, out]
                    t.copy_(piece.view(t.shape[1], t.shape[0]).t())
                else:
                    t.copy_(piece.view(t.shape))
                off += t.numel()
                placed.add(id(t))
        first = [r for r in rows if r[5].split(",")[0] == "0"]
        x = load("input.bin").view(shape_of(first[0][7]))
        if first[0][2] == "embedding":  # token ids: the drawn values read as layer_token_id reads them
            v = int(dict(p.split("=", 1) for p in first[0][6].split())["num_embeddings"])
            x = torch.clamp(torch.floor((x.double() + 1.0) * 0.5 * v), 0, v - 1).long()
        y = model(x, *extras)
    if isinstance(y, dict):
        y = y["out"]
    if isinstance(y, (tuple, list)):
        y = y[0]
    ours = load(f"out{rows[-1][0]}.bin")
    if ours.numel() != y.numel():
        print(f"export_torch_check: the last layer has {ours.numel()} values, torch's output {y.numel()}",
              file=sys.stderr)
        return 1
    err = ((y.double().flatten() - ours.double()).norm() / max(y.double().norm().item(), 1e-30)).item()
    print(f"export_torch_check: {spec}: {len(rows)} layers, output relative error {err:.2e} against torch's "
          f"forward ({'ok' if err <= tol else f'above {tol:.0e}'})")
    return 0 if err <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
