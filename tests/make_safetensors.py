#!/usr/bin/env python3
"""Writes the safetensors checkpoint a Hugging Face config.json describes (Llama, Mistral,
Qwen2, Qwen3, Qwen2-MoE, Qwen3-MoE, OLMoE, SmolLM3, OLMo 2, Phi-3, Mixtral, GPT-NeoX, Gemma 1 to 3, GPT-2,
gpt-oss, DeepSeek-V2 and V3), with every tensor named and shaped as transformers names and shapes them
and the data left zero (sparse), for tests/test_cli.sh's checks of bench's header
cross-check. Python's standard library only; the names come from transformers' modules,
not from bench.

usage: make_safetensors.py CONFIG_JSON OUT_DIR [--dtype F32|BF16|F16] [--shards N]
         [--absent K] [--drop NAME] [--add NAME=D0,D1] [--reshape NAME=D0,D1]
         [--lm-head] [--header-length N] [--overlap] [--misplace NAME]
         [--fp8 B] [--mxfp4] [--mtp]
--shards N writes model-0000k-of-0000N.safetensors and model.safetensors.index.json
(--absent K then leaves shard K out, as a partial download does); --lm-head writes
lm_head.weight even for tied embeddings; --header-length N writes N as the header's
length (a file that is not safetensors); --overlap gives the second tensor bytes of the
first; --misplace NAME names the first shard as NAME's in the index, whatever shard holds it.
The published storage of quantized checkpoints, with the quantization_config that says so
written into OUT_DIR's config.json: --fp8 B as DeepSeek-V3's (every projection of the
decoder layers, *_proj.weight, as F8_E4M3 with its F32 weight_scale_inv, one scale per B x B
block, beside it; the embedding, norms, router and lm_head as they are), --mxfp4 as
gpt-oss's (each layer's experts.gate_up_proj [E, H, 2I] and down_proj [E, I, H] as
X_blocks [E, out, in / 32, 16] and X_scales [E, out, in / 32], U8). --mtp adds DeepSeek-V3's
multi-token-prediction layers after the last (num_nextn_predict_layers of them: a decoder
layer's tensors and its embed_tokens, enorm, hnorm, eh_proj and shared_head).
"""
import argparse
import json
import os
import struct


def neox_tensors(cfg):
    """GPTNeoXForCausalLM's: LayerNorms with biases, query_key_value and dense with biases
    (attention_bias), the MLP's two linears with biases, embed_out."""
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    bias = cfg.get("attention_bias", True)
    out = [("gpt_neox.embed_in.weight", [v, h])]
    for n in range(cfg["num_hidden_layers"]):
        p = f"gpt_neox.layers.{n}"
        for norm in ("input_layernorm", "post_attention_layernorm"):
            out += [(f"{p}.{norm}.weight", [h]), (f"{p}.{norm}.bias", [h])]
        for name, rows in (("query_key_value", 3 * h), ("dense", h)):
            out.append((f"{p}.attention.{name}.weight", [rows, h]))
            if bias:
                out.append((f"{p}.attention.{name}.bias", [rows]))
        out += [(f"{p}.mlp.dense_h_to_4h.weight", [i, h]), (f"{p}.mlp.dense_h_to_4h.bias", [i]),
                (f"{p}.mlp.dense_4h_to_h.weight", [h, i]), (f"{p}.mlp.dense_4h_to_h.bias", [h])]
    out += [("gpt_neox.final_layer_norm.weight", [h]), ("gpt_neox.final_layer_norm.bias", [h])]
    if not cfg.get("tie_word_embeddings", False):
        out.append(("embed_out.weight", [v, h]))
    return out


def gpt2_tensors(cfg):
    """GPT2LMHeadModel's: wte, wpe, per block LayerNorms and Conv1D weights [in, out] with
    biases, ln_f; lm_head tied to wte."""
    e, v, p = cfg.get("n_embd", 768), cfg.get("vocab_size", 50257), cfg.get("n_positions", 1024)
    inner = cfg.get("n_inner") or 4 * e
    out = [("transformer.wte.weight", [v, e]), ("transformer.wpe.weight", [p, e])]
    for n in range(cfg.get("n_layer", 12)):
        q = f"transformer.h.{n}"
        for name, nx, nf in (("attn.c_attn", e, 3 * e), ("attn.c_proj", e, e), ("mlp.c_fc", e, inner),
                             ("mlp.c_proj", inner, e)):
            out += [(f"{q}.{name}.weight", [nx, nf]), (f"{q}.{name}.bias", [nf])]
        for norm in ("ln_1", "ln_2"):
            out += [(f"{q}.{norm}.weight", [e]), (f"{q}.{norm}.bias", [e])]
    return out + [("transformer.ln_f.weight", [e]), ("transformer.ln_f.bias", [e])]


def gpt_oss_tensors(cfg):
    """GptOssForCausalLM's, its experts dequantised (as a bf16 copy of the checkpoint holds them;
    the published files keep them as MXFP4 blocks and scales): q/k/v/o with biases, the sinks,
    the router with its bias, the experts' fused gate_up_proj [E, H, 2I] and down_proj [E, I, H]
    with their biases."""
    h, v, e, f = cfg["hidden_size"], cfg["vocab_size"], cfg["num_local_experts"], cfg["intermediate_size"]
    heads, d = cfg["num_attention_heads"], cfg.get("head_dim", 64)
    kv = cfg.get("num_key_value_heads", heads)
    out = [("model.embed_tokens.weight", [v, h])]
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}"
        for name, rows, cols in (("q_proj", heads * d, h), ("k_proj", kv * d, h), ("v_proj", kv * d, h),
                                 ("o_proj", h, heads * d)):
            out += [(f"{p}.self_attn.{name}.weight", [rows, cols]), (f"{p}.self_attn.{name}.bias", [rows])]
        out += [(f"{p}.self_attn.sinks", [heads]), (f"{p}.input_layernorm.weight", [h]),
                (f"{p}.post_attention_layernorm.weight", [h]), (f"{p}.mlp.router.weight", [e, h]),
                (f"{p}.mlp.router.bias", [e]), (f"{p}.mlp.experts.gate_up_proj", [e, h, 2 * f]),
                (f"{p}.mlp.experts.gate_up_proj_bias", [e, 2 * f]), (f"{p}.mlp.experts.down_proj", [e, f, h]),
                (f"{p}.mlp.experts.down_proj_bias", [e, h])]
    out.append(("model.norm.weight", [h]))
    if not cfg.get("tie_word_embeddings", False):
        out.append(("lm_head.weight", [v, h]))
    return out


def deepseek_v2_tensors(cfg):
    """DeepseekV2ForCausalLM's: the latent attention's q_proj (or q_a_proj, q_a_layernorm,
    q_b_proj), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj and o_proj (attention_bias on
    q_a_proj, kv_a_proj_with_mqa and o_proj); a dense MLP before first_k_dense_replace and
    where moe_layer_freq skips, else the router (mlp.gate), the experts and the fused shared
    experts."""
    h, i, v, heads = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_attention_heads"]
    dn, dr, dv, lr, qr = (cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"],
                          cfg.get("q_lora_rank"))
    bias = cfg.get("attention_bias", False)
    out = [("model.embed_tokens.weight", [v, h])]
    for n in range(cfg["num_hidden_layers"]):
        p, a = f"model.layers.{n}", f"model.layers.{n}.self_attn"
        out += [(f"{p}.input_layernorm.weight", [h]), (f"{p}.post_attention_layernorm.weight", [h])]
        if qr is None:
            out.append((f"{a}.q_proj.weight", [heads * (dn + dr), h]))
        else:
            out += [(f"{a}.q_a_proj.weight", [qr, h]), (f"{a}.q_a_layernorm.weight", [qr]),
                    (f"{a}.q_b_proj.weight", [heads * (dn + dr), qr])] + ([(f"{a}.q_a_proj.bias", [qr])] if bias else [])
        out += [(f"{a}.kv_a_proj_with_mqa.weight", [lr + dr, h]), (f"{a}.kv_a_layernorm.weight", [lr]),
                (f"{a}.kv_b_proj.weight", [heads * (dn + dv), lr]), (f"{a}.o_proj.weight", [h, heads * dv])]
        if bias:
            out += [(f"{a}.kv_a_proj_with_mqa.bias", [lr + dr]), (f"{a}.o_proj.bias", [h])]
        e = cfg.get("n_routed_experts")
        if e is not None and n >= cfg.get("first_k_dense_replace", 0) and n % cfg.get("moe_layer_freq", 1) == 0:
            f = cfg["moe_intermediate_size"]
            out.append((f"{p}.mlp.gate.weight", [e, h]))
            if cfg["model_type"] == "deepseek_v3":  # noaux_tc's correction bias
                out.append((f"{p}.mlp.gate.e_score_correction_bias", [e]))
            for k in range(e):
                q = f"{p}.mlp.experts.{k}"
                out += [(f"{q}.gate_proj.weight", [f, h]), (f"{q}.up_proj.weight", [f, h]), (f"{q}.down_proj.weight", [h, f])]
            g = f * (cfg.get("n_shared_experts") or 0)
            if g:
                q = f"{p}.mlp.shared_experts"
                out += [(f"{q}.gate_proj.weight", [g, h]), (f"{q}.up_proj.weight", [g, h]), (f"{q}.down_proj.weight", [h, g])]
        else:
            out += [(f"{p}.mlp.gate_proj.weight", [i, h]), (f"{p}.mlp.up_proj.weight", [i, h]),
                    (f"{p}.mlp.down_proj.weight", [h, i])]
    out.append(("model.norm.weight", [h]))
    if not cfg.get("tie_word_embeddings", False):
        out.append(("lm_head.weight", [v, h]))
    return out


def tensors(cfg):
    if cfg["model_type"] == "gpt_oss":
        return gpt_oss_tensors(cfg)
    if cfg["model_type"] in ("deepseek_v2", "deepseek_v3"):
        return deepseek_v2_tensors(cfg)
    if cfg["model_type"] == "gpt_neox":
        return neox_tensors(cfg)
    if cfg["model_type"] == "gpt2":
        return gpt2_tensors(cfg)
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    gemma = cfg["model_type"] in ("gemma", "gemma2", "gemma3_text")
    d = cfg.get("head_dim") or (256 if gemma else h // heads)
    qwen2 = cfg["model_type"] in ("qwen2", "qwen2_moe")
    qkv_bias = qwen2 or cfg.get("attention_bias", False)
    o_bias = cfg.get("attention_bias", False) and not qwen2
    out = [("model.embed_tokens.weight", [v, h])]
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}"
        olmo2 = cfg["model_type"] == "olmo2"
        if not olmo2:
            out.append((f"{p}.input_layernorm.weight", [h]))
        projections = (("q_proj", heads * d), ("k_proj", kv * d), ("v_proj", kv * d))
        if cfg["model_type"] == "phi3":  # fused
            projections = (("qkv_proj", (heads + 2 * kv) * d),)
        for name, rows in projections:
            out.append((f"{p}.self_attn.{name}.weight", [rows, h]))
            if qkv_bias:
                out.append((f"{p}.self_attn.{name}.bias", [rows]))
        if cfg["model_type"] in ("qwen3", "qwen3_moe", "gemma3_text"):
            out += [(f"{p}.self_attn.q_norm.weight", [d]), (f"{p}.self_attn.k_norm.weight", [d])]
        if olmo2 or cfg["model_type"] == "olmoe":  # over the whole projections
            out += [(f"{p}.self_attn.q_norm.weight", [heads * d]), (f"{p}.self_attn.k_norm.weight", [kv * d])]
        out.append((f"{p}.self_attn.o_proj.weight", [h, heads * d]))
        if o_bias:
            out.append((f"{p}.self_attn.o_proj.bias", [h]))
        out.append((f"{p}.post_attention_layernorm.weight", [h]))
        sparse = cfg["model_type"] in ("qwen2_moe", "qwen3_moe", "olmoe") and cfg.get("num_experts", 0) > 0 and \
            n not in cfg.get("mlp_only_layers", []) and (n + 1) % cfg.get("decoder_sparse_step", 1) == 0
        if sparse:  # the SparseMoeBlocks of Qwen2-MoE, Qwen3-MoE, OLMoE
            e, f = cfg["num_experts"], cfg.get("moe_intermediate_size", i)
            out.append((f"{p}.mlp.gate.weight", [e, h]))
            for k in range(e):
                q = f"{p}.mlp.experts.{k}"
                out += [(f"{q}.gate_proj.weight", [f, h]), (f"{q}.up_proj.weight", [f, h]), (f"{q}.down_proj.weight", [h, f])]
            if cfg["model_type"] == "qwen2_moe":  # its shared expert and the gate's one output
                g, q = cfg["shared_expert_intermediate_size"], f"{p}.mlp.shared_expert"
                out += [(f"{q}.gate_proj.weight", [g, h]), (f"{q}.up_proj.weight", [g, h]), (f"{q}.down_proj.weight", [h, g]),
                        (f"{p}.mlp.shared_expert_gate.weight", [1, h])]
        elif cfg["model_type"] == "mixtral":
            e = cfg["num_local_experts"]
            out.append((f"{p}.block_sparse_moe.gate.weight", [e, h]))
            for k in range(e):
                q = f"{p}.block_sparse_moe.experts.{k}"
                out += [(f"{q}.w1.weight", [i, h]), (f"{q}.w2.weight", [h, i]), (f"{q}.w3.weight", [i, h])]
        elif cfg["model_type"] == "phi3":
            out += [(f"{p}.mlp.gate_up_proj.weight", [2 * i, h]), (f"{p}.mlp.down_proj.weight", [h, i])]
        else:
            out += [(f"{p}.mlp.gate_proj.weight", [i, h]), (f"{p}.mlp.up_proj.weight", [i, h]),
                    (f"{p}.mlp.down_proj.weight", [h, i])]
        if olmo2:
            out.append((f"{p}.post_feedforward_layernorm.weight", [h]))
        if gemma and cfg["model_type"] != "gemma":  # Gemma 2 and 3: norms around the MLP too
            out += [(f"{p}.pre_feedforward_layernorm.weight", [h]), (f"{p}.post_feedforward_layernorm.weight", [h])]
    out.append(("model.norm.weight", [h]))
    if not cfg.get("tie_word_embeddings", gemma):
        out.append(("lm_head.weight", [v, h]))
    return out


def shape(text):
    return [int(x) for x in text.split(",")]


SIZES = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "U8": 1}


def write(path, entries, dtype, size, header_length=None, overlap=False):
    """entries: (name, dims) in dtype, or (name, dims, its own dtype)"""
    header, at = {"__metadata__": {"format": "pt"}}, 0
    for k, (name, dims, *own) in enumerate(entries):
        n = SIZES[own[0]] if own else size
        for x in dims:
            n *= x
        if overlap and k == 1:
            at -= size
        header[name] = {"dtype": own[0] if own else dtype, "shape": dims, "data_offsets": [at, at + n]}
        at += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", header_length if header_length is not None else len(text)))
        f.write(text)
        f.truncate(8 + len(text) + at)


ap = argparse.ArgumentParser()
ap.add_argument("config")
ap.add_argument("out")
ap.add_argument("--dtype", default="F32", choices=["F32", "BF16", "F16"])
ap.add_argument("--shards", type=int, default=0)
ap.add_argument("--absent", type=int, default=0)
ap.add_argument("--drop", action="append", default=[])
ap.add_argument("--add", action="append", default=[])
ap.add_argument("--reshape", action="append", default=[])
ap.add_argument("--lm-head", action="store_true")
ap.add_argument("--header-length", type=int)
ap.add_argument("--overlap", action="store_true")
ap.add_argument("--misplace")
ap.add_argument("--fp8", type=int, default=0)
ap.add_argument("--mxfp4", action="store_true")
ap.add_argument("--mtp", action="store_true")
args = ap.parse_args()
cfg = json.load(open(args.config))
entries = tensors(cfg)
if args.mtp:  # DeepSeek-V3's MTP layers: the last layer's tensors again, and their own
    last, n = cfg["num_hidden_layers"] - 1, cfg["num_hidden_layers"]
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    for k in range(cfg.get("num_nextn_predict_layers", 0)):
        p = f"model.layers.{n + k}"
        entries += [(name.replace(f"model.layers.{last}.", p + ".", 1), dims) for name, dims in entries
                    if name.startswith(f"model.layers.{last}.")]
        entries += [(f"{p}.embed_tokens.weight", [v, h]), (f"{p}.enorm.weight", [h]), (f"{p}.hnorm.weight", [h]),
                    (f"{p}.eh_proj.weight", [h, 2 * h]), (f"{p}.shared_head.norm.weight", [h]),
                    (f"{p}.shared_head.head.weight", [v, h])]
if args.fp8:
    cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                  "weight_block_size": [args.fp8, args.fp8]}
    fp8 = []
    for name, dims in entries:
        if name.startswith("model.layers.") and name.endswith("_proj.weight") and len(dims) == 2:
            fp8 += [(name, dims, "F8_E4M3"), (name + "_scale_inv", [-(-d // args.fp8) for d in dims], "F32")]
        else:
            fp8.append((name, dims))
    entries = fp8
if args.mxfp4:
    cfg["quantization_config"] = {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                             "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"}
    packed = []
    for name, dims, *own in entries:
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            e, d_in, d_out = dims
            packed += [(name + "_blocks", [e, d_out, d_in // 32, 16], "U8"), (name + "_scales", [e, d_out, d_in // 32], "U8")]
        else:
            packed.append((name, dims, *own))
    entries = packed
entries = [e for e in entries if e[0] not in args.drop]
if args.lm_head and not any(e[0] == "lm_head.weight" for e in entries):
    entries.append(("lm_head.weight", [cfg["vocab_size"], cfg["hidden_size"]]))
for a in args.add:
    name, dims = a.split("=")
    entries.append((name, shape(dims)))
for a in args.reshape:
    name, dims = a.split("=")
    entries = [(n, shape(dims) if n == name else s, *own) for n, s, *own in entries]
size = {"F32": 4, "BF16": 2, "F16": 2}[args.dtype]
os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, "config.json"), "w") as f:
    json.dump(cfg, f, indent=2)
if args.shards:
    per = -(-len(entries) // args.shards)
    weight_map = {}
    for k in range(args.shards):
        file = f"model-{k + 1:05d}-of-{args.shards:05d}.safetensors"
        part = entries[k * per:(k + 1) * per]
        weight_map.update({e[0]: file for e in part})
    if args.misplace:
        weight_map[args.misplace] = "model-00001-of-%05d.safetensors" % args.shards
    for k in range(args.shards):
        file = f"model-{k + 1:05d}-of-{args.shards:05d}.safetensors"
        part = entries[k * per:(k + 1) * per]
        if k + 1 != args.absent:
            write(os.path.join(args.out, file), part, args.dtype, size)
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)
else:
    write(os.path.join(args.out, "model.safetensors"), entries, args.dtype, size, args.header_length, args.overlap)
