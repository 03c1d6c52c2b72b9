"""The decoder kinds' plain-C reference against PyTorch, as Hugging Face's Llama code
computes them (transformers' modeling_llama.py: LlamaRMSNorm, rotate_half and
apply_rotary_pos_emb, the rope_init functions of the default, linear and llama3 types,
repeat_kv and eager_attention_forward with its causal mask), and Mixtral's
MixtralSparseMoeBlock (modeling_mixtral.py), written out here in torch; and the mean
kind (x.mean(dim, keepdim), MNASNet's global pool), groupnorm (nn.GroupNorm),
channel_shuffle (ShuffleNet's), slice (x.narrow), permute and layer_scale; and the Swin
kinds against torchvision's own code (torch.roll, _patch_merging_pad, ShiftedWindowAttention
and ShiftedWindowAttentionV2 holding our weights; MaxViT's WindowPartition,
RelativePositionalMultiHeadAttention and WindowDepartition).

Reads what tests/ref_dump.c wrote (the input, every layer's weights, every layer's
reference output), recomputes the forward in torch from the same input and weights,
each layer on torch's own values, and compares every layer's output with ours.
usage: llm_torch_check.py DUMP_DIR [TOLERANCE]   (exit 1 if a layer differs)"""
import math
import sys

import numpy as np
import torch

DEFAULTS = {"eps": 1e-6, "rope_theta": 10000.0, "rope_type": "default", "factor": 1.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "kv_len": 0, "causal": True,
            "sliding_window": 0, "bias": True, "top_k": 2, "routing": "uniform", "load_skew": 0.0}


def params(text):
    p = dict(DEFAULTS)
    for item in ([] if text == "-" else text.split()):
        k, v = item.split("=", 1)
        p[k] = {"true": True, "false": False}.get(v, v)
    return p


def rmsnorm(x, w, eps):  # LlamaRMSNorm.forward
    xf = x.to(torch.float32)
    var = xf.pow(2).mean(-1, keepdim=True)
    return w * (xf * torch.rsqrt(var + eps)).to(x.dtype)


def inv_freq(p, dim):  # _compute_default_rope_parameters, _compute_llama3_parameters
    base = float(p["rope_theta"])
    f = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if p["rope_type"] == "llama3":
        factor, lo, hi = float(p["factor"]), float(p["low_freq_factor"]), float(p["high_freq_factor"])
        old = int(p["original_max_position_embeddings"])
        lo_wavelen, hi_wavelen = old / lo, old / hi
        wavelen = 2 * math.pi / f
        scaled = torch.where(wavelen > lo_wavelen, f / factor, f)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < hi_wavelen) * ~(wavelen > lo_wavelen)
        f = torch.where(medium, smoothed, scaled)
    return f


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(x, p):  # LlamaRotaryEmbedding.forward, apply_rotary_pos_emb on [N, H, T, D]
    n, t, hd = x.shape
    heads, d = int(p["num_heads"]), int(p["head_dim"])
    pos = torch.arange(int(p["kv_len"]), int(p["kv_len"]) + t).float()
    if p["rope_type"] == "linear":
        pos = pos / float(p["factor"])
    freqs = pos[:, None] @ inv_freq(p, d)[None, :]
    xh = x.view(n, t, heads, d).transpose(1, 2)
    if p.get("interleaved"):  # Meta's apply_rotary_emb: pairs as complex numbers
        z = torch.view_as_complex(xh.reshape(n, heads, t, d // 2, 2).contiguous())
        y = torch.view_as_real(z * torch.polar(torch.ones_like(freqs), freqs)).flatten(3)
        return y.transpose(1, 2).reshape(n, t, hd)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    y = xh * cos + rotate_half(xh) * sin
    return y.transpose(1, 2).reshape(n, t, hd)


def attention(q, k, v, cache, p):  # repeat_kv, eager_attention_forward, the causal (sliding) mask
    n, t, _ = q.shape
    tk = k.shape[1]  # a cross-attention's keys have their own tokens
    h, hkv, d, s = int(p["num_heads"]), int(p["num_key_value_heads"] if "num_key_value_heads" in p else p["num_heads"]), int(p["head_dim"]), int(p["kv_len"])
    qh = q.view(n, t, h, d).transpose(1, 2)
    kh = k.view(n, tk, hkv, d).transpose(1, 2)
    vh = v.view(n, tk, hkv, d).transpose(1, 2)
    if s:  # DynamicCache: [N, Hkv, S, D], keys then values; a sliding layer's holds its last W - 1
        w = int(p["sliding_window"])
        held = w - 1 if p["causal"] and w > 0 and s >= w - 1 else s
        ck, cv = cache.view(2, n, hkv, held, d)
        pad = torch.zeros(n, hkv, s - held, d)  # positions no query sees: masked below
        kh, vh = torch.cat((pad, ck, kh), dim=2), torch.cat((pad, cv, vh), dim=2)
    rep = h // hkv
    kh = kh[:, :, None].expand(n, hkv, rep, s + tk, d).reshape(n, h, s + tk, d)
    vh = vh[:, :, None].expand(n, hkv, rep, s + tk, d).reshape(n, h, s + tk, d)
    scale = float(p.get("scale", 0)) or 1 / math.sqrt(d)
    scores = qh @ kh.transpose(2, 3) * scale
    if float(p.get("softcap", 0)):  # Gemma 2's attn_logit_softcapping
        scores = torch.tanh(scores / float(p["softcap"])) * float(p["softcap"])
    if p["causal"]:
        i = torch.arange(s, s + t)[:, None]
        j = torch.arange(s + t)[None, :]
        keep = j <= i
        if int(p["sliding_window"]):
            keep &= i - j < int(p["sliding_window"])
        scores = scores.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return (probs @ vh).transpose(1, 2).reshape(n, t, h * d)


def mla(q, kv, w, p):  # DeepseekV2Attention from its projections' outputs, expanded, with our cache layout
    n, t, _ = q.shape
    h, lr, dn, dr, dv, s = (int(p[k]) for k in ("num_heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                                  "v_head_dim", "kv_len"))
    if p["rope_type"] != "default":
        raise ValueError("llm_torch_check: mla with rope_scaling is checked end to end (hf_decoder.py), not here")
    norm, wb = w[:lr], w[lr:lr + h * (dn + dv) * lr].view(h * (dn + dv), lr)
    cache = w[lr + h * (dn + dv) * lr:].view(n, s, lr + dr)  # per cached token: its latent, its turned rope part
    pos = torch.arange(s, s + t).float()
    freqs = pos[:, None] @ inv_freq(p, dr)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def turn(x):  # DeepSeek's apply_rotary_pos_emb on [.., T, dr]: interleaved pairs gathered into halves
        x = x.unflatten(-1, (dr // 2, 2)).transpose(-1, -2).flatten(-2)
        y = x * cos + rotate_half(x) * sin
        return y.unflatten(-1, (2, dr // 2)).transpose(-1, -2).flatten(-2)  # back to pairs, as the cache holds it
    c = rmsnorm(kv[..., :lr], norm, float(p["eps"]))
    lat = torch.cat((cache, torch.cat((c, turn(kv[..., lr:])), dim=-1)), dim=1)  # [N, S + T, L + dr]
    kvh = (lat[..., :lr] @ wb.t()).view(n, s + t, h, dn + dv).transpose(1, 2)
    k_nope, v = kvh[..., :dn], kvh[..., dn:]
    k = torch.cat((k_nope, lat[:, None, :, lr:].expand(n, h, s + t, dr)), dim=-1)
    qh = q.view(n, t, h, dn + dr).transpose(1, 2)
    qh = torch.cat((qh[..., :dn], turn(qh[..., dn:])), dim=-1)
    scores = qh @ k.transpose(2, 3) * (float(p.get("scale", 0)) or 1 / math.sqrt(dn + dr))
    keep = torch.arange(s + t)[None, :] <= torch.arange(s, s + t)[:, None]
    probs = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1, dtype=torch.float32)
    return (probs @ v).transpose(1, 2).reshape(n, t, h * dv)


def uniform_experts(rows, e_n, k, skew):
    """layerbench's uniform routing (layers/moe.c), the rule rewritten: each expert's
    share of the rows * k slots by water-filling and largest remainders, the slots laid
    out expert by expert, token t taking slots t, t + rows, ..."""
    share = [(e + 1) ** -skew for e in range(e_n)]
    count, capped, left, total = [0] * e_n, [False] * e_n, rows * k, sum(share)
    again = True
    while again:
        again = False
        for e in range(e_n):
            if not capped[e] and left * share[e] / total > rows:
                capped[e], count[e], left, total, again = True, rows, left - rows, total - share[e], True
    for e in range(e_n):
        if not capped[e]:
            count[e] = math.floor(left * share[e] / total)
    for _ in range(left - sum(c for e, c in enumerate(count) if not capped[e])):
        best = max((e for e in range(e_n) if not capped[e] and count[e] < rows),
                   key=lambda e: (left * share[e] / total - count[e], -e))
        count[best] += 1
    pick = torch.zeros(rows, k, dtype=torch.long)
    slot = 0
    for e in range(e_n):
        for _ in range(count[e]):
            pick[slot % rows, slot // rows] = e
            slot += 1
    return pick


def moe(x, logits, w, p):  # MixtralSparseMoeBlock.forward after its gate, MixtralBlockSparseTop2MLP
    e_n, k, f = int(p["num_experts"]), int(p["top_k"]), int(p["ffn_dim"])
    h = w.numel() // (3 * e_n * f)
    x, logits = x.reshape(-1, h), logits.reshape(-1, e_n)
    routing_weights = torch.softmax(logits, dim=1, dtype=torch.float)
    if p["routing"] == "router":
        routing_weights, selected = torch.topk(routing_weights, k, dim=-1)
    else:
        selected = uniform_experts(x.shape[0], e_n, k, float(p["load_skew"]))
        routing_weights = routing_weights.gather(1, selected)
    if p.get("normalize", True):  # Qwen's norm_topk_prob false keeps the softmax's
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
    routing_weights = (routing_weights * float(p.get("routed_scaling_factor", 1.0))).to(x.dtype)  # DeepSeek's
    final = torch.zeros_like(x)
    mask = torch.nn.functional.one_hot(selected, num_classes=e_n).permute(2, 1, 0)
    experts = w.view(e_n, 3, -1)
    for e in range(e_n):
        idx, top_x = torch.where(mask[e])
        w1, w2, w3 = experts[e, 0].view(f, h), experts[e, 1].view(h, f), experts[e, 2].view(f, h)
        cur = x[None, top_x].reshape(-1, h)
        y = torch.nn.functional.linear(torch.nn.functional.silu(torch.nn.functional.linear(cur, w1)) *
                                       torch.nn.functional.linear(cur, w3), w2) * routing_weights[top_x, idx, None]
        final.index_add_(0, top_x, y.to(x.dtype))
    return final


def window_attention(x, w, p):
    """torchvision's ShiftedWindowAttention (V2 with cosine), or on windows given MaxViT's
    RelativePositionalMultiHeadAttention, its parameters set from w in layerbench's order:
    qkv, proj, then the bias table or V2's logit scale and MLP."""
    from torchvision.models import maxvit, swin_transformer as st
    c, heads = x.shape[-1], int(p["num_heads"])
    pair = lambda v: [int(d) for d in str(v).split("x")] * (1 if "x" in str(v) else 2)  # noqa: E731
    names = ["qkv.weight", "qkv.bias", "proj.weight", "proj.bias"]
    if p.get("partitioned"):
        size = pair(p["window_size"])[0]
        m = maxvit.RelativePositionalMultiHeadAttention(c, c // heads, size * size)
        assert abs(float(p["scale"]) - m.scale_factor) < 1e-6, (p["scale"], m.scale_factor)  # as %g prints it
        names = ["to_qkv.weight", "to_qkv.bias", "merge.weight", "merge.bias", "relative_position_bias_table"]
    else:
        cls = st.ShiftedWindowAttentionV2 if p.get("cosine") else st.ShiftedWindowAttention
        m = cls(c, pair(p["window_size"]), pair(p.get("shift_size", 0)), heads, qkv_bias=p.get("qkv_bias", True),
                proj_bias=p.get("proj_bias", True))
    if p.get("cosine"):
        names += ["logit_scale", "cpb_mlp.0.weight", "cpb_mlp.0.bias", "cpb_mlp.2.weight"]
    elif not p.get("partitioned"):
        names += ["relative_position_bias_table"]
    state, off = dict(m.named_parameters()), 0
    with torch.no_grad():
        for n in names:
            if n in state:
                t = state[n]
                t.copy_(w[off:off + t.numel()].view(t.shape))
                off += t.numel()
        assert off == w.numel(), (off, w.numel())
        return m.eval()(x)


VISION = ("conv2d", "batchnorm2d", "relu", "relu6", "sigmoid", "tanh", "hardswish", "hardsigmoid", "gelu", "softmax",
          "layernorm", "maxpool2d", "avgpool2d", "adaptive_avgpool2d", "concat", "scale_shift", "multihead_attention")


def pair(p, key, default):
    """A pair parameter as the manifest prints it ("3x2", or one number for both)."""
    v = str(p.get(key, default)).split("x")
    return (int(v[0]), int(v[-1]))


def vision_forward(kind, p, ptext, x, w, in_shape, train):
    """The image kinds and the element-wise ones, as torch.nn.functional computes them;
    an explicit eps only where the manifest gives one (the defaults differ by kind)."""
    F = torch.nn.functional
    flag = lambda key, default: bool(p.get(key, default)) if not isinstance(p.get(key), str) else p[key] == "true"
    eps = float(p["eps"]) if "eps=" in ptext else 1e-5
    xs = x[0].reshape(in_shape)
    if kind == "conv2d":
        oc, k, g = int(p["out_channels"]), pair(p, "kernel_size", 1), int(p.get("groups", 1))
        n_w = oc * in_shape[1] // g * k[0] * k[1]
        return F.conv2d(xs, w[:n_w].view(oc, in_shape[1] // g, *k), w[n_w:] if p["bias"] else None,
                        pair(p, "stride", 1), pair(p, "padding", 0), pair(p, "dilation", 1), g)
    if kind == "batchnorm2d":
        c = in_shape[1]
        affine = flag("affine", True)
        return F.batch_norm(xs, w[2 * c:3 * c].detach().clone(), w[3 * c:].detach().clone(), w[:c] if affine else None,
                            w[c:2 * c] if affine else None, training=train, eps=eps)
    if kind in ("maxpool2d", "avgpool2d"):
        k = pair(p, "kernel_size", 1)
        stride, pad, ceil = pair(p, "stride", f"{k[0]}x{k[1]}"), pair(p, "padding", 0), flag("ceil_mode", False)
        if kind == "maxpool2d":
            return F.max_pool2d(xs, k, stride, pad, pair(p, "dilation", 1), ceil)
        return F.avg_pool2d(xs, k, stride, pad, ceil, flag("count_include_pad", True))
    if kind == "adaptive_avgpool2d":
        return F.adaptive_avg_pool2d(xs, pair(p, "output_size", 1))
    if kind == "layernorm":
        d = in_shape[-1]
        affine = flag("elementwise_affine", True)
        return F.layer_norm(xs, (d,), w[:d] if affine else None, w[d:] if affine and flag("bias", True) else None, eps)
    if kind == "concat":
        return torch.cat([t for t in x], dim=int(p.get("dim", 1)))
    if kind == "softmax":
        return F.softmax(xs, dim=int(p.get("dim", 1)))
    if kind == "scale_shift":
        return xs * float(p.get("scale", 1)) + float(p.get("shift", 0))
    if kind == "multihead_attention":  # nn.MultiheadAttention(batch_first=True)'s functional form, our weights
        e, h, bias = int(p["embed_dim"]), int(p["num_heads"]), flag("bias", True)
        in_w, off = w[:3 * e * e].view(3 * e, e), 3 * e * e
        in_b, off = (w[off:off + 3 * e], off + 3 * e) if bias else (None, off)
        out_w, out_b = w[off:off + e * e].view(e, e), w[off + e * e:off + e * e + e] if bias else None
        xt = xs.transpose(0, 1)
        y, _ = F.multi_head_attention_forward(xt, xt, xt, e, h, in_w, in_b, None, None, False, 0.0, out_w, out_b,
                                              training=False, need_weights=False)
        return y.transpose(0, 1)
    if kind == "gelu":
        return F.gelu(xs, approximate=str(p.get("approximate", "none")))
    return {"relu": F.relu, "relu6": F.relu6, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
            "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid}[kind](xs)


def layer_forward(kind, p, ptext, x, w, in_shape, train=False):
    """Layer `kind` in torch on the inputs x and the weights w (flat, in our order): its
    output, or None where this file has no counterpart. in_shape: the first input's shape
    as the manifest prints it. train: the training forward (batch norm by the batch's
    statistics, as ref_dump --grads computes it)."""
    if kind == "embedding":
        vocab, dim = int(p["num_embeddings"]), int(p["embedding_dim"])
        ids = torch.clamp(torch.floor((x[0].double() + 1.0) * 0.5 * vocab), 0, vocab - 1).long()
        y = torch.nn.functional.embedding(ids, w.view(vocab, dim))
    elif kind == "rmsnorm":
        y = rmsnorm(x[0], w + float(p.get("weight_offset", 0)), float(p["eps"]))  # Gemma: 1 + weight
    elif kind == "linear":
        o = int(p["out_features"])
        f = (w.numel() - (o if p["bias"] else 0)) // o  # the input may be the model's, flat
        y = torch.nn.functional.linear(x[0].reshape(-1, f), w[: o * f].view(o, f), w[o * f:] if p["bias"] else None)
    elif kind == "rope":
        y = rope(x[0], p)
    elif kind == "attention":
        y = attention(x[0], x[1], x[2], w, p)
    elif kind == "moe":
        y = moe(x[0], x[1], w, p)
    elif kind == "mla":
        y = mla(x[0], x[1], w, p)
    elif kind == "add":
        y = x[0] + x[1]
    elif kind == "mul":
        y = x[0] * x[1]
    elif kind == "silu":
        y = torch.nn.functional.silu(x[0])
    elif kind == "channel_shuffle":  # ShuffleNet's view, transpose(1, 2), view back
        in_shape = [int(v) for v in in_shape.strip("[]").split(",")]
        g = int(p["groups"])
        y = x[0].reshape(in_shape[0], g, in_shape[1] // g, *in_shape[2:]).transpose(1, 2).reshape(in_shape)
    elif kind == "slice":  # x.narrow(dim, start, end - start)
        in_shape = [int(v) for v in in_shape.strip("[]").split(",")]
        d, start = int(p.get("dim", 1)), int(p.get("start", 0))
        y = x[0].reshape(in_shape).narrow(d, start, int(p["end"]) - start)
    elif kind == "permute":  # torch.permute(x, dims), dims as bench list prints them, "0x2x3x1"
        in_shape = [int(v) for v in in_shape.strip("[]").split(",")]
        y = x[0].reshape(in_shape).permute(*[int(d) for d in p["dims"].split("x")])
    elif kind == "layer_scale":  # ConvNeXt's gamma [C, 1, 1] * x; CaiT's [D] * x
        in_shape = [int(v) for v in in_shape.strip("[]").split(",")]
        d = int(p.get("dim", 1))
        y = x[0].reshape(in_shape) * w.view([-1] + [1] * (len(in_shape) - 1 - d))
    elif kind == "model_input":  # its values, held as its weights
        y = w
    elif kind in ("flatten", "reshape"):  # views
        y = x[0]
    elif kind == "roll":  # torch.roll(x, shifts, dims), as bench list prints them, "1x-2"
        in_shape = [int(v) for v in in_shape.strip("[]").split(",")]
        y = torch.roll(x[0].reshape(in_shape), [int(v) for v in p["shifts"].split("x")],
                       [int(v) for v in p["dims"].split("x")])
    elif kind == "patch_merge":  # torchvision's own _patch_merging_pad
        from torchvision.models.swin_transformer import _patch_merging_pad
        y = _patch_merging_pad(x[0].reshape([int(v) for v in in_shape.strip("[]").split(",")]))
    elif kind == "window_attention":  # torchvision's ShiftedWindowAttention(V2) holding our weights
        y = window_attention(x[0].reshape([int(v) for v in in_shape.strip("[]").split(",")]), w, p)
    elif kind in ("window_partition", "window_merge"):  # MaxViT's WindowPartition, WindowDepartition
        from torchvision.models import maxvit
        size = int(str(p["window_size"]).split("x")[0])
        xs = x[0].reshape([int(v) for v in in_shape.strip("[]").split(",")])
        if kind == "window_partition":
            y = maxvit.WindowPartition()(xs, size)
        else:
            parts = [int(v) for v in str(p["partitions"]).split("x")]
            y = maxvit.WindowDepartition()(xs, size, parts[0], parts[-1])
    elif kind == "groupnorm":  # nn.GroupNorm: gamma[C] then beta[C] with affine
        in_shape = [int(v) for v in in_shape.strip("[]").split(",")]
        c = in_shape[1]
        y = torch.nn.functional.group_norm(x[0].reshape(in_shape), int(p["num_groups"]), w[:c] if w is not None else None,
                                           w[c:] if w is not None else None, float(p["eps"]) if "eps=" in ptext else 1e-5)
    elif kind == "mean":  # x.mean(dim, keepdim); dim as bench list prints a pair, "2x3" or "1"
        dims = sorted({int(d) for d in str(p["dim"]).split("x")})
        in_shape = [int(v) for v in in_shape.strip("[]").split(",")]
        y = x[0].reshape(in_shape).double().mean(dim=dims, keepdim=bool(p.get("keepdim", False))).float()
    elif kind in VISION:
        y = vision_forward(kind, p, ptext, x, w, [int(v) for v in in_shape.strip("[]").split(",")], train)
    else:
        return None
    return y


def main():
    out_dir = sys.argv[1]
    tol = float(sys.argv[2]) if len(sys.argv) > 2 else 1e-5
    rows = [line.rstrip("\n").split("\t") for line in open(f"{out_dir}/manifest.tsv")]
    load = lambda name: torch.from_numpy(np.fromfile(f"{out_dir}/{name}", dtype="<f4"))
    vals = [load("input.bin")]
    worst, bad = 0.0, 0
    seen = set()
    first = [r for r in rows if r[5].split(",")[0] == "0"]  # the model input, in its shape
    if first:
        vals[0] = vals[0].reshape([int(v) for v in first[0][7].strip("[]").split(",")])
    for idx, name, kind, wn, shape, ins, ptext, in_shape in rows:
        p = params(ptext)
        shape = [int(x) for x in shape.strip("[]").split(",")]
        x = [vals[int(i)] for i in ins.split(",")]
        w = load(f"w{idx}.bin") if int(wn) else None
        y = layer_forward(kind, p, ptext, x, w, in_shape)
        if y is None:
            print(f"llm_torch_check: no torch counterpart for kind {kind}", file=sys.stderr)
            return 2
        y = y.reshape(shape)
        ours = load(f"out{idx}.bin").view(shape)
        err = ((y.double() - ours.double()).norm() / max(y.double().norm().item(), 1e-30)).item()
        worst = max(worst, err)
        if err > tol:
            bad += 1
            print(f"  {name} ({kind}): relative error {err:.2e} above {tol:.0e}")
        if kind not in seen:
            seen.add(kind)
            print(f"  {kind:<10} {name}: {err:.2e}")
        vals.append(y)
    print(f"llm_torch_check: {len(rows)} layers, worst relative error {worst:.2e}, {bad} above {tol:.0e}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
