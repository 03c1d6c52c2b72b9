#!/usr/bin/env python3
"""Writes a layerbench config from a PyTorch model, so no model has to be transcribed by hand.

usage:
  python3 scripts/torch_export.py resnet50 -o configs/resnet50.yaml
  python3 scripts/torch_export.py mypackage.models:MyNet --input 3,224,224 -o my.yaml
  python3 scripts/torch_export.py googlenet --table tests/data/googlenet_layers.txt
  python3 scripts/torch_export.py hf_decoder:tiny_llama --input-ids 5 -o tiny_llama.yaml
  python3 scripts/torch_export.py unet_blocks:resblock --input 320,64,64 --input 1280 -o resblock.yaml

MODEL is a torchvision model name (built with weights=None, in eval mode; a segmentation
model such as fcn_resnet50 without its auxiliary classifier) or
"module:callable" (anything importable that returns an nn.Module). The model runs once
on a random input of --input (per sample; default 3,224,224) and --batch (default 1), and
a random tensor of each further --input for each further argument its forward takes
(recorded as model_input layers: a UNet block's timestep embedding, its text states);
what runs is recorded: every leaf module layerbench has a kind for (Conv2d, BatchNorm2d,
ReLU, Linear, ...), named by its module path as in model.named_modules(), and every
functional operation between them (torch.cat, x + y, scale * x, F.relu, torch.flatten,
F.adaptive_avg_pool2d, x.mean([2, 3]), x[:, a:b], x.chunk, x.permute, ShuffleNet's channel shuffle,
a layer scale (a learned vector times x), F.layer_norm in a module's own forward (ConvNeXt's
LayerNorm2d), torch.roll, ...); torchvision's ShiftedWindowAttention(V2) is one
window_attention layer and Swin's _patch_merging_pad one patch_merge layer, MaxViT's
window partition, axis swap, attention and departition one layer each,
named after the module whose forward called it plus the
operation (layer1.0.add, inception3a.cat; a second call of one operation in the same
forward gets _1, as torch.fx names them). Which layer feeds which comes from the
tensors themselves, so any graph (residuals, branches, DenseNet's concatenations) is
written exactly, with explicit `input`/`inputs` references where a layer does not read
the one before it; layers are grouped in blocks by module path.

--input-ids T feeds T token ids per sample instead (a decoder LLM's prefill). A decoder
written as transformers writes Llama, Mistral or Qwen2 exports as bench imports its
config.json: nn.Embedding, ...RMSNorm modules, attention modules holding q_proj, k_proj,
v_proj and o_proj (between them rope of q and k and the attention, read from the
module's heads and the rotary embedding's inv_freq), the SwiGLU MLP and a tied or untied
lm_head (scripts/hf_decoder.py: such a model in plain torch). Attention modules holding
to_q, to_k, to_v and to_out (a diffusion UNet's, scripts/unet_blocks.py) give those
linears and a non-causal attention layer between them (cross-attention when k and v
read another input); the module must end at to_out, or it is refused. timm's packed
Attention (qkv, proj, num_heads: ViT's, DiT's) gives qkv, its thirds as q, k and v
slices, an attention layer and proj. Attention is also found by what it computes,
whatever the names: a module whose own forward runs a softmax (found by running the model
once before the trace) between linear children laid out as attention's, one packed
projection to 3C and an out projection C -> C, or q, k, v and o, gives those linears and
an attention layer whose heads, causal mask and scale are fitted to the module's output,
with rope where the model's rotary embedding (a module holding inv_freq) makes it match
(nanoGPT's CausalSelfAttention, GPT-2's attention with its scale per layer, a Llama
attention that keeps its heads under names of its own). A module without a kind holding
one vector over the last dim that computes an RMSNorm with it (x / rms(x) * w, or Gemma's
* (1 + w)) is an rmsnorm layer, whatever it and the vector are called; such a module inside
an attention module, applied to q or k (found by its input: the projection's output, per
head or whole), is placed between the projection and rope (Qwen3's q_norm per head between
two reshapes, OLMo 2's over the whole projection). A childless
module holding weight [in, out] and bias [out] that computes x @ weight + bias (Hugging
Face's Conv1D) is a linear layer with hf_conv1d; an nn.Embedding of torch.arange(T)
added to the token embeddings (GPT-2's and nanoGPT's wpe) is a pos_embedding layer.
nn.MultiheadAttention (batch first) with the causal mask is its in_proj as a linear, q, k
and v its thirds, a causal attention layer and out_proj; its cross-attention to another
tensor (nn.TransformerDecoderLayer's multihead_attn over the memory) is in_proj_q (in_proj's
first E rows) on the tokens, in_proj_kv (the other 2E) on the memory, k and v its halves,
an attention without a mask and out_proj; each checked to compute the module's output.
Meta's reference Llama (model.py: wq, wk, wv, wo, n_heads, n_kv_heads, repeat_kv, the mask
added to the scores) turns q and k as complex pairs with freqs_cis, passed to the
attention module: a complex [T, head_dim / 2] table of unit numbers among its arguments
is tried as rope with interleaved pairs, its theta read from one position's turn, and
kept where the module's output matches. A mixture of experts written as a loop (Mixtral's
and Qwen-MoE's sparse blocks: a module whose own forward runs topk, holding a linear router
to E logits and a list of E experts, each a SwiGLU MLP of three linears, found by what it
computes whatever they are called) is its router as a linear and a moe layer, with the
top_k and the renormalisation (or not) that give the module's output; one that holds more
(a shared expert) or computes something else is refused by name.
Arithmetic with a number (x + 1, 1 - x, x * 0.5, x / 8) is a scale_shift layer.

An attention module written as rope + attention is checked against what it computes:
its output must be what those layers give on the same q, k and v, on the traced input
and again on that input scaled until its scores reach about 200; one that differs (Gemma
2's logit soft-cap, another query scale, a norm of q or k other than an RMSNorm, a mask)
is refused by name.

What layerbench cannot express is listed, and nothing is written (exit status 1): a
module or operation without a kind, a parameter the kind does not have (padding_mode
other than zeros, return_indices, ...). --table writes the reference layer table
(name, kind, input shape, output shape, params per line) that tests/test_config.c
checks each shipped config against, without torch.
Needs torch and torchvision (Debian: python3-torch python3-torchvision).
"""
import argparse
import csv
import importlib
import io
import json
import math
import os
import re
import sys
import tempfile
import warnings

# torchvision's Swin and MaxViT call torch.meshgrid without indexing= when built: torch's
# notice about it says nothing about the export
warnings.filterwarnings("ignore", message="torch.meshgrid")

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode
    import torchvision  # noqa: F401 (the model names)
except ImportError as e:
    sys.exit(f"torch_export: {e}: this script needs torch (1.13 or later) and torchvision in the python3 that "
             f"runs it ({sys.executable}); on Debian: apt-get install python3-torch python3-torchvision and run "
             f"it with /usr/bin/python3")

try:
    from torchvision.ops import StochasticDepth
except ImportError:  # an old torchvision
    StochasticDepth = None
try:
    from torchvision.models import maxvit as tv_maxvit, swin_transformer as tv_swin
except ImportError:  # before torchvision 0.13 (Swin), 0.14 (MaxViT)
    tv_swin = tv_maxvit = None


class Unsupported(Exception):
    pass


def pair(v):
    return [int(v[0]), int(v[1])] if isinstance(v, (tuple, list)) else [int(v), int(v)]


def compact(v):
    """[3, 3] -> 3 (layerbench and torch both take a single number for a square pair)."""
    return v[0] if isinstance(v, list) and len(v) == 2 and v[0] == v[1] else v


# ---- leaf modules ---------------------------------------------------------------------------


def conv_params(m, transposed):
    if m.padding_mode != "zeros":
        raise Unsupported(f"padding_mode '{m.padding_mode}' (only zeros)")
    if isinstance(m.padding, str):
        raise Unsupported(f"padding '{m.padding}' (give it as numbers)")
    p = {"out_channels": m.out_channels, "kernel_size": compact(pair(m.kernel_size))}
    if pair(m.stride) != [1, 1]:
        p["stride"] = compact(pair(m.stride))
    if pair(m.padding) != [0, 0]:
        p["padding"] = compact(pair(m.padding))
    if transposed and pair(m.output_padding) != [0, 0]:
        p["output_padding"] = compact(pair(m.output_padding))
    if pair(m.dilation) != [1, 1]:
        p["dilation"] = compact(pair(m.dilation))
    if m.groups != 1:
        p["groups"] = m.groups
    if m.bias is None:
        p["bias"] = False
    return p


def module_layer(m):
    """(kind, params) for a leaf module; None for one that is the identity; raises
    Unsupported for a module layerbench cannot express."""
    if isinstance(m, nn.Conv2d):
        return "conv2d", conv_params(m, False)
    if isinstance(m, nn.ConvTranspose2d):
        return "conv_transpose2d", conv_params(m, True)
    if isinstance(m, nn.BatchNorm2d):
        if not m.track_running_stats:
            raise Unsupported("BatchNorm2d without running statistics (batch statistics at inference)")
        p = {}
        if m.eps != 1e-5:
            p["eps"] = m.eps
        if not m.affine:
            p["affine"] = False
        return "batchnorm2d", p
    simple = {nn.ReLU: "relu", nn.ReLU6: "relu6", nn.Sigmoid: "sigmoid", nn.SiLU: "silu", nn.Hardswish: "hardswish",
              nn.Hardsigmoid: "hardsigmoid", nn.Tanh: "tanh"}
    for cls, kind in simple.items():
        if type(m) is cls:
            return kind, {"inplace": True} if getattr(m, "inplace", False) else {}
    if isinstance(m, nn.MaxPool2d):
        if m.return_indices:
            raise Unsupported("MaxPool2d with return_indices")
        return "maxpool2d", pool_params(m.kernel_size, m.stride, m.padding, m.ceil_mode, dilation=m.dilation)
    if isinstance(m, nn.AvgPool2d):
        if m.divisor_override:
            raise Unsupported("AvgPool2d with divisor_override")
        return "avgpool2d", pool_params(m.kernel_size, m.stride, m.padding, m.ceil_mode,
                                        count_include_pad=m.count_include_pad)
    if isinstance(m, nn.AdaptiveAvgPool2d):
        size = m.output_size
        if isinstance(size, (tuple, list)) and None in size:
            raise Unsupported("AdaptiveAvgPool2d with a None output size")
        return "adaptive_avgpool2d", {"output_size": compact(pair(size))}
    if isinstance(m, nn.Flatten):
        if m.start_dim != 1 or m.end_dim != -1:
            raise Unsupported(f"Flatten({m.start_dim}, {m.end_dim}) (only from dim 1 to the end)")
        return "flatten", {}
    if type(m).__name__ == "Permute" and isinstance(getattr(m, "dims", None), (list, tuple)):
        # torchvision.ops.misc.Permute (ConvNeXt, Swin): torch.permute(x, dims)
        perm = [int(d) for d in m.dims]
        if len(perm) < 2 or perm[0] != 0 or sorted(perm) != list(range(len(perm))):
            raise Unsupported(f"Permute {perm} (the batch must stay first)")
        moved = [i for i, d in enumerate(perm) if d != i]
        return ("transpose", {"dim0": moved[0], "dim1": moved[1]}) if len(moved) == 2 else ("permute", {"dims": perm})
    if isinstance(m, getattr(nn, "ChannelShuffle", ())):
        return "channel_shuffle", {"groups": m.groups}
    if isinstance(m, nn.Linear):
        return "linear", {"out_features": m.out_features, **({} if m.bias is not None else {"bias": False})}
    if is_conv1d(m):  # Hugging Face's Conv1D (GPT-2): x @ weight + bias, checked against its output (Trace.post)
        return "linear", {"out_features": m.weight.shape[1], "hf_conv1d": True}
    if isinstance(m, (nn.Dropout, nn.Dropout2d)):
        return "dropout", {"p": m.p} if m.p != 0.5 else {}
    if isinstance(m, nn.Softmax):
        return "softmax", {"dim": m.dim if m.dim is not None else 1}
    if isinstance(m, nn.Upsample):
        return "upsample", upsample_params(m.size, m.scale_factor, m.mode, m.align_corners)
    if StochasticDepth is not None and isinstance(m, StochasticDepth):
        return "stochastic_depth", {"p": m.p, "mode": m.mode}
    if isinstance(m, nn.GroupNorm):
        p = {"num_groups": m.num_groups}
        if m.eps != 1e-5:
            p["eps"] = m.eps
        if not m.affine:
            p["affine"] = False
        return "groupnorm", p
    if isinstance(m, nn.LayerNorm):
        if own_forward(m, nn.LayerNorm):
            raise Unsupported(f"{type(m).__name__} (its own forward is recorded operation by operation)")
        if len(m.normalized_shape) != 1:
            raise Unsupported(f"LayerNorm over {tuple(m.normalized_shape)} (only the last dimension)")
        p = {}
        if m.eps != 1e-5:
            p["eps"] = m.eps
        if not m.elementwise_affine:
            p["elementwise_affine"] = False
        elif getattr(m, "bias", True) is None:
            p["bias"] = False
        return "layernorm", p
    if isinstance(m, nn.GELU):
        return "gelu", {"approximate": "tanh"} if m.approximate == "tanh" else {}
    if isinstance(m, nn.MultiheadAttention):
        if not m.batch_first:
            raise Unsupported("MultiheadAttention with batch_first=False (layerbench's tokens are [N, S, E])")
        if not m._qkv_same_embed_dim or m.bias_k is not None or m.add_zero_attn:
            raise Unsupported("MultiheadAttention with kdim/vdim, add_bias_kv or add_zero_attn")
        p = {"embed_dim": m.embed_dim, "num_heads": m.num_heads}
        if m.in_proj_bias is None:
            p["bias"] = False
        if m.dropout:
            p["dropout"] = m.dropout
        return "multihead_attention", p
    if tv_swin is not None and isinstance(m, tv_swin.ShiftedWindowAttention):
        return "window_attention", window_attention_params(m)
    if tv_maxvit is not None:
        maxvit = maxvit_layer(m)
        if maxvit:
            return maxvit
    if isinstance(m, nn.Identity):
        return None
    if isinstance(m, nn.Embedding):
        if m.max_norm is not None:
            raise Unsupported("Embedding with max_norm (it rewrites the table as it reads it)")
        return "embedding", {"num_embeddings": m.num_embeddings, "embedding_dim": m.embedding_dim}
    if is_rmsnorm(m):
        return "rmsnorm", rmsnorm_params(m)
    if is_rotary(m):
        return "rotary_source", {}
    raise Unsupported(f"module {type(m).__name__}")


def window_attention_params(m):
    """torchvision's ShiftedWindowAttention and ShiftedWindowAttentionV2 (Swin), as torch
    runs them at inference (no dropout)."""
    v2 = isinstance(m, tv_swin.ShiftedWindowAttentionV2)
    if type(m).forward not in (tv_swin.ShiftedWindowAttention.forward, tv_swin.ShiftedWindowAttentionV2.forward):
        raise Unsupported(f"{type(m).__name__} with a forward of its own")
    if v2:
        mlp = list(m.cpb_mlp)
        if len(mlp) != 3 or mlp[0].out_features != 512 or mlp[2].bias is not None:
            raise Unsupported("ShiftedWindowAttentionV2 with a position MLP other than torchvision's (2 -> 512 -> heads)")
    p = {"num_heads": m.num_heads, "window_size": compact(list(m.window_size))}
    if any(m.shift_size):
        p["shift_size"] = compact(list(m.shift_size))
    if m.qkv.bias is None:
        p["qkv_bias"] = False
    if m.proj.bias is None:
        p["proj_bias"] = False
    if v2:
        p["cosine"] = True
    return p


def maxvit_layer(m):
    """MaxViT's modules (torchvision's maxvit.py): the window partition and departition
    (their sizes come with each call: post() fills them in), the axis swap of grid attention,
    and its attention on windows; None for any other module."""
    if type(m) is tv_maxvit.WindowPartition:
        return "window_partition", {}
    if type(m) is tv_maxvit.WindowDepartition:
        return "window_merge", {}
    if type(m) is tv_maxvit.SwapAxes:  # torch.swapaxes on [B, G, P, C]
        a, b = sorted(d % 4 for d in (m.a, m.b))
        if a == 0:
            raise Unsupported("SwapAxes of the batch")
        return "transpose", {"dim0": a, "dim1": b}
    if type(m) is tv_maxvit.RelativePositionalMultiHeadAttention:
        return "window_attention", {"num_heads": m.n_heads, "window_size": m.size, "partitioned": True,
                                    "scale": m.scale_factor}
    return None


# ---- decoder LLMs: modules recognised by what they hold, as transformers writes them --------


def is_rmsnorm(m):
    """nn.RMSNorm (torch 2.4 and later), or a module named like transformers' LlamaRMSNorm
    (Mistral, Qwen2, Mixtral: the same arithmetic) with its weight over the last dimension."""
    if hasattr(nn, "RMSNorm") and isinstance(m, nn.RMSNorm):
        return True
    name = type(m).__name__
    return name.endswith("RMSNorm") and isinstance(getattr(m, "weight", None), nn.Parameter) and \
        m.weight.dim() == 1 and len(list(m.children())) == 0


def rmsnorm_params(m):
    name = type(m).__name__
    if name.startswith("Gemma") or name.startswith("Olmo"):
        raise Unsupported(f"module {name} (it scales by 1 + weight, or normalises q and k; layerbench's "
                          f"rmsnorm is Llama's x / rms(x) · weight)")
    if hasattr(nn, "RMSNorm") and isinstance(m, nn.RMSNorm):
        if len(m.normalized_shape) != 1:
            raise Unsupported(f"RMSNorm over {tuple(m.normalized_shape)} (only the last dimension)")
        if not m.elementwise_affine:
            raise Unsupported("RMSNorm without a weight")
        eps = m.eps if m.eps is not None else torch.finfo(torch.float32).eps
    else:
        eps = getattr(m, "variance_epsilon", getattr(m, "eps", None))
        if not isinstance(eps, float):
            raise Unsupported(f"module {name}: no variance_epsilon or eps to read")
    return {} if eps == 1e-6 else {"eps": eps}


def is_rotary(m):
    """The rotary embedding's cos/sin tables (LlamaRotaryEmbedding): what they feed is the
    attention's, recorded as its rope layers; they are not a layer of their own."""
    return "Rotary" in type(m).__name__ and isinstance(getattr(m, "inv_freq", None), torch.Tensor)


def rope_theta(inv_freq, head_dim):
    """rope_theta of a default (unscaled) rotary embedding, read back from its frequencies
    theta^(-2i/head_dim); None where they are rescaled (rope_scaling) or do not fit."""
    f = inv_freq.detach().double().flatten()
    if f.numel() != head_dim // 2 or f.numel() < 2:
        return None
    theta = float(f[1]) ** (-head_dim / 2)
    for t in (round(theta), theta):
        want = 1.0 / (t ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        if torch.allclose(f, want, rtol=1e-5, atol=0):
            return float(t)
    return None


QKV_NAMES = {"q_proj": ("q_proj", "k_proj", "v_proj"), "to_q": ("to_q", "to_k", "to_v")}


def linear_children(m):
    """m's direct children that compute a linear map (nn.Linear, Conv1D), in order."""
    return [(n, c) for n, c in m.named_children() if isinstance(c, nn.Linear) or is_conv1d(c)]


def fitted_parts(m):
    """An attention module found by what it computes rather than by its names: one that
    runs a softmax in its own forward (Trace.softmax_modules) between linear children laid
    out as attention's: one packed projection to 3C and an out projection C -> C (nanoGPT's
    CausalSelfAttention, GPT-2's c_attn and c_proj), or q, k, v and o (k and v as wide,
    o reading q's width). Its heads, mask and scale are fitted to its output (fit_attention)."""
    lin = linear_children(m)
    width = lambda c: linear_weight(c).shape  # noqa: E731 ([out, in])
    if len(lin) == 2:
        (qn, qkv), (_, out) = lin
        (o3, c), (oo, oi) = width(qkv), width(out)
        if o3 == 3 * c and oi == c and oo == c:
            return (qn,), out
    if len(lin) == 4:
        (qn, q), (kn, k), (vn, v), (_, o) = lin
        (qo, qi), (ko, ki), (vo, vi), (oo, oi) = width(q), width(k), width(v), width(o)
        if qi == ki == vi and ko == vo and qo % ko == 0 and oi == qo:
            return (qn, kn, vn), o
    return None


def attention_parts(m, fitted=()):
    """(q, k, v projection names, the out projection) of an attention module, or None; a
    packed one (timm's Attention: qkv, proj, num_heads) gives ("qkv",). fitted: the ids of
    the modules that run a softmax of their own, whose parts fitted_parts finds."""
    if isinstance(getattr(m, "qkv", None), nn.Linear) and isinstance(getattr(m, "proj", None), nn.Linear) and \
            isinstance(getattr(m, "num_heads", None), int):
        return ("qkv",), m.proj
    for first, names in QKV_NAMES.items():
        if all(isinstance(getattr(m, n, None), nn.Linear) for n in names):
            out = getattr(m, "o_proj", None)
            if out is None and isinstance(getattr(m, "to_out", None), (nn.Sequential, nn.ModuleList)) and \
                    len(m.to_out) and isinstance(m.to_out[0], nn.Linear):
                out = m.to_out[0]
            if isinstance(out, nn.Linear):
                return names, out
    return fitted_parts(m) if id(m) in fitted else None


def packed_attention_spec(m):
    """timm's Attention (ViT, DiT): one qkv linear whose output holds q, k and v side by
    side (heads contiguous in each), proj; no mask, scale 1/sqrt(head_dim), no q/k norm."""
    c, heads = m.qkv.in_features, m.num_heads
    if m.qkv.out_features != 3 * c or c % heads:
        raise Unsupported(f"module {type(m).__name__}: qkv of {m.qkv.out_features} features is not 3 x {c} "
                          f"in {heads} heads")
    head_dim = c // heads
    scale = getattr(m, "scale", head_dim ** -0.5)
    if not isinstance(scale, float) or abs(scale - head_dim ** -0.5) > 1e-6 * head_dim ** -0.5:
        raise Unsupported(f"module {type(m).__name__}: a scale of {scale} (only 1/sqrt(head_dim))")
    other = [n for n, ch in m.named_children()
             if n not in ("qkv", "proj") and not isinstance(ch, (nn.Dropout, nn.Identity))]
    if other:
        raise Unsupported(f"module {type(m).__name__}: holds {', '.join(other)}, which its attention layer would "
                          f"leave out")
    return {"num_heads": heads, "head_dim": head_dim, "causal": False}, None


def unet_attention_spec(m):
    """The attention of diffusion UNets (LDM's CrossAttention, diffusers' Attention with its
    plain processor): to_q, to_k, to_v, to_out[0] (then dropout), heads; self-attention, or
    cross-attention when k and v read a context; no mask, scale 1/sqrt(head_dim)."""
    heads = getattr(m, "heads", None)
    if not isinstance(heads, int) or m.to_q.out_features % heads:
        raise Unsupported(f"module {type(m).__name__}: no heads attribute dividing to_q's {m.to_q.out_features} "
                          f"features")
    head_dim = m.to_q.out_features // heads
    if m.to_k.out_features != m.to_q.out_features or m.to_v.out_features != m.to_q.out_features:
        raise Unsupported(f"module {type(m).__name__}: to_q, to_k and to_v of different widths")
    scale = getattr(m, "scale", head_dim ** -0.5)
    if not isinstance(scale, float) or abs(scale - head_dim ** -0.5) > 1e-6 * head_dim ** -0.5:
        raise Unsupported(f"module {type(m).__name__}: a scale of {scale} (only 1/sqrt(head_dim))")
    known = {"to_q", "to_k", "to_v", "to_out"}
    other = [n for n, c in m.named_children() if n not in known and not isinstance(c, (nn.Dropout, nn.Identity))]
    if other:
        raise Unsupported(f"module {type(m).__name__}: holds {', '.join(other)}, which its attention layer would "
                          f"leave out")
    return {"num_heads": heads, "head_dim": head_dim, "causal": False}, None


FIT = ("fit", None)  # an attention module whose heads, mask and scale are fitted to its output


def attention_spec(m, model, fitted=()):
    """(params, rope params) of a transformers-style attention module (LlamaAttention,
    MistralAttention, Qwen2Attention: q_proj, k_proj, v_proj and o_proj, the heads as
    attributes or in its config), or of a UNet's (unet_attention_spec: no rope); None for
    any other module; raises Unsupported for one that is such a module but not one
    layerbench can express."""
    parts = attention_parts(m, fitted)
    if parts and parts[0][0] == "to_q":
        return unet_attention_spec(m)
    if parts and parts[0] == ("qkv",):
        return packed_attention_spec(m)
    if id(m) in fitted and fitted_parts(m):
        try:
            spec = named_attention_spec(m, model)
        except Unsupported:  # heads or rope not to be read from its names: fitted to what it computes
            spec = None
        return spec or FIT
    return named_attention_spec(m, model)


def named_attention_spec(m, model):
    """attention_spec of a module with q_proj, k_proj, v_proj and o_proj and its heads as
    attributes; None for one without them."""
    if not all(isinstance(getattr(m, p, None), nn.Linear) for p in ("q_proj", "k_proj", "v_proj", "o_proj")):
        return None
    cfg = getattr(m, "config", None)
    get = lambda a, c: getattr(m, a, None) or getattr(cfg, c, None)  # noqa: E731
    heads = get("num_heads", "num_attention_heads")
    head_dim = getattr(m, "head_dim", None)
    if heads is None and head_dim:
        heads = m.q_proj.out_features // head_dim
    if heads is None:
        raise Unsupported(f"module {type(m).__name__}: no num_heads or head_dim to read the heads from")
    head_dim = head_dim or m.q_proj.out_features // heads
    kv_heads = get("num_key_value_heads", "num_key_value_heads")
    if kv_heads is None and getattr(m, "num_key_value_groups", None):
        kv_heads = heads // m.num_key_value_groups
    kv_heads = kv_heads or heads
    if m.q_proj.out_features != heads * head_dim or m.k_proj.out_features != kv_heads * head_dim or \
            m.v_proj.out_features != kv_heads * head_dim:
        raise Unsupported(f"module {type(m).__name__}: q/k/v_proj of {m.q_proj.out_features}/"
                          f"{m.k_proj.out_features}/{m.v_proj.out_features} features do not make "
                          f"{heads} heads and {kv_heads} kv heads of {head_dim}")
    rotary = [r for r in list(m.modules()) + list(model.modules()) if is_rotary(r)]
    if not rotary:
        raise Unsupported(f"module {type(m).__name__}: no rotary embedding (a module with inv_freq) to read "
                          f"rope_theta from")
    theta = rope_theta(rotary[0].inv_freq, head_dim)
    if theta is None or getattr(rotary[0], "attention_scaling", 1.0) != 1.0:
        raise Unsupported(f"{type(rotary[0]).__name__} with rescaled frequencies (rope_scaling): give rope_type "
                          f"and its factors in the config by hand, or import the model's config.json")
    rope = {"head_dim": head_dim}
    if theta != 10000:
        rope["rope_theta"] = theta
    p = {"num_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim}
    if not getattr(m, "is_causal", True):
        p["causal"] = False
    window = getattr(m, "sliding_window", None)
    if window:
        p["sliding_window"] = int(window)
    return p, rope


def pool_params(kernel_size, stride, padding, ceil_mode, dilation=1, count_include_pad=True):
    """maxpool2d's and avgpool2d's parameters, from the module or from F.max_pool2d and
    F.avg_pool2d (stride None or []: the kernel size, as torch takes it)."""
    p = {"kernel_size": compact(pair(kernel_size))}
    stride = pair(stride if stride not in (None, [], ()) else kernel_size)
    if stride != pair(kernel_size):
        p["stride"] = compact(stride)
    if pair(padding) != [0, 0]:
        p["padding"] = compact(pair(padding))
    if pair(dilation) != [1, 1]:
        p["dilation"] = compact(pair(dilation))
    if ceil_mode:
        p["ceil_mode"] = True
    if not count_include_pad:
        p["count_include_pad"] = False
    return p


def upsample_params(size, scale_factor, mode, align_corners):
    if mode not in ("nearest", "bilinear"):
        raise Unsupported(f"upsampling mode '{mode}' (nearest and bilinear only)")
    p = {}
    if size is not None:
        p["size"] = compact(pair(size))
    else:
        sf = list(scale_factor) if isinstance(scale_factor, (tuple, list)) else [scale_factor, scale_factor]
        p["scale_factor"] = sf[0] if sf[0] == sf[1] else sf
    if mode != "nearest":
        p["mode"] = mode
    if align_corners:
        p["align_corners"] = True
    return p


def is_conv1d(m):
    """A module without children holding exactly weight [in, out] and bias [out] that is
    not nn.Linear: Hugging Face's Conv1D, x @ weight + bias (what it computes is checked
    when it runs: Trace.post)."""
    if isinstance(m, nn.Linear) or list(m.children()):
        return False
    p = dict(m.named_parameters(recurse=False))
    w, b = p.get("weight"), p.get("bias")
    return set(p) == {"weight", "bias"} and w.dim() == 2 and b.dim() == 1 and b.shape[0] == w.shape[1]


def linear_weight(m):
    """The [out, in] weight of a linear-like module (nn.Linear's own, Conv1D's transposed)."""
    return m.weight.t() if is_conv1d(m) else m.weight


def own_forward(m, base):
    """m is a subclass of base with a forward of its own (torchvision's LayerNorm2d
    permutes, normalizes the last dim and permutes back): its operations are recorded."""
    return isinstance(m, base) and type(m).forward is not base.forward


def is_leaf(m):
    """Modules recorded as one layer: those with a kind, and modules without children."""
    if own_forward(m, nn.LayerNorm):
        return False
    try:
        module_layer(m)
        return True
    except Unsupported:
        return len(list(m.children())) == 0


# ---- functional operations ------------------------------------------------------------------

ELEMENTWISE = {"relu": "relu", "relu_": "relu", "relu6": "relu6", "sigmoid": "sigmoid", "sigmoid_": "sigmoid",
               "silu": "silu", "hardswish": "hardswish", "hardsigmoid": "hardsigmoid", "tanh": "tanh",
               "tanh_": "tanh"}


def group_split(x, out):
    """x [N, C, H, W] viewed as [N, g, C / g, H, W]: the start of a channel shuffle."""
    return x.dim() == 4 and out.dim() == 5 and out.shape[0] == x.shape[0] and \
        out.shape[1] * out.shape[2] == x.shape[1] and tuple(out.shape[3:]) == tuple(x.shape[2:])


def flatten_dims(x, out):
    """(start, end) such that flattening x's dims start..end gives out's shape, or None."""
    xs, os_ = list(x.shape), list(out.shape)
    for a in range(1, len(xs)):
        for b in range(a, len(xs)):
            merged = 1
            for d in xs[a:b + 1]:
                merged *= d
            if xs[:a] + [merged] + xs[b + 1:] == os_:
                return a, b
    return None
def unsqueezed(args):
    """x[:, :, None, None]: whole slices and Nones, a view that adds dims."""
    idx = args[1] if len(args) > 1 else None
    return isinstance(idx, tuple) and None in idx and all(i is None or i == slice(None) for i in idx)


ADD = {"add", "add_", "__add__", "__iadd__", "__radd__"}
SUB = {"sub", "sub_", "__sub__", "__isub__"}
RSUB = {"__rsub__", "rsub"}
DIV = {"div", "div_", "__truediv__", "__itruediv__"}
MUL = {"mul", "mul_", "__mul__", "__imul__", "__rmul__"}


def function_layer(name, args, kwargs, out):
    """(kind, params, tensor inputs) for a functional operation; raises Unsupported."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if name in ELEMENTWISE:
        return ELEMENTWISE[name], {}, tensors[:1]
    numbers = [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
    if name in ADD | MUL | SUB | RSUB | DIV and len(tensors) == 1 and len(numbers) == 1 and kwargs.get("alpha", 1) == 1:
        # a tensor and a number: x + c, c + x, x * c, x - c, c - x, x / c
        c = float(numbers[0])
        scale, shift = ((1.0, c) if name in ADD else (c, 0.0) if name in MUL else (1.0, -c) if name in SUB else
                        (-1.0, c) if name in RSUB else (1.0 / c if c else float("inf"), 0.0))
        if not (abs(scale) < float("inf")):
            raise Unsupported(f"{name} by zero")
        p = {}
        if scale != 1.0:
            p["scale"] = scale
        if shift:
            p["shift"] = shift
        return "scale_shift", p, tensors
    if name in ADD or name in MUL:
        if len(tensors) != 2 or kwargs.get("alpha", 1) != 1:
            raise Unsupported(f"{name} with a scalar or alpha (only tensor {name.strip('_')} tensor)")
        if tensors[0].dim() != tensors[1].dim():
            raise Unsupported(f"{name.strip('_')} of tensors of ranks {tensors[0].dim()} and {tensors[1].dim()} "
                              f"(broadcasting within one rank only)")
        return ("add" if name in ADD else "mul"), {}, tensors
    if name in ("cat", "concat"):
        seq = args[0]
        dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
        return "concat", ({} if dim in (1, 1 - out.dim()) else {"dim": dim}), list(seq)
    if name in ("flatten", "view", "reshape", "unsqueeze", "squeeze") or (name == "__getitem__" and unsqueezed(args)):
        x = tensors[0]
        dims = flatten_dims(x, out)
        if dims is None:
            if out.dim() < 2 or out.dim() > 4 or out.shape[0] != x.shape[0]:
                raise Unsupported(f"{name} of {tuple(x.shape)} to {tuple(out.shape)} (a view must keep the batch "
                                  f"first, with 1 to 3 dims after it)")
            return "reshape", {"shape": list(out.shape[1:])}, [x]
        p = {}
        if dims[0] != 1:
            p["start_dim"] = dims[0]
        if dims[1] != x.dim() - 1:
            p["end_dim"] = dims[1]
        return "flatten", p, [x]
    if name in ("permute", "transpose", "swapaxes"):
        x = tensors[0]
        if name == "permute":
            perm = list(args[1:]) if len(args) > 2 or not isinstance(args[1], (list, tuple)) else list(args[1])
        else:
            a, b = [d % x.dim() for d in args[1:3]]
            perm = list(range(x.dim()))
            perm[a], perm[b] = perm[b], perm[a]
        perm = [int(d) % x.dim() for d in perm]
        moved = [i for i, d in enumerate(perm) if d != i]
        if perm[0] != 0:
            raise Unsupported(f"{name} {perm} (the batch must stay first)")
        if len(moved) == 2:
            return "transpose", {"dim0": moved[0], "dim1": moved[1]}, [x]
        return "permute", {"dims": perm}, [x]
    if name == "__getitem__":
        x, idx = tensors[0], args[1]
        if (isinstance(idx, tuple) and len(idx) == 2 and idx[0] == slice(None) and isinstance(idx[1], int)):
            return "select", ({"index": idx[1]} if idx[1] != 0 else {}), [x]
        # x[:, a:b], x[:, :, a:b]: one range of one dim, the others whole
        if isinstance(idx, tuple) and len(idx) >= 2 and all(s == slice(None) for s in idx[:-1]) and \
                isinstance(idx[-1], slice) and idx[-1].step in (None, 1) and len(idx) <= x.dim():
            dim, s = len(idx) - 1, idx[-1]
            p = {"dim": dim} if dim != 1 else {}
            if s.start:
                p["start"] = s.start
            if s.stop is not None and s.stop < x.shape[dim]:
                p["end"] = s.stop
            return "slice", p, [x]
        raise Unsupported(f"indexing with {idx!r} (only x[:, i] and x[:, a:b])")
    if name == "gelu":
        approximate = kwargs.get("approximate", "none")
        return "gelu", ({"approximate": "tanh"} if approximate == "tanh" else {}), tensors[:1]
    if name == "adaptive_avg_pool2d":
        size = kwargs.get("output_size", args[1] if len(args) > 1 else None)
        return "adaptive_avgpool2d", {"output_size": compact(pair(size))}, tensors[:1]
    if name in ("avg_pool2d", "max_pool2d", "max_pool2d_with_indices"):
        avg = name == "avg_pool2d"
        names = (["kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"] if avg else
                 ["kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"])
        g = {k: kwargs.get(k, args[i + 1] if len(args) > i + 1 else None) for i, k in enumerate(names)}
        if g.get("divisor_override") or g.get("return_indices"):
            raise Unsupported(f"{name} with {'divisor_override' if avg else 'return_indices'}")
        p = pool_params(g["kernel_size"], g["stride"], g["padding"] or 0, g["ceil_mode"], dilation=g.get("dilation") or 1,
                        count_include_pad=g.get("count_include_pad") is not False)
        return ("avgpool2d" if avg else "maxpool2d"), p, tensors[:1]
    if name == "mean":
        x = tensors[0]
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        keepdim = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
        if kwargs.get("dtype") is not None:
            raise Unsupported("mean with a dtype")
        if dim is None:
            raise Unsupported("mean over every dim (it averages the batch too)")
        dims = sorted({int(d) % x.dim() for d in (dim if isinstance(dim, (list, tuple)) else [dim])})
        if 0 in dims or len(dims) > 2 or dims[-1] - dims[0] != len(dims) - 1:
            raise Unsupported(f"mean over dims {list(dim) if isinstance(dim, (list, tuple)) else dim} (one dim, or "
                              f"two next to each other, never the batch)")
        p = {"dim": dims[0] if len(dims) == 1 else dims}
        if keepdim:
            p["keepdim"] = True
        return "mean", p, [x]
    if name == "roll":
        x = tensors[0]
        shifts = kwargs.get("shifts", args[1] if len(args) > 1 else None)
        dims = kwargs.get("dims", args[2] if len(args) > 2 else None)
        if dims is None:
            raise Unsupported("roll without dims (it rolls the flattened tensor)")
        shifts, dims = [list(v) if isinstance(v, (list, tuple)) else [v] for v in (shifts, dims)]
        if any(int(d) % x.dim() == 0 for d in dims):
            raise Unsupported("roll along the batch")
        return "roll", {"shifts": [int(v) for v in shifts], "dims": [int(d) for d in dims]}, [x]
    if name in ("matmul", "bmm", "__matmul__"):  # two activations: attention written out by hand
        a, b = (tensors + [None, None])[:2]
        if b is None or a.dim() != b.dim() or a.dim() not in (3, 4) or a.shape[:-2] != b.shape[:-2]:
            raise Unsupported(f"{name} of {tuple(a.shape)} and {tuple(b.shape) if b is not None else 'a number'} "
                              f"(only [..., M, K] x [..., K, N] of rank 3 or 4 with the same leading dims)")
        return "matmul", {}, [a, b]
    if name == "softmax":
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if dim is None or kwargs.get("dtype") is not None:
            raise Unsupported("softmax without a dim, or with a dtype")
        return "softmax", {"dim": int(dim) % tensors[0].dim()}, tensors[:1]
    if name == "dropout":
        return "dropout", {}, tensors[:1]
    if name == "interpolate":
        g = lambda k, i: kwargs.get(k, args[i] if len(args) > i else None)  # noqa: E731
        return "upsample", upsample_params(g("size", 1), g("scale_factor", 2), g("mode", 3) or "nearest",
                                           g("align_corners", 4)), tensors[:1]
    raise Unsupported(f"operation {name}")


def turn(x, freq, interleaved):
    """x [N, heads, T, d] turned by rope at positions 0..T-1 and frequencies freq [d / 2]:
    rotate-half's pairs (i, i + d/2), or interleaved (2i, 2i + 1) as Meta's view_as_complex
    turns them."""
    d = x.shape[-1]
    angle = torch.arange(x.shape[-2], dtype=torch.float64)[:, None] * freq[None, :]
    if interleaved:
        pairs = x.reshape(*x.shape[:-1], d // 2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        c, s = angle.cos(), angle.sin()
        return torch.stack((a * c - b * s, b * c + a * s), -1).reshape(x.shape)
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    return x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * sin


def rope_candidates(model, call, d, tq, tk):
    """The ropes an attention module found by its softmax may apply, to be fitted to its
    output: [(theta, inv_freq, interleaved)]: the model's rotary embedding (a module with
    inv_freq: rotate-half), and complex tensors of [T, d / 2] unit numbers among the
    module's arguments (Meta's freqs_cis from torch.polar: interleaved pairs), each where its
    frequencies are theta^(-2i/d) for one theta."""
    if tq != tk:
        return []
    found = []
    for r in (m for m in (model.modules() if model is not None else []) if is_rotary(m)):
        theta = rope_theta(r.inv_freq, d)
        if theta is not None:
            found.append((theta, r.inv_freq.double().flatten(), False))
            break
    a, k = call
    for z in list(a) + list(k.values()):
        if isinstance(z, torch.Tensor) and z.is_complex() and z.dim() == 2 and z.shape[1] == d // 2 and \
                z.shape[0] >= 2 and torch.allclose(z.abs(), torch.ones(()), atol=1e-5):
            step = torch.angle(z[1].to(torch.complex128) * z[0].to(torch.complex128).conj())  # one position's turn
            theta = rope_theta(step, d)
            if theta is not None:
                found.append((theta, step, True))
    return found


def attention_differs(m, spec, model, qkv, o_proj, out):
    """How far the attention module's real output (out, its out projection's) lies from
    what the layers written for it compute on the same q, k and v (rope as layerbench
    defines it, from the rope layers' params; then the attention with its heads,
    causality, window and scale 1/sqrt(head_dim); then the out projection): the
    relative L2 difference, or 0 within fp32's rounding. What the module does that
    its layers would not (Gemma's soft-cap, another query scale, q/k norms) shows here,
    so no file leaves it out."""
    if out is None or any(t is None for t in qkv):
        return 0.0
    p, rope = spec
    with torch.no_grad():
        q, k, v = (t.double() for t in qkv)
        heads, kv_heads, d = p["num_heads"], p.get("num_key_value_heads", p["num_heads"]), p["head_dim"]
        n, t_q, t_k = q.shape[0], q.shape[-2], k.shape[-2]
        q = q.reshape(n, t_q, heads, d).transpose(1, 2)
        k = k.reshape(n, t_k, kv_heads, d).transpose(1, 2)
        v = v.reshape(n, t_k, kv_heads, d).transpose(1, 2)
        if rope is not None:  # as the rope layers compute it, from their params
            theta = rope.get("rope_theta", 10000.0)
            freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
            q, k = (turn(x, freq, rope.get("interleaved", False)) for x in (q, k))
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        scores = q @ k.transpose(-1, -2) * p.get("scale", d ** -0.5)
        i, j = torch.arange(t_q)[:, None], torch.arange(t_k)[None, :]
        if p.get("causal", True):
            scores = scores.masked_fill(j > i, float("-inf"))
        if p.get("sliding_window"):
            scores = scores.masked_fill(i - j >= p["sliding_window"], float("-inf"))
        att = (scores.softmax(-1) @ v).transpose(1, 2).reshape(n, t_q, heads * d)
        want = F.linear(att, linear_weight(o_proj).double(), None if o_proj.bias is None else o_proj.bias.double())
        got = out.detach().double().reshape(want.shape)
        diff = float((got - want).norm() / max(float(want.norm()), 1e-30))
    return diff if diff > 1e-4 else 0.0


def fit_attention(qkv, o_proj, out, model=None, call=((), {})):
    """The heads, mask and scale of an attention found by what it computes (fitted_parts):
    the first (heads, causal, scale) whose attention layer, then the out projection,
    gives the module's own output (heads by head_dim nearest 64 first; causal first; the
    scale 1/sqrt(head_dim), over k for k up to 64 as GPT-2 scales by layer, 1/head_dim or
    1), with each rope of rope_candidates (the model's rotary embedding, rotate-half; Meta's
    freqs_cis among the module's arguments, interleaved) and without; (params, rope params)
    or None where none does (another mask, a norm of q or k: refused by name)."""
    if out is None or any(t is None for t in qkv):
        return None
    with torch.no_grad():
        q, k, v = (t.detach().double() for t in qkv)
        wq, wk = q.shape[-1], k.shape[-1]
        n, tq, tk = q.shape[0], q.shape[-2], k.shape[-2]
        w = linear_weight(o_proj).double()
        b = None if o_proj.bias is None else o_proj.bias.double()
        got = out.detach().double()
        divisors = sorted((h for h in range(1, wq + 1) if wq % h == 0), key=lambda h: abs(math.log2(wq // h / 64)))
        for heads in divisors:
            d = wq // heads
            if wk % d or heads % (wk // d):
                continue
            kvh = wk // d
            qh0 = q.reshape(n, tq, heads, d).transpose(1, 2)
            kh0 = k.reshape(n, tk, kvh, d).transpose(1, 2).repeat_interleave(heads // kvh, dim=1)
            vh = v.reshape(n, tk, kvh, d).transpose(1, 2).repeat_interleave(heads // kvh, dim=1)
            for rope in [None] + rope_candidates(model, call, d, tq, tk):
                qh, kh = qh0, kh0
                if rope is not None:
                    qh, kh = turn(qh, rope[1], rope[2]), turn(kh, rope[1], rope[2])
                found = fit_scores(qh @ kh.transpose(-1, -2), vh, w, b, got, heads, kvh, d)
                if found == "shape":
                    return None
                if found is not None:
                    return found, None if rope is None else {"head_dim": d, **({} if rope[0] == 10000 else
                                                                                 {"rope_theta": rope[0]}),
                                                             **({"interleaved": True} if rope[2] else {})}
    return None


def fit_scores(raw, vh, w, b, got, heads, kvh, d):
    """The attention's params whose mask and scale on the raw scores q.k (rope applied or
    not) give the module's output got; None where none does, "shape" where they cannot."""
    n, tq, tk = raw.shape[0], raw.shape[-2], raw.shape[-1]
    i, j = torch.arange(tq)[:, None], torch.arange(tk)[None, :]
    for causal in ([True, False] if tq == tk else [False]):
        for scale in [d ** -0.5 / c for c in range(1, 65)] + [1.0 / d, 1.0]:
            s = raw * scale
            if causal:
                s = s.masked_fill(j > i, float("-inf"))
            att = (s.softmax(-1) @ vh).transpose(1, 2).reshape(n, tq, heads * d)
            want = F.linear(att, w, b)
            if got.shape != want.shape:
                return "shape"
            if float((got - want).norm() / max(float(want.norm()), 1e-30)) <= 1e-4:
                p = {"num_heads": heads, "head_dim": d, "scale": scale}
                if kvh != heads:
                    p["num_key_value_heads"] = kvh
                if not causal:
                    p["causal"] = False
                return p
    return None


def attention_scores_max(spec, qkv):
    """The largest |q.k| / sqrt(head_dim) of an attention's q and k (before rope: rope
    turns pairs, it does not scale them)."""
    p, _ = spec
    q, k = qkv[0].double(), qkv[1].double()
    heads, kv_heads, d = p["num_heads"], p.get("num_key_value_heads", p["num_heads"]), p["head_dim"]
    n = q.shape[0]
    q = q.reshape(n, q.shape[-2], heads, d).transpose(1, 2)
    k = k.reshape(n, k.shape[-2], kv_heads, d).transpose(1, 2).repeat_interleave(heads // kv_heads, dim=1)
    return float((q @ k.transpose(-1, -2)).abs().max()) / d ** 0.5


def expert_roles(e):
    """(gate, down, up) of a mixture's expert that computes a SwiGLU MLP, down(silu(gate x) *
    up x), whatever its linears are called (Mixtral's w1, w2, w3; gate_proj, down_proj,
    up_proj), found by running it on a random input; None for any other expert."""
    lin = [c for _, c in linear_children(e)]
    if len(lin) != 3 or sum(t.numel() for t in e.parameters()) != sum(t.numel() for c in lin for t in c.parameters()) \
            or len({c.bias is None for c in lin}) != 1:  # three linears, and nothing else holding parameters
        return None
    h = linear_weight(lin[0]).shape[1]
    ups = [c for c in lin if linear_weight(c).shape[1] == h]
    down = [c for c in lin if c not in ups]
    if len(ups) != 2 or len(down) != 1 or linear_weight(ups[0]).shape != linear_weight(ups[1]).shape or \
            linear_weight(down[0]).shape != linear_weight(ups[0]).shape[::-1]:
        return None
    x = torch.randn(5, h, generator=torch.Generator().manual_seed(0))
    lin64 = lambda c, v: F.linear(v, linear_weight(c).double(), None if c.bias is None else c.bias.double())  # noqa: E731
    with torch.no_grad():
        got = e(x).double()
        for g, u in (ups, ups[::-1]):
            want = lin64(down[0], F.silu(lin64(g, x.double())) * lin64(u, x.double()))
            if got.shape == want.shape and float((got - want).norm() / max(float(want.norm()), 1e-30)) <= 1e-5:
                return g, down[0], u
    return None


def moe_parts(m):
    """A mixture of experts written as a loop (Mixtral's MixtralSparseMoeBlock as a
    model.py copies it), found by what it holds and computes: a module whose own forward
    runs topk, holding a linear router to E logits and a list of E experts, each a SwiGLU
    MLP (expert_roles): ((router name, router), (experts name, experts, their roles)), None
    for a module without that layout; Unsupported for one that holds more (a shared
    expert: Qwen2-MoE's, DeepSeek's) or whose experts compute something else."""
    kids = [(n, c) for n, c in m.named_children() if not isinstance(c, (nn.Dropout, nn.Identity))]
    lists = [(n, c) for n, c in kids if isinstance(c, nn.ModuleList)]
    routers = [(n, c) for n, c in kids if isinstance(c, nn.Linear) and lists and c.out_features == len(lists[0][1])]
    if len(lists) != 1 or len(routers) != 1:
        return None
    other = [n for n, _ in kids if n not in (lists[0][0], routers[0][0])]
    if other:
        raise Unsupported(f"module {type(m).__name__} (a router and {len(lists[0][1])} experts): holds "
                          f"{', '.join(other)} besides, which a moe layer leaves out (a shared expert: import the "
                          f"model's config.json)")
    roles = [expert_roles(e) for e in lists[0][1]]
    bad = [i for i, r in enumerate(roles) if r is None]
    if bad:
        raise Unsupported(f"module {type(m).__name__}: expert {lists[0][0]}.{bad[0]} is not a SwiGLU MLP "
                          f"(down(silu(gate x) * up x) of three linears), the moe kind's expert")
    shapes = {tuple((tuple(linear_weight(c).shape), c.bias is None) for c in r) for r in roles}
    if len(shapes) != 1:
        raise Unsupported(f"module {type(m).__name__}: experts of different sizes")
    return routers[0], (lists[0][0], lists[0][1], roles)


def fit_moe(parts, x, out):
    """(top_k, normalize) of the moe layer that computes out from x with the router and
    experts of parts (moe_parts): the softmax of the router's logits, the top k, their
    probabilities renormalised or not, the experts' outputs weighted by them; None where
    none does."""
    (_, router), (_, _, roles) = parts
    lin = lambda c, v: F.linear(v, linear_weight(c).double(), None if c.bias is None else c.bias.double())  # noqa: E731
    with torch.no_grad():
        xs = x.detach().double().reshape(-1, x.shape[-1])
        probs = lin(router, xs).softmax(-1)
        ys = torch.stack([lin(d, F.silu(lin(g, xs)) * lin(u, xs)) for g, d, u in roles], 1)  # [R, E, H]
        got = out.detach().double().reshape(xs.shape[0], -1)
        if got.shape[1] != xs.shape[1]:
            return None
        for k in range(1, len(roles) + 1):
            p, pick = probs.topk(k, -1)
            for normalize in (True, False):
                gate = p / p.sum(-1, keepdim=True) if normalize else p
                want = (ys.gather(1, pick[..., None].expand(-1, -1, ys.shape[-1])) * gate[..., None]).sum(1)
                if float((got - want).norm() / max(float(want.norm()), 1e-30)) <= 1e-5:
                    return k, normalize
    return None


# ---- the trace ------------------------------------------------------------------------------


def norm_out(seen, ctx, i, x):
    """q (i 0) or k (1) as the attention module's norm of it left it, in x's shape, where it
    has one (Trace.qk_norms); else x."""
    if i not in ctx.get("norm_map", {}) or ("norm", i) not in seen or x is None:
        return x
    return ctx["norm_map"][i][1](seen[("norm", i)]).reshape(x.shape)


def causal_mask(mask, x):
    """mask is nn.MultiheadAttention's causal attn_mask for x [N, T, E]: [T, T], True or
    -inf above the diagonal (nn.Transformer.generate_square_subsequent_mask), 0 or False on
    and below it."""
    t = x.shape[1]
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != (t, t):
        return False
    above = torch.ones(t, t, dtype=torch.bool).triu(1)
    if mask.dtype == torch.bool:
        return torch.equal(mask, above)
    return bool(torch.all(torch.isneginf(mask) == above)) and bool(torch.all(mask[~above] == 0))


def thirds(x):
    """q, k and v of a packed projection's output: the thirds of its last dim."""
    c = x.shape[-1] // 3
    return [x[..., i * c:(i + 1) * c] for i in range(3)]


NOT_COMPUTED = "an input that is not computed from the model's input"


class Norm:
    """A norm of q or k found inside an attention module: its module path and the size of
    the dim it normalises."""

    def __init__(self, name, size):
        self.name, self.shape = name, (size,)


class Node:
    def __init__(self, name, kind, params, inputs, in_shape, out_shape, n_params):
        self.name, self.kind, self.params, self.inputs = name, kind, params, inputs
        self.in_shape, self.out_shape, self.n_params = in_shape, out_shape, n_params


class Trace(TorchFunctionMode):
    """Records leaf modules and the functional operations between them, in execution
    order, with which node produced each input (-1: the model input)."""

    def __init__(self, model):
        super().__init__()
        self.names = {m: n for n, m in model.named_modules()}
        self.param_names = {id(p): n for n, p in model.named_parameters()}
        self.param_of = {}     # id(tensor) -> (name, numel) of the parameter it was derived from (expand)
        self.calls = {}        # id(module) -> (args, kwargs) of its last call (MultiheadAttention)
        self.stack = []        # module paths of the modules being run
        self.leaf_depth = 0    # > 0 inside a leaf module: its own operations are not recorded
        self.producer = {}     # id(tensor) -> node index
        self.keep = []         # tensors kept alive, so their ids stay theirs
        self.nodes = []
        self.counts = {}       # (parent path, op) -> calls so far
        self.problems = []
        self.model = model
        self.attn = []         # transformers-style attention modules being run: their q, k, v and o
        #                        projections are recorded, what lies between becomes rope and attention
        self.module_node = {}  # id(module) -> its node
        self.shuffle = {}      # id(tensor) -> (input, stage, groups): a channel shuffle under way
        self.seen_params = set()  # ids of parameters counted already (tied embeddings)
        self.values = {}       # node -> its output, for the q, k and v projections of attention modules
        self.handles = []      # the hooks, removed once the model has run
        self.wrapped = []      # modules whose forward records its call
        self.probes = []       # attention modules written as rope + attention: checked again (stress_attention)
        self.fitted = set()    # ids of the modules that run a softmax in their own forward (softmax_modules)
        self.topk = set()      # ids of those that run topk (softmax_modules): a mixture of experts may be one
        self.moe = []          # mixtures of experts being run (moe_parts): nothing inside them is recorded
        self.positions = {}    # id(tensor) -> tensor: torch.arange(T) made in the forward (token positions)
        self.pos_tables = {}   # id(tensor) -> (name, rows, n_params): an nn.Embedding read at positions

    def softmax_modules(self, model, inputs):
        """The modules whose own forward (not a child's) runs a softmax, and those that run
        topk, found by running the model once before the trace: where attention, and a
        mixture of experts, written in any form may be."""
        stack, found, topk = [], set(), set()

        class Spy(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                if getattr(func, "__name__", "") in ("softmax", "_softmax") and stack:
                    found.add(stack[-1])
                if getattr(func, "__name__", "") == "topk" and stack:
                    topk.add(stack[-1])
                return func(*args, **(kwargs or {}))
        hs = []
        for m in model.modules():
            hs += [m.register_forward_pre_hook(lambda mod, a: stack.append(id(mod))),
                   m.register_forward_hook(lambda mod, a, o: stack.pop() and None)]
        try:
            with torch.no_grad(), Spy():
                model(*inputs)
        finally:
            for h in hs:
                h.remove()
        self.fitted, self.topk = found, topk

    def hooks(self, model):
        for m in model.modules():
            self.handles += [m.register_forward_pre_hook(self.pre), m.register_forward_hook(self.post)]
            if attention_parts(m, self.fitted) is not None:  # its call, to run it again on a larger input (stress_attention)
                def forward(*a, _orig=m.forward, _m=m, **k):
                    self.calls[id(_m)] = (a, k)
                    return _orig(*a, **k)
                m.forward = forward
                self.wrapped.append(m)
            if isinstance(m, nn.MultiheadAttention):
                # query, key and value are often keywords, which hooks do not see before
                # torch 2.0: keep the call's arguments
                def forward(*a, _orig=m.forward, _m=m, **k):
                    self.calls[id(_m)] = (a, k)
                    return _orig(*a, **k)
                m.forward = forward

    def functions(self):
        """Functions of a model's module that run as one layer, replaced while the model
        runs: [(module, attribute, original)] to put back."""
        swapped = []
        if tv_swin is not None:  # Swin's PatchMerging pads, takes the 2 x 2 neighbours and concatenates
            swapped.append((tv_swin, "_patch_merging_pad", tv_swin._patch_merging_pad))
            tv_swin._patch_merging_pad = self.as_layer("patch_merge", tv_swin._patch_merging_pad)
        return swapped

    def as_layer(self, kind, fn):
        """fn(x) recorded as one layer of kind, named after the calling module plus kind;
        its own operations are not."""
        def run(x, *a, **k):
            if self.leaf_depth or self.attn or self.source(x) is None:
                return fn(x, *a, **k)
            self.leaf_depth += 1
            try:
                out = fn(x, *a, **k)
            finally:
                self.leaf_depth -= 1
            name, _ = self.name_for(kind)
            self.record(name, kind, {}, [x], out)
            return out
        return run

    def source(self, t):
        """The node that produced t: -1 for the model's input, None for a tensor the
        trace did not see made (a parameter, a constant)."""
        return self.producer.get(id(t))

    def parameter(self, t):
        """(name, numel) when t is a parameter of the model or derived from one (expand)."""
        if id(t) in self.param_names:
            return self.param_names[id(t)], t.numel()
        return self.param_of.get(id(t))

    BROKEN = -2  # the producer of a tensor made by something layerbench cannot express

    def broken(self, out):
        """Marks out (a tensor, or a module's tuple) as made by something unsupported: what
        reads it is not reported again."""
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.producer[id(t)] = self.BROKEN
                self.keep.append(t)

    def add_node(self, name, kind, params, ins, in_shape, out_shape, n_params=0):
        self.nodes.append(Node(name, kind, params, ins, tuple(in_shape), tuple(out_shape), n_params))
        return len(self.nodes) - 1

    def record(self, name, kind, params, inputs, out, n_params=0):
        """The node's index, or None where it was not recorded."""
        ins = [self.source(t) for t in inputs]
        if self.BROKEN in ins:
            self.broken(out)
            return None
        if None in ins:
            self.problems.append(f"{name}: {NOT_COMPUTED}")
            self.broken(out)
            return None
        i = self.add_node(name, kind, params, ins, inputs[0].shape, out.shape, n_params)
        self.producer[id(out)] = i
        self.keep.append(out)
        return i

    def pre(self, m, args):
        self.stack.append(self.names.get(m, "?"))
        if is_leaf(m):
            self.leaf_depth += 1
        elif not self.leaf_depth and not self.attn and id(m) in self.topk:
            self.leaf_depth += 1  # moe_parts runs the experts: not the model's operations
            try:
                parts = moe_parts(m)
            except Unsupported as e:
                self.problems.append(f"{self.stack[-1]}: {e}")
                parts = False
            finally:
                self.leaf_depth -= 1
            if parts is not None:  # its own operations are not recorded: its output is fitted (moe_output),
                #                    or broken where it was refused
                self.moe.append({"m": m, "parts": parts})
                self.leaf_depth += 1
        elif not self.leaf_depth:
            try:
                spec = attention_spec(m, self.model, self.fitted)
            except Unsupported as e:
                self.problems.append(f"{self.stack[-1]}: {e}")
                spec = False
            if spec is not None:
                parts = attention_parts(m, self.fitted)
                proj = {id(getattr(m, n, None)) for n in (parts[0] if parts else ())} | {id(parts[1]) if parts else 0}
                norms = {id(c): (f"{self.stack[-1]}.{n}", c) for n, c in m.named_children()
                         if id(c) not in proj and not list(c.children()) and
                         [t.dim() for t in c.parameters(recurse=False)] == [1]}
                self.attn.append({"m": m, "name": self.stack[-1], "spec": spec, "parts": parts, "out_node": None,
                                  "norms": norms, "norm_io": {}})

    def attention_output(self, m, name, layer, out, n_params):
        """o_proj of an attention module: rope of q and k, the attention, then o_proj."""
        ctx = self.attn[-1]
        idx = [self.module_node.get(id(getattr(ctx["m"], p))) for p in ctx["parts"][0]]
        if not ctx["spec"] or None in idx:  # said already (the module, or what broke q, k or v)
            self.broken(out)
            return
        p, rope = ctx["spec"]
        if len(idx) == 1:  # packed: q, k and v are thirds of the last dim, copied out as slices
            s, dim = self.nodes[idx[0]].out_shape, len(self.nodes[idx[0]].out_shape) - 1
            c = s[-1] // 3
            idx = [self.add_node(f"{ctx['name']}.{part}", "slice",
                                 {"dim": dim, **({"start": i * c} if i else {}), **({"end": (i + 1) * c} if i < 2 else {})},
                                 [idx[0]], s, s[:-1] + (c,)) for i, part in enumerate("qkv")]
        q, k, v = idx
        qkv = [self.values.get(j) for j in (q, k, v)] if len(ctx["parts"][0]) == 3 else self.packed_values(idx)
        placed = self.qk_norms(ctx, qkv)
        if placed is None:
            self.broken(out)
            return
        qkv = [placed[i][1] if i in placed else qkv[i] for i in range(3)]
        if ctx["spec"] is FIT:  # found by its softmax: heads, mask and scale fitted to its output
            fit = fit_attention(qkv, m, out, self.model, self.calls.get(id(ctx["m"]), ((), {})))
            if fit is None:
                self.problems.append(
                    f"{ctx['name']}: attention module {type(ctx['m']).__name__} (a softmax between linear projections) "
                    f"computes something no heads, causal mask and scale of layerbench's attention reproduce (rope, "
                    f"another mask, a norm of q or k are not followed inside it)")
                self.broken(out)
                return
            ctx["spec"] = fit
        p, rope = ctx["spec"]
        differs = attention_differs(ctx["m"], ctx["spec"], self.model, qkv, m, out)
        if not differs:
            self.probes.append(ctx)
        if differs:
            self.problems.append(f"{ctx['name']}: attention module {type(ctx['m']).__name__} computes something other "
                                 f"than the rope and attention layers layerbench would write for it (its output differs "
                                 f"by {differs:.2g}, relative): something in its forward (a soft-cap, another scale, a "
                                 f"norm of q or k, a mask) is not mapped")
            self.broken(out)
            return
        for i, (norm, _, params, n_norm) in placed.items():  # q_norm, k_norm: per head (reshaped) or over all
            src, s = (q, k)[i], self.nodes[(q, k)[i]].out_shape
            part = "qk"[i]
            if norm.shape[-1] != s[-1]:
                heads = s[-1] // norm.shape[-1]
                hs = s[:-1] + (heads, norm.shape[-1])
                src = self.add_node(f"{ctx['name']}.{part}_heads", "reshape", {"shape": [-1, heads, norm.shape[-1]]},
                                    [src], s, hs)
                src = self.add_node(norm.name, "rmsnorm", params, [src], hs, hs, n_norm)
                src = self.add_node(f"{ctx['name']}.{part}_merged", "reshape", {"shape": [-1, s[-1]]}, [src], hs, s)
            else:
                src = self.add_node(norm.name, "rmsnorm", params, [src], s, s, n_norm)
            q, k = (src, k) if i == 0 else (q, src)
        qs, ks = self.nodes[q].out_shape, self.nodes[k].out_shape
        if rope is not None:
            q = self.add_node(f"{ctx['name']}.rotary_q", "rope", {"num_heads": p["num_heads"], **rope}, [q], qs, qs)
            k = self.add_node(f"{ctx['name']}.rotary_k", "rope", {"num_heads": p["num_key_value_heads"], **rope},
                              [k], ks, ks)
        att = qs[:-1] + (p["num_heads"] * p["head_dim"],)
        a = self.add_node(f"{ctx['name']}.attn", "attention", p, [q, k, v], qs, att)
        ctx["out_node"] = self.add_node(name, layer[0], layer[1], [a], att, out.shape, n_params)
        self.producer[id(out)] = ctx["out_node"]
        self.keep.append(out)

    def qk_norms(self, ctx, qkv):
        """The norms of q and k an attention module ran between its projections and its
        rope: {0 (q) or 1 (k): (norm, q or k normalised [N, T, W], rmsnorm params, params
        counted)}, each found by its input (the projection's output, per head or whole) and
        checked to be an RMSNorm by its output; None after a problem (said)."""
        placed = {}
        for nm, x, y in ctx["norm_io"].values():
            name = next(n for i, (n, c) in ctx["norms"].items() if c is nm)
            found = None
            for i in (0, 1):
                want = qkv[i]
                if want is None or x.numel() != want.numel() or i in placed:
                    continue
                for layout in ((lambda t: t), (lambda t: t.transpose(1, 2))) if x.dim() == 4 else ((lambda t: t),):
                    if torch.equal(layout(x).reshape(want.shape), want):
                        found = (i, layout(y).reshape(want.shape))
                        ctx.setdefault("norm_map", {})[i] = (nm, layout)  # for stress_attention's run
                        break
                if found:
                    break
            layer = self.norm_by_output(nm, [x], y)
            if not found or layer is None:
                self.problems.append(f"{name}: a module inside attention module {type(ctx['m']).__name__} that is not "
                                     f"an RMSNorm of q or k between their projections and rope")
                return None
            new = [t for t in nm.parameters() if id(t) not in self.seen_params]
            self.seen_params.update(id(t) for t in nm.parameters())
            placed[found[0]] = (Norm(name, x.shape[-1]), found[1], layer[1], sum(t.numel() for t in new))
        return placed

    def packed_values(self, idx):
        """q, k and v of a packed attention: the thirds of its qkv output's last dim."""
        qkv = self.values.get(self.nodes[idx[0]].inputs[0])
        return [None] * 3 if qkv is None else thirds(qkv)

    def stress_attention(self):
        """Every attention module written as rope + attention, run again (hooks off) on its
        input scaled up until its scores reach about 200: what its layers leave out and
        small scores hide (a soft-cap of 50 changes nothing at scores of 0.1) shows then."""
        for h in self.handles:
            h.remove()
        for m in self.wrapped:
            del m.forward  # the class's own again
        for ctx in self.probes:
            m, parts = ctx["m"], ctx["parts"]
            a, k = self.calls.get(id(m), ((), {}))
            seen = {}
            hooks = [getattr(m, n).register_forward_hook(lambda mod, i, o, n=n: seen.__setitem__(n, o.detach()))
                     for n in parts[0]]
            hooks.append(parts[1].register_forward_hook(lambda mod, i, o: seen.__setitem__("out", o.detach())))
            for j, (nm, _) in ctx.get("norm_map", {}).items():  # q and k as its norms leave them
                hooks.append(nm.register_forward_hook(lambda mod, i, o, j=j: seen.__setitem__(("norm", j), o.detach())))
            try:
                with torch.no_grad():
                    m(*a, **k)  # once as traced: the scores' size
                    qkv = [seen.get(n) for n in parts[0]] if len(parts[0]) == 3 else thirds(seen[parts[0][0]])
                    qkv = [norm_out(seen, ctx, i, qkv[i]) for i in range(3)]
                    top = attention_scores_max(ctx["spec"], qkv)
                    alpha = min(max((200.0 / max(top, 1e-9)) ** 0.5, 1.0), 1e4)
                    x = [i for i, v in enumerate(a) if isinstance(v, torch.Tensor)]
                    name = next((n for n, v in k.items() if isinstance(v, torch.Tensor)), None) if not x else None
                    if x:
                        a = tuple(v * alpha if i == x[0] else v for i, v in enumerate(a))
                    elif name:
                        k = {**k, name: k[name] * alpha}
                    seen.clear()
                    m(*a, **k)
                    qkv = [seen.get(n) for n in parts[0]] if len(parts[0]) == 3 else thirds(seen[parts[0][0]])
                    qkv = [norm_out(seen, ctx, i, qkv[i]) for i in range(3)]
                    differs = attention_differs(m, ctx["spec"], self.model, qkv, parts[1], seen.get("out"))
            except Exception as e:  # noqa: BLE001 (a module that does not run twice: said, not written)
                differs = f"it did not run again on a larger input ({one_line(e)})"
            finally:
                for h in hooks:
                    h.remove()
            if differs:
                self.problems.append(
                    f"{ctx['name']}: attention module {type(m).__name__} computes something other than the rope and "
                    f"attention layers layerbench would write for it on an input that makes its scores large ("
                    f"{differs if isinstance(differs, str) else f'its output differs by {differs:.2g}, relative'}): "
                    f"something in its forward (a soft-cap, another scale, a norm of q or k, a mask) is not mapped")

    def post(self, m, args, out):
        name = self.stack.pop()
        if self.moe and self.moe[-1]["m"] is m:
            self.leaf_depth -= 1
            self.moe_output(m, name, self.moe.pop()["parts"], args, out)
            return
        if self.attn and self.attn[-1]["m"] is m:
            ctx = self.attn.pop()
            first = out[0] if isinstance(out, (tuple, list)) else out
            if ctx["spec"] and self.source(first) != self.BROKEN and not self.made_by(first, ctx["out_node"]):
                # what runs between the projections is not recorded: the module must end at its out projection
                self.problems.append(f"{ctx['name']}: attention module {type(m).__name__} whose output is not its "
                                     f"out projection's")
                self.broken(out)
        if not is_leaf(m):
            return
        self.leaf_depth -= 1
        if self.leaf_depth:
            return
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if self.attn and id(m) in self.attn[-1]["norms"] and len(tensors) == 1 and isinstance(out, torch.Tensor):
            # a norm of q or k inside an attention module: placed between its projection and
            # rope when the module's output is written (attention_output)
            self.attn[-1]["norm_io"][id(m)] = (m, tensors[0].detach(), out.detach())
            return
        try:
            layer = module_layer(m)
        except Unsupported as e:
            layer = self.norm_by_output(m, tensors, out)
            if layer is None:
                if self.BROKEN not in [self.source(t) for t in tensors]:
                    self.problems.append(f"{name or '(the model)'}: {e}")
                self.broken(out)
                return
        if layer is None:  # the identity: its output is its input
            self.producer[id(out)] = self.source(tensors[0])
            return
        if self.attn and layer[0] == "dropout" and tensors and self.source(tensors[0]) is None:
            return  # a dropout of the attention's own scores (nanoGPT's attn_dropout): the identity at inference
        if layer[0] == "rotary_source":  # cos and sin, read by the attention's rope layers
            return
        if layer[1].get("hf_conv1d") and tensors and not self.computes_conv1d(m, tensors[0], out):
            self.problems.append(f"{name}: module {type(m).__name__} holds weight {tuple(m.weight.shape)} and bias but "
                                 f"does not compute x @ weight + bias (Hugging Face's Conv1D)")
            self.broken(out)
            return
        if layer[0] == "embedding" and tensors and id(tensors[0]) in self.positions:
            # an embedding of the positions 0..T-1 (GPT-2's wpe): added to the tokens' below
            new = [p for p in m.parameters() if id(p) not in self.seen_params]
            self.seen_params.update(id(p) for p in m.parameters())
            self.pos_tables[id(out)] = (name, m.num_embeddings, sum(p.numel() for p in new))
            self.keep.append(out)
            return
        if layer[0] == "window_partition":  # MaxViT's WindowPartition(x, p)
            layer = (layer[0], {"window_size": int(args[1])})
        elif layer[0] == "window_merge":  # WindowDepartition(x, p, h_partitions, w_partitions)
            layer = (layer[0], {"window_size": int(args[1]), "partitions": compact([int(args[2]), int(args[3])])})
        new = [p for p in m.parameters() if id(p) not in self.seen_params]
        if layer[0] == "linear" and id(m.weight) in self.seen_params:
            # tied embeddings: lm_head reads embed_tokens' table
            layer = ("linear", {**layer[1], "tied_weights": True})
        self.seen_params.update(id(p) for p in m.parameters())
        n_params = sum(p.numel() for p in new)  # a leaf: its children (MHA's out_proj) are its own
        if self.attn and self.attn[-1]["parts"] and m is self.attn[-1]["parts"][1]:
            self.attention_output(m, name, layer, out, n_params)
            return
        if layer[0] == "multihead_attention":
            a, k = self.calls.get(id(m), ((), {}))
            names = ("query", "key", "value")
            tensors = [a[i] if i < len(a) else k.get(names[i]) for i in range(3)]
            mask = k.get("attn_mask", a[5] if len(a) > 5 else None)
            padding = k.get("key_padding_mask", a[3] if len(a) > 3 else None)
            if mask is not None and padding is None and tensors[0] is tensors[1] is tensors[2] and \
                    causal_mask(mask, tensors[0]):
                self.mha(m, name, tensors[0], tensors[0], out[0], n_params, True)
                return
            if mask is not None or padding is not None:
                self.problems.append(f"{name}: attention with a mask other than the causal one (a padding mask, or "
                                     f"another attn_mask)")
                return
            if tensors[1] is tensors[2] and tensors[0] is not tensors[1]:
                self.mha(m, name, tensors[0], tensors[1], out[0], n_params, False)
                return
            if not (tensors[0] is tensors[1] is tensors[2]):
                self.problems.append(f"{name}: key and value two different tensors (self-attention, or cross-attention "
                                     f"to one memory, are followed)")
                return
            tensors, out = tensors[:1], out[0]
        i = self.record(name, layer[0], layer[1], tensors, out, n_params)
        if i is not None:
            self.module_node[id(m)] = i
            if self.attn:  # a projection of an attention module: its values, to check the module with
                self.values[i] = out.detach()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.leaf_depth or self.attn:
            return out
        op = getattr(func, "__name__", str(func))
        if op == "arange" and isinstance(out, torch.Tensor) and out.dim() == 1 and len(out) and \
                torch.equal(out, torch.arange(len(out), dtype=out.dtype)):
            self.positions[id(out)] = out  # token positions 0..T-1: what an embedding of positions reads
            return out
        if op in ("unsqueeze", "view", "reshape", "expand") and args and id(args[0]) in self.positions:
            self.positions[id(out)] = out  # pos[None] and the like: still the positions
            return out
        if op in ("__getitem__", "unsqueeze", "view", "reshape") and args and id(args[0]) in self.pos_tables and \
                tuple(out.shape) == (1,) + tuple(args[0].shape):
            self.pos_tables[id(out)] = self.pos_tables[id(args[0])]  # wpe(pos)[None]: the same table
            self.keep.append(out)
            return out
        if op in ADD and len(args) == 2 and any(self.pos_table(a) for a in args):
            return self.position_add(args, out)
        if op in ("chunk", "split", "tensor_split", "unbind") and isinstance(out, (tuple, list)):
            return self.pieces(op, args, kwargs, out)
        if isinstance(out, (tuple, list)) and any(isinstance(t, torch.Tensor) for t in out):
            # topk, sort, max with dim, where with one argument: no kind gives several tensors
            sources = [self.source(a) for a in args if isinstance(a, torch.Tensor)]
            if any(s is not None and s != self.BROKEN for s in sources):
                parent = self.stack[-1] if self.stack else ""
                self.problems.append(f"{parent or '(the model)'}: operation {op} (no layer kind computes it: a mixture "
                                     f"of experts is followed where one module holds its router, a linear, and a "
                                     f"list of SwiGLU experts, as Mixtral's loop does; bench reads MoE decoders from "
                                     f"their config.json)")
            if any(s is not None for s in sources):
                self.broken(out)
            return out
        if not isinstance(out, torch.Tensor):
            return out
        x0 = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if x0 is not None and (id(x0) in self.shuffle or (op in ("view", "reshape") and self.source(x0) is not None
                                                          and group_split(x0, out))):
            return self.shuffle_step(op, x0, args, out)
        if op in ("__get__", "detach", "contiguous", "clone", "to", "float", "type_as"):
            if args and isinstance(args[0], torch.Tensor):
                self.producer[id(out)] = self.source(args[0])
                self.keep.append(out)
            return out
        parent = self.stack[-1] if self.stack else ""
        flat = [a for a in args if isinstance(a, torch.Tensor)]
        for a in args:
            if isinstance(a, (list, tuple)):
                flat += [t for t in a if isinstance(t, torch.Tensor)]
        flat += [v for v in kwargs.values() if isinstance(v, torch.Tensor)]  # F.layer_norm's weight=, bias=
        params = [self.parameter(t) for t in flat]
        traced = [t for t in flat if self.source(t) is not None]
        if not traced:
            # made from parameters alone (VisionTransformer's class_token.expand): remember which
            named = [p for p in params if p]
            if named:
                self.param_of[id(out)] = named[0]
                self.keep.append(out)
            return out
        if any(params):
            return self.parameter_op(op, parent, args, kwargs, flat, params, traced, out)
        if self.BROKEN in [self.source(t) for t in traced]:
            self.broken(out)
            return out
        try:
            kind, params, inputs = function_layer(op, args, kwargs, out)
        except Unsupported as e:
            self.problems.append(f"{parent or '(the model)'}: {e}")
            self.broken(out)
            return out
        label = {"add": "add", "mul": "mul", "concat": "cat", "flatten": "flatten",
                 "adaptive_avgpool2d": "adaptive_avg_pool2d", "upsample": "interpolate", "avgpool2d": "avg_pool2d",
                 "maxpool2d": "max_pool2d", "slice": "getitem",
                 "reshape": op.strip("_"),
                 "scale_shift": "add" if op in ADD else "mul" if op in MUL else "sub" if op in SUB | RSUB else "div"
                 }.get(kind, kind)
        name, _ = self.name_for(label)
        self.record(name, kind, params, inputs, out)
        return out


    def mha(self, m, name, x, mem, out, n_params, causal):
        """nn.MultiheadAttention (batch first) run as layers, checked to compute the module's
        output, else refused: self-attention with the causal mask (x is mem) as its packed
        in_proj (a linear of in_proj_weight, in_proj_bias), q, k and v its thirds, a causal
        attention and out_proj; cross-attention (k and v read mem, an encoder's output:
        nn.TransformerDecoderLayer's multihead_attn) as in_proj_q (in_proj's first E rows)
        on x, in_proj_kv (the other 2E) on mem, k and v its halves, an attention and out_proj."""
        e, h = m.embed_dim, m.num_heads
        src, msrc = self.source(x), self.source(mem)
        if src is None or src == self.BROKEN or msrc is None or msrc == self.BROKEN:
            if src is None or msrc is None:
                self.problems.append(f"{name}: {NOT_COMPUTED}")
            self.broken(out)
            return
        self.leaf_depth += 1
        try:
            with torch.no_grad():
                wb = m.in_proj_weight.double(), None if m.in_proj_bias is None else m.in_proj_bias.double()
                rows = lambda a, b: (wb[0][a:b], None if wb[1] is None else wb[1][a:b])  # noqa: E731
                n, t, tk = x.shape[0], x.shape[1], mem.shape[1]
                q = F.linear(x.double(), *rows(0, e))
                k, v = F.linear(mem.double(), *rows(e, 3 * e)).chunk(2, -1)
                q, k, v = (z.reshape(n, -1, h, e // h).transpose(1, 2) for z in (q, k, v))
                s = (q @ k.transpose(-1, -2)) / math.sqrt(e // h)
                if causal:
                    s = s.masked_fill(torch.ones(t, tk, dtype=torch.bool).triu(1), float("-inf"))
                y = F.linear((s.softmax(-1) @ v).transpose(1, 2).reshape(n, t, e), m.out_proj.weight.double(),
                             None if m.out_proj.bias is None else m.out_proj.bias.double())
                ok = m.batch_first and m._qkv_same_embed_dim and m.bias_k is None and \
                    torch.allclose(y, out.double(), rtol=1e-4, atol=1e-5)
        finally:
            self.leaf_depth -= 1
        if not ok:
            self.problems.append(f"{name}: MultiheadAttention that does not compute the {'causal ' if causal else ''}"
                                 f"attention of its in_proj's parts (batch_first false, separate k/v widths, bias_k)")
            self.broken(out)
            return
        bias = {} if m.in_proj_bias is not None else {"bias": False}
        per_row = m.in_proj_weight.shape[1] + (0 if m.in_proj_bias is None else 1)
        s, ms = tuple(x.shape), tuple(mem.shape)
        cut = lambda src, shape, parts, names: [  # noqa: E731 (slices of the last dim, e each)
            self.add_node(f"{name}.{part}", "slice", {"dim": len(shape) - 1, **({"start": j * e} if j else {}),
                                                       **({"end": (j + 1) * e} if j < parts - 1 else {})},
                          [src], shape[:-1] + (parts * e,), shape) for j, part in enumerate(names)]
        if x is mem:
            i = self.add_node(f"{name}.in_proj", "linear", {"out_features": 3 * e, **bias}, [src], s,
                              s[:-1] + (3 * e,), 3 * e * per_row)
            qkv = cut(i, s, 3, "qkv")
        else:
            qn = self.add_node(f"{name}.in_proj_q", "linear", {"out_features": e, **bias}, [src], s, s, e * per_row)
            kv = self.add_node(f"{name}.in_proj_kv", "linear", {"out_features": 2 * e, **bias}, [msrc], ms,
                               ms[:-1] + (2 * e,), 2 * e * per_row)
            qkv = [qn] + cut(kv, ms, 2, "kv")
        a = self.add_node(f"{name}.attn", "attention", {"num_heads": h, "head_dim": e // h,
                                                       **({} if causal else {"causal": False})}, qkv, s, s)
        o = self.add_node(f"{name}.out_proj", "linear", {"out_features": e, **({} if m.out_proj.bias is not None
                                                                               else {"bias": False})},
                          [a], s, s, n_params - 3 * e * per_row)
        self.producer[id(out)] = o
        self.keep.append(out)

    def moe_output(self, m, name, parts, args, out):
        """A mixture of experts written as a loop (moe_parts): its router as a linear layer
        and its experts as a moe layer reading the input and the router's logits, with the
        top_k and normalisation that give the module's own output (fit_moe); refused by
        name where none does."""
        first = out[0] if isinstance(out, (tuple, list)) else out
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        src = self.source(tensors[0]) if len(tensors) == 1 else None
        if not parts or src is None or src == self.BROKEN or not isinstance(first, torch.Tensor):
            if parts and src is None:
                self.problems.append(f"{name}: {NOT_COMPUTED}" if len(tensors) == 1 else
                                     f"{name}: a mixture of experts called with {len(tensors)} tensors (one: the tokens)")
            self.broken(out)
            return
        x = tensors[0]
        self.leaf_depth += 1
        try:
            fit = fit_moe(parts, x, first) if first.shape == x.shape else None
        finally:
            self.leaf_depth -= 1
        (rn, router), (en, experts, roles) = parts
        if fit is None:
            self.problems.append(f"{name}: module {type(m).__name__} (a router to {len(experts)} experts and topk) "
                                 f"computes something no moe layer reproduces (the softmax of the router's logits, "
                                 f"the top k experts, their probabilities renormalised or not)")
            self.broken(out)
            return
        k, normalize = fit
        e, s = len(experts), tuple(x.shape)
        g, _, _ = roles[0]
        names = {"w1_w2_w3": ("w1", "w2", "w3"), "gate_up_down": ("gate_proj", "down_proj", "up_proj")}
        own = {id(c): n for ex in experts for n, c in ex.named_children()}
        style = next((st for st, ns in names.items() if tuple(own[id(c)] for c in roles[0]) == ns), None)
        for t in m.parameters():
            self.seen_params.add(id(t))
        r = self.add_node(f"{name}.{rn}", "linear", {"out_features": e, **({} if router.bias is not None
                                                                            else {"bias": False})},
                          [src], s, s[:-1] + (e,), sum(t.numel() for t in router.parameters()))
        params = {"num_experts": e, "top_k": k, "ffn_dim": linear_weight(g).shape[0],
                  **({} if normalize else {"normalize": False}), **({"bias": True} if g.bias is not None else {}),
                  **({"expert_names": style} if style and style != "w1_w2_w3" else {})}
        i = self.add_node(f"{name}.{en}", "moe", params, [src, r], s, s, sum(t.numel() for t in experts.parameters()))
        self.producer[id(first)] = i
        self.keep.append(first)
        if isinstance(out, (tuple, list)) and len(out) > 1 and isinstance(out[1], torch.Tensor) and \
                tuple(out[1].shape) in (s[:-1] + (e,), (math.prod(s[:-1]), e)):
            self.producer[id(out[1])] = r  # transformers' blocks return the router's logits too
            self.keep.append(out[1])

    def norm_by_output(self, m, tensors, out):
        """A module without a kind that holds one vector over the last dim and computes an
        RMSNorm with it (Llama's x / rms(x) * w, or Gemma's * (1 + w)), whatever its class
        and the vector are called: ("rmsnorm", params), found from its output; else None."""
        p = list(m.parameters(recurse=False))
        if list(m.children()) or len(p) != 1 or p[0].dim() != 1 or len(tensors) != 1 or \
                tensors[0].shape[-1] != p[0].shape[0] or not isinstance(out, torch.Tensor) or out.shape != tensors[0].shape:
            return None
        own = [v for v in vars(m).values() if isinstance(v, float) and 0 < v < 1e-2]
        self.leaf_depth += 1
        try:
            with torch.no_grad():
                x, w = tensors[0].double(), p[0].double()
                ms = x.pow(2).mean(-1, keepdim=True)
                for eps in own + [1e-6, 1e-5, 1e-8, 1e-12]:
                    for offset in (0.0, 1.0):
                        want = x * torch.rsqrt(ms + eps) * (w + offset)
                        if torch.allclose(want, out.double(), rtol=1e-4, atol=1e-6):
                            return "rmsnorm", {**({} if eps == 1e-6 else {"eps": eps}),
                                               **({"weight_offset": offset} if offset else {})}
        finally:
            self.leaf_depth -= 1
        return None

    def computes_conv1d(self, m, x, out):
        """m's output is x @ weight + bias (the check's own operations not recorded)."""
        self.leaf_depth += 1
        try:
            with torch.no_grad():
                want = (x.reshape(-1, x.shape[-1]) @ m.weight + m.bias).view(out.shape)
                return torch.allclose(want, out, rtol=1e-4, atol=1e-6)
        finally:
            self.leaf_depth -= 1

    def pos_table(self, t):
        """(name, rows, n_params) where t is an embedding of the positions, or a view of one
        as large (wpe(pos)[None]: indexing with None is not seen by the trace); else None."""
        if not isinstance(t, torch.Tensor):
            return None
        if id(t) in self.pos_tables:
            return self.pos_tables[id(t)]
        base = t._base
        return self.pos_tables.get(id(base)) if base is not None and base.numel() == t.numel() else None

    def position_add(self, args, out):
        """x + wpe(positions): one pos_embedding layer named after the table's module."""
        table = next(a for a in args if self.pos_table(a))
        x = next((a for a in args if a is not table), None)
        name, rows, n_params = self.pos_table(table)
        if not isinstance(x, torch.Tensor) or self.source(x) is None or x.dim() != 3 or \
                tuple(out.shape) != tuple(x.shape):
            self.problems.append(f"{name}: an embedding of the positions added to something other than the tokens' "
                                 f"[N, T, D] (only GPT-2's wte(ids) + wpe(positions))")
            self.broken(out)
            return out
        self.record(name, "pos_embedding", {"num_positions": rows}, [x], out, n_params)
        return out

    def made_by(self, t, node):
        """t is node's output, or a dropout's (or the identity's) of it."""
        src = self.source(t)
        while src is not None and src >= 0 and src != node and self.nodes[src].kind == "dropout":
            src = self.nodes[src].inputs[0]
        return node is not None and src == node

    def name_for(self, label):
        """parent.label, or parent.label_N for the N-th call of it in the same forward."""
        parent = self.stack[-1] if self.stack else ""
        count = self.counts.get((parent, label), 0)
        self.counts[(parent, label)] = count + 1
        local = label if count == 0 else f"{label}_{count}"
        return f"{parent}.{local}" if parent else local, parent

    def shuffle_step(self, op, x, args, out):
        """ShuffleNet's channel_shuffle: x.view(N, g, C / g, H, W), transpose(1, 2)
        (contiguous), view(N, C, H, W): one channel_shuffle layer, recorded at the view
        back. Anything else done to the split view is reported."""
        stage, src, g = ("start", x, out.shape[1]) if id(x) not in self.shuffle else self.shuffle[id(x)]
        dims = [a % 5 for a in args[1:3] if isinstance(a, int)] if op in ("transpose", "swapaxes") else []
        if stage == "start":
            self.shuffle[id(out)] = ("split", src, g)
        elif op == "contiguous":
            self.shuffle[id(out)] = (stage, src, g)
        elif stage == "split" and sorted(dims) == [1, 2]:
            self.shuffle[id(out)] = ("shuffled", src, g)
        elif stage == "shuffled" and op in ("view", "reshape", "flatten") and tuple(out.shape) == tuple(src.shape):
            name, _ = self.name_for("channel_shuffle")
            self.record(name, "channel_shuffle", {"groups": g}, [src], out)
            return out
        else:
            parent = self.stack[-1] if self.stack else ""
            self.problems.append(f"{parent or '(the model)'}: {op} of channels viewed as {g} groups (only a channel "
                                 f"shuffle: view, transpose(1, 2), view back)")
            self.broken(out)
            return out
        self.keep.append(out)
        return out

    def pieces(self, op, args, kwargs, out):
        """x.chunk(n, dim), x.split(size, dim), torch.tensor_split: each piece a slice
        layer (torch's pieces are views; layerbench copies each, as it does x[:, i])."""
        x = args[0]
        if not isinstance(x, torch.Tensor) or self.source(x) is None:
            return out
        if op == "unbind":
            self.problems.append(f"{self.stack[-1] if self.stack else '(the model)'}: unbind")
            self.broken(out)
            return out
        dim = kwargs.get("dim", args[2] if len(args) > 2 else 0) % x.dim()
        if dim == 0:
            self.problems.append(f"{self.stack[-1] if self.stack else '(the model)'}: {op} along the batch")
            self.broken(out)
            return out
        name, _ = self.name_for(op)
        start = 0
        for i, piece in enumerate(out):
            n = piece.shape[dim]
            p = {"dim": dim} if dim != 1 else {}
            if start:
                p["start"] = start
            if start + n != x.shape[dim]:
                p["end"] = start + n
            self.record(f"{name}.{i}", "slice", p, [x], piece)
            start += n
        return out

    def parameter_op(self, op, parent, args, kwargs, flat, params, traced, out):
        """An operation between the activations and a learned tensor: a class token put in
        front of the sequence (cat), or a position embedding added; the layer is named
        after the parameter, as the model names it."""
        name, numel = [p for p in params if p][0]
        x = traced[0]
        if op == "layer_norm" and x is flat[0]:  # F.layer_norm(x, shape, weight, bias, eps): LayerNorm2d's
            shape = args[1] if len(args) > 1 else kwargs.get("normalized_shape")
            eps = kwargs.get("eps", args[4] if len(args) > 4 else 1e-5)
            weight = kwargs.get("weight", args[2] if len(args) > 2 else None)
            bias = kwargs.get("bias", args[3] if len(args) > 3 else None)
            if len(shape) != 1 or shape[0] != x.shape[-1] or weight is None or not self.parameter(weight):
                self.problems.append(f"{parent or '(the model)'}: layer_norm over {tuple(shape)} (only the last "
                                     f"dimension, with a weight)")
                self.broken(out)
                return out
            p = {} if eps == 1e-5 else {"eps": eps}
            if bias is None:
                p["bias"] = False
            label, _ = self.name_for("layer_norm")
            self.record(label, "layernorm", p, [x], out, weight.numel() + (bias.numel() if bias is not None else 0))
            return out
        if op in MUL and len(flat) == 2 and x.dim() >= 3 and tuple(out.shape) == tuple(x.shape):
            # layer scale: x times a learned vector along one dim ([C, 1, 1] on NCHW, [D] on [N, S, D])
            g = [t for t, q in zip(flat, params) if q][0]
            shape = list(g.shape)
            while shape and shape[0] == 1:
                shape = shape[1:]
            along = [d for d in range(1, x.dim()) if x.dim() - d == len(shape) and shape[0] == x.shape[d] and
                     all(s == 1 for s in shape[1:])]
            if along and numel == x.shape[along[0]]:
                d = along[0]
                self.record(name, "layer_scale", {} if d == 1 else {"dim": d - x.dim() if d == x.dim() - 1 else d},
                            [x], out, numel)
                return out
        if op in ("cat", "concat") and len(flat) == 2 and params[0] and not params[1] and x.dim() == 3 and \
                kwargs.get("dim", args[1] if len(args) > 1 else 0) in (1, -2) and flat[0].shape[1] == 1:
            self.record(name, "class_token", {}, [x], out, numel)
        elif op in ADD and len(flat) == 2 and x.dim() == 3 and tuple(out.shape) == tuple(x.shape) and \
                numel == x.shape[1] * x.shape[2]:
            self.record(name, "pos_embedding", {}, [x], out, numel)
        else:
            self.problems.append(f"{parent or '(the model)'}: operation {op} on the parameter {name}")
            self.broken(out)
        return out


def one_line(e):
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"


def build(spec):
    if ":" in spec:
        module, attr = spec.split(":", 1)
        return getattr(importlib.import_module(module), attr)()
    import torchvision.models as tvm
    import torchvision.models.segmentation as seg
    fn = getattr(tvm, spec, None)
    if fn is None and callable(getattr(seg, spec, None)):
        # the segmentation models: their backbone unloaded, no auxiliary classifier (it runs
        # only in training); their output is the dict's "out"
        return getattr(seg, spec)(weights=None, weights_backbone=None, aux_loss=False)
    if fn is None:
        sys.exit(f"torch_export: torchvision has no model '{spec}'")
    if spec in ("googlenet", "inception_v3"):
        # the auxiliary classifiers run only in training; without them the parameters
        # are those of the network that runs at inference
        return fn(weights=None, aux_logits=False, init_weights=False)
    return fn(weights=None)


def trace(model, shape, vocab=None, extra=()):
    """vocab: the input is token ids below it (--input-ids), not numbers in [-1, 1]. extra:
    (name, per-sample shape) of each further tensor the forward takes, recorded as
    model_input layers."""
    model.eval()
    t = Trace(model)
    x = torch.randint(0, vocab, shape) if vocab else torch.rand(shape) * 2 - 1
    t.producer[id(x)] = -1
    t.keep.append(x)
    more = []
    for name, sample in extra:
        e = torch.rand([shape[0]] + sample) * 2 - 1
        t.producer[id(e)] = t.add_node(name, "model_input", {"shape": sample}, [-1], x.shape, e.shape)
        t.keep.append(e)
        more.append(e)
    t.softmax_modules(model, [x] + more)
    t.hooks(model)
    # with gradients on: PyTorch's fast paths for inference (TransformerEncoderLayer's
    # fused kernel) skip the submodules, and with them the names
    swapped = t.functions()
    try:
        with torch.enable_grad(), t:
            out = model(x, *more)
    finally:
        for module, attr, fn in swapped:
            setattr(module, attr, fn)
    t.final = t.source(out) if isinstance(out, torch.Tensor) else None
    if isinstance(out, tuple):
        t.final = t.source(out[0])
    t.stress_attention()
    return t


# ---- output ---------------------------------------------------------------------------------


def scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(scalar(x) for x in v) + "]"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str) and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*", v):
        return json.dumps(v)  # a YAML double-quoted scalar: no comma, colon or brace can end it early
    return str(v)


# What bench takes as a layer's name (bench/cfg/cfg_yaml.c): torch's module names are such;
# anything else (a module added as add_module("c, stride: 2", m)) would write YAML that
# describes another model, so it is refused by name.
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+ -]{0,127}")


def bad_names(nodes):
    """The layer names that are not names bench takes, each once."""
    bad = []
    for n in nodes:
        for comp in n.name.split("."):
            if not NAME.fullmatch(comp) or len(comp) > 256:
                bad.append(n.name)
                break
    return list(dict.fromkeys(bad))


def comment_text(s):
    """s on one comment line: control characters (a line break would end the comment and
    start YAML of its own) shown as escapes."""
    return "".join(c if c >= " " and c != "\x7f" else repr(c)[1:-1] for c in s)


def check_output(path, what, prog="torch_export"):
    """Exits with the reason when write_file could not write path: a script calls it
    before its work, so that a wrong output name costs nothing."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        sys.exit(f"{prog}: {what} {path}: it is a directory; give a file")
    if os.path.islink(path) and not os.path.exists(path):  # as bench's outputs: never written through
        sys.exit(f"{prog}: {what} {path}: a symbolic link that points nowhere; give a file")
    if os.path.exists(path) and not os.path.isfile(path):  # a device, a FIFO: renamed over, it would be gone
        sys.exit(f"{prog}: {what} {path}: not a regular file (a device, a FIFO or a socket); give a file")
    if not os.path.isdir(folder):
        sys.exit(f"{prog}: {what} {path}: its folder {folder} does not exist")


def read_csv(path, what, prog="torch_export"):
    """The rows of a CSV that bench wrote, as dicts; exits with the reason when it is not
    whole: a last line without its newline, or a row with fewer or more fields than the
    header (a file cut short, or not bench's)."""
    with open(path, newline="") as f:
        text = f.read()
    if text and not text.endswith("\n"):
        sys.exit(f"{prog}: {what} {path}: its last line is cut short (no newline): a file written halfway?")
    reader = csv.reader(io.StringIO(text))
    head = next(reader, None)
    if not head:
        sys.exit(f"{prog}: {what} {path}: empty, no header")
    rows = []
    for row in reader:
        if len(row) != len(head):
            sys.exit(f"{prog}: {what} {path}: line {reader.line_num} has {len(row)} fields where the header has "
                     f"{len(head)}: a file cut short, or not one bench wrote")
        rows.append(dict(zip(head, row)))
    return rows


def write_file(path, text, what, prog="torch_export"):
    """text into path, whole or not at all: a new temporary file beside it (O_EXCL, never
    through a link planted at its name), then renamed over it; prog names the script in
    its errors."""
    folder = os.path.dirname(os.path.abspath(path))
    check_output(path, what, prog)
    try:
        mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o666 & ~umask()
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=folder)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, os.path.realpath(path) if os.path.islink(path) else path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        sys.exit(f"{prog}: cannot write {what} {path}: {e.strerror or e}")


def umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def yaml_config(name, in_shape, batch, nodes, ids=False):
    """Layers grouped in blocks by module path; explicit inputs where a layer does not
    read the layer before it."""
    command = " ".join(["scripts/torch_export.py"] + [a for a in sys.argv[1:]])
    lines = [f"# {name}, written by scripts/torch_export.py from PyTorch's own execution of the model",
             f"# (torch {torch.__version__}); every module path, shape and parameter count is torch's.",
             f"# {comment_text(command)}",
             f"name: {name}", f"input: [{', '.join(str(d) for d in in_shape)}]" + ("   # token ids" if ids else ""),
             f"batch: {batch}", "layers:"]
    open_path = []  # block path components now open
    for i, n in enumerate(nodes):
        parts = n.name.split(".")
        path, local = parts[:-1], parts[-1]
        common = 0
        while common < min(len(path), len(open_path)) and path[common] == open_path[common]:
            common += 1
        open_path = open_path[:common]
        for comp in path[common:]:
            indent = "  " * (2 * len(open_path) + 1)
            lines.append(f"{indent}- kind: block")
            lines.append(f"{indent}  name: {comp}")
            lines.append(f"{indent}  layers:")
            open_path.append(comp)
        fields = [f"kind: {n.kind}", f"name: {local}"]
        previous = i - 1
        refs = ["input" if j < 0 else "/" + nodes[j].name for j in n.inputs]
        if len(n.inputs) > 1:
            fields.append(f"inputs: [{', '.join(refs)}]")
        elif n.inputs[0] != previous:
            fields.append(f"input: {refs[0]}")
        fields += [f"{k}: {scalar(v)}" for k, v in n.params.items()]
        lines.append(f"{'  ' * (2 * len(open_path) + 1)}- {{{', '.join(fields)}}}")
    return "\n".join(lines) + "\n"


def shape_text(s):
    return "x".join(str(d) for d in s)


def table(name, nodes):
    total = sum(n.n_params for n in nodes)
    lines = [f"# {name}: layer by layer as PyTorch runs it (torch {torch.__version__}), from scripts/torch_export.py:",
             "# name kind input output params; the input is the first one of layers with several.",
             f"# total params {total}"]
    lines += [f"{n.name} {n.kind} {shape_text(n.in_shape)} {shape_text(n.out_shape)} {n.n_params}" for n in nodes]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a torchvision model name, or module:callable")
    ap.add_argument("--input", action="append",
                    help="per-sample input shape (default 3,224,224); given again for each further tensor the "
                         "forward takes (a UNet block's timestep embedding: --input 320,64,64 --input 1280), "
                         "each becoming a model_input layer")
    ap.add_argument("--input-ids", type=int, metavar="T",
                    help="the input is T token ids per sample, for a model that starts with an nn.Embedding "
                         "(a decoder LLM: the prefill of T tokens)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--name", help="the config's name (default: the model's)")
    ap.add_argument("-o", "--output", help="the config to write (default stdout)")
    ap.add_argument("--table", help="also write the reference layer table here")
    args = ap.parse_args()
    shapes = []
    for text in args.input or ["3,224,224"]:
        try:
            shapes.append([int(v) for v in text.split(",")])
        except ValueError:
            ap.error(f"--input {text}: expected numbers separated by commas, as 3,224,224")
        if any(d < 1 for d in shapes[-1]) or len(shapes[-1]) > 3:
            ap.error(f"--input {text}: expected 1 to 3 sizes of 1 or more (one sample's shape)")
    in_shape = shapes[0]
    if args.input_ids is not None and args.input_ids < 1:
        ap.error("--input-ids: expected a number of tokens, 1 or more")
    if args.batch < 1:
        ap.error("--batch: expected 1 or more")
    for path, what in ((args.output, "-o"), (args.table, "--table")):  # before minutes of tracing
        if path and (os.path.isdir(path) or not os.path.isdir(os.path.dirname(os.path.abspath(path)))):
            sys.exit(f"torch_export: {what} {path}: " + ("it is a directory; give a file" if os.path.isdir(path)
                                                        else "its folder does not exist"))
    try:
        model = build(args.model)
    except SystemExit:
        raise
    except (Exception, RecursionError) as e:
        sys.exit(f"torch_export: {args.model}: could not build it: {one_line(e)}")
    if not isinstance(model, nn.Module):
        sys.exit(f"torch_export: {args.model}: gives a {type(model).__name__}, not an nn.Module")
    embeddings = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    vocab = None
    if args.input_ids is not None:
        if not embeddings:
            sys.exit(f"torch_export: --input-ids: {args.model} has no nn.Embedding to read token ids")
        in_shape, vocab = [args.input_ids], embeddings[0].num_embeddings
    import inspect
    try:
        wanted = [p.name for p in inspect.signature(model.forward).parameters.values()
                  if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        wanted = []
    if wanted and len(wanted) != len(shapes):
        example = " ".join(f"--input {','.join(str(d) for d in (shapes + [[8]] * len(wanted))[i])}"
                           for i in range(len(wanted)))
        sys.exit(f"torch_export: {args.model}'s forward takes {len(wanted)} input(s) ({', '.join(wanted)}) and "
                 f"{len(shapes)} --input shape(s) were given: give one per input, in order (one sample's shape, "
                 f"e.g. {example})")
    extra = list(zip(wanted[1:], shapes[1:]))
    try:
        t = trace(model, [args.batch] + in_shape, vocab, extra)
    except Exception as e:
        hint = ""
        if embeddings and vocab is None:
            hint = (" (it holds an nn.Embedding: token ids can be the first input only, with --input-ids T; a further "
                    "input is real numbers)" if extra else " (it holds an nn.Embedding: for token ids give --input-ids T)")
        if extra:
            hint += " (further inputs " + ", ".join(f"{n} {[args.batch] + sh}" for n, sh in extra) + ")"
        sys.exit(f"torch_export: {args.model} did not run on an input of {[args.batch] + in_shape}: "
                 f"{one_line(e)}{hint}")
    if t.problems:
        problems = list(dict.fromkeys(t.problems))
        # an input the trace did not see computed, after another problem, is most often what
        # that problem left untraced (an index made by a refused topk): said once, as a count
        follow = [p for p in problems if p.endswith(NOT_COMPUTED)]
        if len(follow) < len(problems):
            problems = [p for p in problems if not p.endswith(NOT_COMPUTED)]
        print(f"torch_export: layerbench cannot express {len(problems)} part(s) of {args.model}:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        if follow and len(follow) < len(t.problems):
            print(f"  (and {len(follow)} layer(s) after them whose inputs they leave untraced)", file=sys.stderr)
        sys.exit(1)
    if not t.nodes:
        sys.exit("torch_export: nothing was recorded")
    if t.final is not None and t.final != len(t.nodes) - 1:
        print(f"torch_export: warning: the model's output is '{t.nodes[t.final].name}', not the last layer",
              file=sys.stderr)
    name = args.name or args.model.split(":")[-1]
    if not MODEL_NAME.fullmatch(name):
        sys.exit(f"torch_export: the config's name {name!r}: bench takes at most 128 letters, digits, '_', '.', '+', "
                 f"'-' and spaces, the first a letter, digit or '_' (give --name)")
    bad = bad_names(t.nodes)
    if bad:
        print(f"torch_export: {len(bad)} layer name(s) of {args.model} are not names bench takes (letters, digits, "
              f"'_' and '-', not first, as torch's own module names are); nothing was written:", file=sys.stderr)
        for b in bad[:20]:
            print(f"  {b!r}", file=sys.stderr)
        sys.exit(1)
    text = yaml_config(name, in_shape, args.batch, t.nodes, vocab is not None)
    if args.output:
        write_file(args.output, text, "-o")
    else:
        sys.stdout.write(text)
    if args.table:
        write_file(args.table, table(name, t.nodes), "--table")
    total = sum(n.n_params for n in t.nodes)
    print(f"torch_export: {name}: {len(t.nodes)} layers, {total} params", file=sys.stderr)


if __name__ == "__main__":
    main()
