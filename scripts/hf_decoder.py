"""A Hugging Face decoder (Llama, Mistral, Qwen2, Qwen3, Qwen2-MoE, Qwen3-MoE, OLMoE, SmolLM3,
OLMo 2, Phi-3, GPT-NeoX, Gemma, Gemma 2, Gemma 3, GPT-2) in plain torch, module for module as transformers writes LlamaForCausalLM (Qwen3ForCausalLM: RMSNorm of each head of q
and k, q_norm and k_norm, before rope; Olmo2ForCausalLM: RMSNorm of the whole q and k
projections, and the layer's norms after attention and the MLP instead of before;
Phi3ForCausalLM: one qkv_proj cut into q, k and v, one gate_up_proj cut into gate and up;
SmolLM3ForCausalLM: no rope in the layers no_rope_layers marks 0; Qwen3MoeForCausalLM: Qwen3's
attention and Qwen3MoeSparseMoeBlock in the layers decoder_sparse_step and mlp_only_layers pick
(Qwen2MoeForCausalLM's with its gated shared expert; OlmoeForCausalLM's with OLMo 2's q/k norms); GPTNeoXForCausalLM, its
own classes below: fused per-head qkv, partial rope, LayerNorm, GELU, parallel residual;
GemmaForCausalLM for Gemma, Gemma 2 and Gemma 3 text, its own classes too: RMSNorm by 1 + weight,
scaled embeddings, GeGLU, post-norms, query_pre_attn_scalar, soft-capping, sliding layers;
GPT2LMHeadModel with Conv1D and learned positions; GptOssForCausalLM: sinks, windows, its
experts; DeepseekV2ForCausalLM for DeepSeek-V2 and V3 as DeepSeek's modeling code writes them:
multi-head latent attention expanded, its interleaved rope, the shared and routed experts,
V2's and V3's gates), built from a config.json: for scripts/torch_export.py
and its tests, where transformers is not installed. Run from the repository's root:

  python3 scripts/torch_export.py hf_decoder:tiny_llama --input-ids 5

from_config(path) builds any such config.json (random weights); tiny_llama and tiny_qwen2
build the test configs under tests/data/hf/. The modules and their paths are those of
transformers (model.embed_tokens, model.layers.N.input_layernorm,
model.layers.N.self_attn.{q,k,v,o}_proj, model.layers.N.mlp.{gate,up,down}_proj and act_fn,
model.norm, model.rotary_emb, lm_head), and so is the arithmetic: LlamaRMSNorm, the
rotary embedding computed once for the model and applied in the rotate-half convention,
repeat_kv for grouped-query attention, the eager attention with its causal mask, and the
SwiGLU MLP. Of rope_scaling only yarn and longrope are built here (rope_parameters).
"""
import json
import math
import os

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))


class Config:
    def __init__(self, d):
        self.hidden_size = d["hidden_size"]
        self.intermediate_size = d["intermediate_size"]
        self.num_attention_heads = d["num_attention_heads"]
        self.num_key_value_heads = d.get("num_key_value_heads", self.num_attention_heads)
        self.head_dim = d.get("head_dim") or self.hidden_size // self.num_attention_heads
        self.num_hidden_layers = d["num_hidden_layers"]
        self.vocab_size = d["vocab_size"]
        self.rms_norm_eps = d.get("rms_norm_eps", 1e-6)
        self.rope_theta = d.get("rope_theta", 10000.0)
        self.tie_word_embeddings = d.get("tie_word_embeddings", False)
        qwen2 = d.get("model_type") in ("qwen2", "qwen2_moe")
        self.qk_norm = d.get("model_type") == "qwen3"
        self.olmo2 = d.get("model_type") == "olmo2"  # norms after attention and the MLP; q/k norms over the projections
        self.phi3 = d.get("model_type") == "phi3"  # fused qkv_proj and gate_up_proj
        self.qk_norm = self.qk_norm or d.get("model_type") == "qwen3_moe"
        self.qk_full = self.olmo2 or d.get("model_type") == "olmoe"  # q/k norms over the whole projections
        # Qwen2-MoE, Qwen3-MoE, OLMoE: a router and experts in the layers decoder_sparse_step and
        # mlp_only_layers pick (Qwen2-MoE's with a shared expert)
        self.sparse = [d.get("model_type") in ("qwen2_moe", "qwen3_moe", "olmoe") and d.get("num_experts", 0) > 0 and
                       j not in d.get("mlp_only_layers", []) and (j + 1) % d.get("decoder_sparse_step", 1) == 0
                       for j in range(d["num_hidden_layers"])]
        self.num_experts, self.top_k = d.get("num_experts", 0), d.get("num_experts_per_tok", 0)
        self.moe_intermediate_size = d.get("moe_intermediate_size", d["intermediate_size"])
        self.shared_expert_intermediate_size = d.get("shared_expert_intermediate_size", 0)
        self.norm_topk_prob = d.get("norm_topk_prob", False)
        n = self.num_hidden_layers
        self.use_rope = [1] * n
        if d.get("model_type") == "smollm3":  # SmolLM3: no rope where no_rope_layers[i] is 0
            every = d.get("no_rope_layer_interval", 4)
            self.use_rope = d.get("no_rope_layers") or [int((j + 1) % every != 0) for j in range(n)]
        self.qkv_bias = qwen2 or d.get("attention_bias", False)
        self.o_bias = d.get("attention_bias", False) and not qwen2
        window = d.get("sliding_window")
        if d.get("model_type") in ("qwen2", "qwen3") and not d.get("use_sliding_window", False):
            window = None
        self.sliding_window = window
        # Phi-3's partial rope (Phi-4-mini) and rope scaling
        self.rotary_dim = int(self.head_dim * d.get("partial_rotary_factor", 1.0)) if self.phi3 else self.head_dim
        self.rope = d


def rope_parameters(d, dim, seq_len):
    """inv_freq and the cos/sin scale of a config.json's rope over dim dims at a sequence of seq_len
    tokens, as transformers' _compute_{default,yarn,longrope}_parameters compute them."""
    base = float(d.get("rope_theta", 10000.0))
    rs = d.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    kind = "longrope" if kind == "su" else kind
    shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    if kind == "default":
        return 1.0 / (base ** shape), 1.0
    if kind not in ("yarn", "longrope"):
        raise ValueError(f"hf_decoder: rope_scaling {kind} is not built here")
    orig = rs.get("original_max_position_embeddings") or d.get("original_max_position_embeddings") or \
        d["max_position_embeddings"]
    factor = rs.get("factor") or d["max_position_embeddings"] / orig
    attention_factor = rs.get("attention_factor")
    if kind == "longrope":
        if attention_factor is None:
            attention_factor = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(orig))
        ext = torch.tensor(rs["long_factor"] if seq_len > orig else rs["short_factor"], dtype=torch.float32)
        return 1.0 / (ext * base ** shape), attention_factor

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0
    if attention_factor is None:
        if rs.get("mscale") and rs.get("mscale_all_dim"):
            attention_factor = mscale(factor, rs["mscale"]) / mscale(factor, rs["mscale_all_dim"])
        else:
            attention_factor = mscale(factor)

    def correction_dim(rotations):
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))
    low, high = correction_dim(rs.get("beta_fast") or 32), correction_dim(rs.get("beta_slow") or 1)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    keep = 1 - ramp
    return (1.0 / (factor * pos_freqs)) * (1 - keep) + (1.0 / pos_freqs) * keep, attention_factor


def rope_tables(d, dim, t):
    """cos and sin [t, dim] of positions 0..t-1 (rotate-half layout: the frequencies twice),
    scaled by the rope's attention factor (rope_parameters)."""
    inv_freq, scale = rope_parameters(d, dim, t)
    freqs = torch.arange(t).float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * scale, emb.sin() * scale


class PreNormLayer(nn.Module):
    """A decoder layer as Llama's: x + attn(norm(x)), then + mlp(norm(x)), the attention
    given the rope's cos and sin (gpt-oss's, DeepSeek's)."""

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class PreNormModel(nn.Module):
    """The embedding, the layers given the rope's cos and sin (tables(T)), the final norm."""

    def forward(self, input_ids):
        cos, sin = self.tables(input_ids.shape[1])
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config

    def forward(self, x, position_ids):
        # transformers' dynamic update: longrope's factors by the sequence's length
        self.inv_freq, self.attention_scaling = rope_parameters(self.config.rope, self.config.rotary_dim,
                                                                int(position_ids.max()) + 1)
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    """Over the first cos.shape[-1] dims of each head (Phi-3's partial rope), the rest passed through."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    r = cos.shape[-1]
    q_rot, q_pass, k_rot, k_pass = q[..., :r], q[..., r:], k[..., :r], k[..., r:]
    q_rot, k_rot = (q_rot * cos) + (rotate_half(q_rot) * sin), (k_rot * cos) + (rotate_half(k_rot) * sin)
    return torch.cat((q_rot, q_pass), dim=-1), torch.cat((k_rot, k_pass), dim=-1)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.config = config
        self.use_rope = config.use_rope[layer_idx]
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.is_causal = True
        self.sliding_window = config.sliding_window
        h = config.hidden_size
        if config.phi3:  # Phi3Attention: one projection, cut into q, k and v
            self.qkv_proj = nn.Linear(h, (self.num_heads + 2 * self.num_key_value_heads) * self.head_dim, bias=False)
        else:
            self.q_proj = nn.Linear(h, self.num_heads * self.head_dim, bias=config.qkv_bias)
            self.k_proj = nn.Linear(h, self.num_key_value_heads * self.head_dim, bias=config.qkv_bias)
            self.v_proj = nn.Linear(h, self.num_key_value_heads * self.head_dim, bias=config.qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=config.o_bias)
        if config.qk_norm:  # Qwen3Attention: RMSNorm over each head's head_dim
            self.q_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)
            self.k_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        if config.qk_full:  # Olmo2Attention, OlmoeAttention: RMSNorm over the whole q and k projections
            self.q_norm = LlamaRMSNorm(self.num_heads * self.head_dim, eps=config.rms_norm_eps)
            self.k_norm = LlamaRMSNorm(self.num_key_value_heads * self.head_dim, eps=config.rms_norm_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        if self.config.phi3:
            qkv = self.qkv_proj(hidden_states)
            qp, kvp = self.num_heads * self.head_dim, self.num_key_value_heads * self.head_dim
            query_states, key_states, values = qkv[..., :qp], qkv[..., qp:qp + kvp], qkv[..., qp + kvp:]
        else:
            query_states, key_states = self.q_proj(hidden_states), self.k_proj(hidden_states)
            values = self.v_proj(hidden_states)
        if self.config.qk_full:
            query_states, key_states = self.q_norm(query_states), self.k_norm(key_states)
        query_states, key_states = query_states.view(hidden_shape), key_states.view(hidden_shape)
        if self.config.qk_norm:
            query_states, key_states = self.q_norm(query_states), self.k_norm(key_states)
        query_states, key_states = query_states.transpose(1, 2), key_states.transpose(1, 2)
        value_states = values.reshape(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        if self.use_rope:
            query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class LlamaMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.phi3 = config.phi3
        if config.phi3:  # Phi3MLP: gate and up from one projection, gate first
            self.gate_up_proj = nn.Linear(h, 2 * i, bias=False)
        else:
            self.gate_proj = nn.Linear(h, i, bias=False)
            self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        if self.phi3:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            return self.down_proj(up * self.act_fn(gate))
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Qwen3MoeMLP(nn.Module):
    def __init__(self, h, i):
        super().__init__()
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Qwen3MoeSparseMoeBlock(nn.Module):
    """The router's softmax over every expert, its top_k, renormalised where norm_topk_prob,
    and the sum of each chosen expert's output times its probability."""

    def __init__(self, config):
        super().__init__()
        self.top_k, self.norm_topk_prob = config.top_k, config.norm_topk_prob
        self.gate = nn.Linear(config.hidden_size, config.num_experts, bias=False)
        self.experts = nn.ModuleList([Qwen3MoeMLP(config.hidden_size, config.moe_intermediate_size)
                                      for _ in range(config.num_experts)])
        if config.shared_expert_intermediate_size:  # Qwen2MoeSparseMoeBlock
            self.shared_expert = Qwen3MoeMLP(config.hidden_size, config.shared_expert_intermediate_size)
            self.shared_expert_gate = nn.Linear(config.hidden_size, 1, bias=False)

    def forward(self, hidden_states):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        routing_weights = nn.functional.softmax(self.gate(x), dim=1, dtype=torch.float)
        routing_weights, selected = torch.topk(routing_weights, self.top_k, dim=-1)
        if self.norm_topk_prob:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(x.dtype)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(selected == e)
            if rows.numel():
                out.index_add_(0, rows, expert(x[rows]) * routing_weights[rows, slot, None])
        if hasattr(self, "shared_expert"):
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out.reshape(shape)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.self_attn = LlamaAttention(config, layer_idx)
        self.mlp = Qwen3MoeSparseMoeBlock(config) if config.sparse[layer_idx] else LlamaMLP(config)
        self.olmo2 = config.olmo2
        if not config.olmo2:
            self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        if config.olmo2:
            self.post_feedforward_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask, position_embeddings):
        if self.olmo2:  # Olmo2DecoderLayer: each sublayer's output normalised before its residual add
            attn, _ = self.self_attn(hidden_states=hidden_states, position_embeddings=position_embeddings,
                                     attention_mask=attention_mask)
            hidden_states = hidden_states + self.post_attention_layernorm(attn)
            return hidden_states + self.post_feedforward_layernorm(self.mlp(hidden_states))
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, position_embeddings=position_embeddings,
                                          attention_mask=attention_mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


class LlamaModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def forward(self, input_ids):
        inputs_embeds = self.embed_tokens(input_ids)
        t = input_ids.shape[1]
        position_ids = torch.arange(t)[None, :]
        # the causal mask (and Mistral's sliding window): 0 where a query may look, -inf elsewhere
        i = torch.arange(t)
        allowed = i[None, :] <= i[:, None]
        if self.config.sliding_window:
            allowed &= i[None, :] > i[:, None] - self.config.sliding_window
        mask = torch.zeros(t, t).masked_fill(~allowed, -math.inf)[None, None]
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, mask, position_embeddings)
        return self.norm(hidden_states)


class LlamaForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids))


class GPTNeoXAttention(nn.Module):
    """GPTNeoXAttention: one query_key_value projection holding each head's q, k and v side by
    side, rope over the first rotary_ndims dims of each head only, scale 1/sqrt(head_size)."""

    def __init__(self, d):
        super().__init__()
        h = d["hidden_size"]
        self.heads = d["num_attention_heads"]
        self.head_size = h // self.heads
        pct = d.get("partial_rotary_factor", d.get("rotary_pct", 0.25))
        self.rotary_ndims = int(self.head_size * pct)
        base = d.get("rope_theta", d.get("rotary_emb_base", 10000))
        dim = self.rotary_ndims
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)),
                             persistent=False)
        bias = d.get("attention_bias", True)
        self.query_key_value = nn.Linear(h, 3 * h, bias=bias)
        self.dense = nn.Linear(h, h, bias=bias)

    def forward(self, x):
        n, t, _ = x.shape
        qkv = self.query_key_value(x).view(n, t, self.heads, 3 * self.head_size).transpose(1, 2)
        q, k, v = qkv.chunk(3, dim=-1)
        freqs = torch.arange(t).float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        r = self.rotary_ndims
        q = torch.cat(((q[..., :r] * cos) + (rotate_half(q[..., :r]) * sin), q[..., r:]), dim=-1)
        k = torch.cat(((k[..., :r] * cos) + (rotate_half(k[..., :r]) * sin), k[..., r:]), dim=-1)
        w = torch.matmul(q, k.transpose(2, 3)) * self.head_size ** -0.5
        i = torch.arange(t)
        w = w.masked_fill(~(i[None, :] <= i[:, None]), -math.inf)
        w = nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(w, v).transpose(1, 2).reshape(n, t, -1)
        return self.dense(out)


class GPTNeoXMLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        h, i = d["hidden_size"], d["intermediate_size"]
        self.dense_h_to_4h = nn.Linear(h, i)
        self.act = nn.GELU(approximate="none" if d.get("hidden_act", "gelu") == "gelu" else "tanh")
        self.dense_4h_to_h = nn.Linear(i, h)

    def forward(self, x):
        return self.dense_4h_to_h(self.act(self.dense_h_to_4h(x)))


class GPTNeoXLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        h, eps = d["hidden_size"], d.get("layer_norm_eps", 1e-5)
        self.use_parallel_residual = d.get("use_parallel_residual", True)
        self.input_layernorm = nn.LayerNorm(h, eps=eps)
        self.post_attention_layernorm = nn.LayerNorm(h, eps=eps)
        self.attention = GPTNeoXAttention(d)
        self.mlp = GPTNeoXMLP(d)

    def forward(self, x):
        attn = self.attention(self.input_layernorm(x))
        if self.use_parallel_residual:  # x + attn(ln1(x)) + mlp(ln2(x))
            return self.mlp(self.post_attention_layernorm(x)) + attn + x
        attn = attn + x
        return self.mlp(self.post_attention_layernorm(attn)) + attn


class GPTNeoXModel(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.embed_in = nn.Embedding(d["vocab_size"], d["hidden_size"])
        self.layers = nn.ModuleList([GPTNeoXLayer(d) for _ in range(d["num_hidden_layers"])])
        self.final_layer_norm = nn.LayerNorm(d["hidden_size"], eps=d.get("layer_norm_eps", 1e-5))

    def forward(self, input_ids):
        x = self.embed_in(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.final_layer_norm(x)


class GPTNeoXForCausalLM(nn.Module):
    def __init__(self, d):
        super().__init__()
        if d.get("rope_scaling"):
            raise ValueError("hf_decoder: rope_scaling is not built here")
        self.gpt_neox = GPTNeoXModel(d)
        self.embed_out = nn.Linear(d["hidden_size"], d["vocab_size"], bias=False)
        if d.get("tie_word_embeddings", False):
            self.embed_out.weight = self.gpt_neox.embed_in.weight

    def forward(self, input_ids):
        return self.embed_out(self.gpt_neox(input_ids))


class GemmaRMSNorm(nn.Module):
    """Gemma's RMSNorm: in fp32, x / rms(x) * (1 + weight)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).type_as(x)


class GemmaConfig:
    """The fields of a gemma, gemma2 or gemma3_text config.json, with transformers' defaults."""

    def __init__(self, d):
        self.model_type = d["model_type"]
        self.hidden_size, self.intermediate_size = d["hidden_size"], d["intermediate_size"]
        self.heads = d["num_attention_heads"]
        self.kv_heads = d.get("num_key_value_heads", self.heads)
        self.head_dim = d.get("head_dim", 256)
        self.layers, self.vocab_size = d["num_hidden_layers"], d["vocab_size"]
        self.eps = d.get("rms_norm_eps", 1e-6)
        self.rope_theta = d.get("rope_theta", 10000.0)
        self.tie = d.get("tie_word_embeddings", True)
        self.act = d.get("hidden_activation") or "gelu_pytorch_tanh"
        later = self.model_type != "gemma"
        self.post_norms, self.qk_norm = later, self.model_type == "gemma3_text"
        self.scaling = d.get("query_pre_attn_scalar", 256) ** -0.5 if later else self.head_dim ** -0.5
        self.softcap = d.get("attn_logit_softcapping") if later else None
        self.final_softcap = d.get("final_logit_softcapping") if later else None
        self.window = d.get("sliding_window", 4096)
        types = d.get("layer_types")
        pattern = d.get("sliding_window_pattern", 6)
        self.sliding = [(types[i] == "sliding_attention") if types else
                        (self.model_type == "gemma2" and i % 2 == 0) or
                        (self.model_type == "gemma3_text" and (i + 1) % pattern != 0) for i in range(self.layers)]
        self.local_theta = d.get("rope_local_base_freq", 10000.0)
        if d.get("rope_scaling"):
            raise ValueError("hf_decoder: rope_scaling is not built here")


class GemmaAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.hidden_size, c.heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.heads * c.head_dim, c.hidden_size, bias=False)
        if c.qk_norm:  # Gemma3Attention: Gemma's RMSNorm over each head
            self.q_norm = GemmaRMSNorm(c.head_dim, c.eps)
            self.k_norm = GemmaRMSNorm(c.head_dim, c.eps)

    def forward(self, x, cos, sin, mask):
        c, shape = self.c, (*x.shape[:-1], -1, self.c.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k, v = repeat_kv(k, c.heads // c.kv_heads), repeat_kv(v, c.heads // c.kv_heads)
        w = torch.matmul(q, k.transpose(2, 3)) * c.scaling
        if c.softcap:  # Gemma 2: the scores capped before the mask
            w = torch.tanh(w / c.softcap) * c.softcap
        w = nn.functional.softmax(w + mask, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.o_proj(torch.matmul(w, v).transpose(1, 2).reshape(*x.shape[:-1], -1))


class GemmaMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)
        self.act_fn = nn.GELU(approximate="none" if c.act == "gelu" else "tanh")

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class GemmaDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.post_norms = c.post_norms
        self.self_attn, self.mlp = GemmaAttention(c), GemmaMLP(c)
        self.input_layernorm = GemmaRMSNorm(c.hidden_size, c.eps)
        self.post_attention_layernorm = GemmaRMSNorm(c.hidden_size, c.eps)
        if c.post_norms:  # Gemma 2 and 3: post_attention_layernorm on the attention's output
            self.pre_feedforward_layernorm = GemmaRMSNorm(c.hidden_size, c.eps)
            self.post_feedforward_layernorm = GemmaRMSNorm(c.hidden_size, c.eps)

    def forward(self, x, cos, sin, mask):
        a = self.self_attn(self.input_layernorm(x), cos, sin, mask)
        if not self.post_norms:
            x = x + a
            return x + self.mlp(self.post_attention_layernorm(x))
        x = x + self.post_attention_layernorm(a)
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class GemmaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([GemmaDecoderLayer(c) for _ in range(c.layers)])
        self.norm = GemmaRMSNorm(c.hidden_size, c.eps)

    def rope(self, theta, t):
        d = self.c.head_dim
        inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        emb = torch.arange(t).float()[:, None] * inv[None, :]
        emb = torch.cat((emb, emb), dim=-1)
        return emb.cos()[None], emb.sin()[None]

    def forward(self, input_ids):
        c, t = self.c, input_ids.shape[1]
        x = self.embed_tokens(input_ids) * torch.tensor(c.hidden_size ** 0.5, dtype=torch.float32)
        i = torch.arange(t)
        causal = i[None, :] <= i[:, None]
        masks = {False: causal, True: causal & (i[None, :] > i[:, None] - c.window)}
        masks = {k: torch.zeros(t, t).masked_fill(~v, -math.inf)[None, None] for k, v in masks.items()}
        ropes = {False: self.rope(c.rope_theta, t), True: self.rope(c.local_theta if c.qk_norm else c.rope_theta, t)}
        for layer, sliding in zip(self.layers, c.sliding):
            cos, sin = ropes[sliding]
            x = layer(x, cos, sin, masks[sliding])
        return self.norm(x)


class GemmaForCausalLM(nn.Module):
    def __init__(self, d):
        super().__init__()
        c = GemmaConfig(d)
        self.final_softcap = c.final_softcap
        self.model = GemmaModel(c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if c.tie:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids):
        logits = self.lm_head(self.model(input_ids))
        if self.final_softcap:  # Gemma 2
            logits = torch.tanh(logits / self.final_softcap) * self.final_softcap
        return logits


class Conv1D(nn.Module):
    """Hugging Face's Conv1D (GPT-2): x @ weight + bias, the weight [nx, nf]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)


class GPT2Attention(nn.Module):
    def __init__(self, d, layer_idx):
        super().__init__()
        e = d.get("n_embd", 768)
        self.heads = d.get("n_head", 12)
        self.head_dim = e // self.heads
        self.scale = (self.head_dim ** -0.5 if d.get("scale_attn_weights", True) else 1.0) / \
            (layer_idx + 1 if d.get("scale_attn_by_inverse_layer_idx", False) else 1)
        self.c_attn, self.c_proj = Conv1D(3 * e, e), Conv1D(e, e)

    def forward(self, x):
        n, t, e = x.shape
        q, k, v = (z.view(n, t, self.heads, self.head_dim).transpose(1, 2) for z in self.c_attn(x).split(e, dim=2))
        w = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        i = torch.arange(t)
        w = w.masked_fill(~(i[None, :] <= i[:, None]), -math.inf)
        w = nn.functional.softmax(w, dim=-1)
        return self.c_proj(torch.matmul(w, v).transpose(1, 2).reshape(n, t, e))


class GPT2MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        e = d.get("n_embd", 768)
        inner = d.get("n_inner") or 4 * e
        self.c_fc, self.c_proj = Conv1D(inner, e), Conv1D(e, inner)
        self.act = nn.GELU(approximate="none" if d.get("activation_function", "gelu_new") == "gelu" else "tanh")

    def forward(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, d, layer_idx):
        super().__init__()
        e, eps = d.get("n_embd", 768), d.get("layer_norm_epsilon", 1e-5)
        self.ln_1, self.attn = nn.LayerNorm(e, eps=eps), GPT2Attention(d, layer_idx)
        self.ln_2, self.mlp = nn.LayerNorm(e, eps=eps), GPT2MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        e = d.get("n_embd", 768)
        self.wte = nn.Embedding(d.get("vocab_size", 50257), e)
        self.wpe = nn.Embedding(d.get("n_positions", 1024), e)
        self.h = nn.ModuleList([GPT2Block(d, i) for i in range(d.get("n_layer", 12))])
        self.ln_f = nn.LayerNorm(e, eps=d.get("layer_norm_epsilon", 1e-5))

    def forward(self, input_ids):
        x = self.wte(input_ids) + self.wpe(torch.arange(input_ids.shape[1]))[None]
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.transformer = GPT2Model(d)
        self.lm_head = nn.Linear(d.get("n_embd", 768), d.get("vocab_size", 50257), bias=False)
        if d.get("tie_word_embeddings", True):
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, input_ids):
        return self.lm_head(self.transformer(input_ids))


class GptOssAttention(nn.Module):
    """GptOssAttention: q, k, v and o with biases, rope, a learned sink logit per head that joins
    each softmax (its probability dropped after), a sliding window in the sliding layers."""

    def __init__(self, d, sliding):
        super().__init__()
        self.heads, self.kv_heads = d["num_attention_heads"], d.get("num_key_value_heads", d["num_attention_heads"])
        self.head_dim = d.get("head_dim", 64)
        self.window = d.get("sliding_window", 128) if sliding else None
        h, bias = d["hidden_size"], d.get("attention_bias", True)
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=bias)
        self.sinks = nn.Parameter(torch.empty(self.heads))

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k, v = repeat_kv(k, self.heads // self.kv_heads), repeat_kv(v, self.heads // self.kv_heads)
        i = torch.arange(t)
        allowed = i[None, :] <= i[:, None]
        if self.window:
            allowed &= i[None, :] > i[:, None] - self.window
        w = torch.matmul(q, k.transpose(2, 3)) * self.head_dim ** -0.5
        w = w + torch.zeros(t, t).masked_fill(~allowed, -math.inf)[None, None]
        sinks = self.sinks.reshape(1, -1, 1, 1).expand(b, -1, t, -1)
        combined = torch.cat([w, sinks], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probs = nn.functional.softmax(combined, dim=-1, dtype=combined.dtype)[..., :-1]
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(out)


class GptOssTopKRouter(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.top_k, e = d["num_experts_per_tok"], d["num_local_experts"]
        self.weight = nn.Parameter(torch.empty(e, d["hidden_size"]))
        self.bias = nn.Parameter(torch.empty(e))

    def forward(self, x):
        logits = nn.functional.linear(x, self.weight, self.bias)
        top, idx = torch.topk(logits, self.top_k, dim=-1)
        top = nn.functional.softmax(top, dim=1, dtype=top.dtype)
        return torch.zeros_like(logits).scatter_(1, idx, top), idx


class GptOssExperts(nn.Module):
    """GptOssExperts: gate and up interleaved in one [E, H, 2I] tensor (gate the even columns),
    biases, the clamped SwiGLU (alpha 1.702, swiglu_limit)."""

    def __init__(self, d):
        super().__init__()
        e, h, f = d["num_local_experts"], d["hidden_size"], d["intermediate_size"]
        self.gate_up_proj = nn.Parameter(torch.empty(e, h, 2 * f))
        self.gate_up_proj_bias = nn.Parameter(torch.empty(e, 2 * f))
        self.down_proj = nn.Parameter(torch.empty(e, f, h))
        self.down_proj_bias = nn.Parameter(torch.empty(e, h))
        self.alpha, self.limit = 1.702, d.get("swiglu_limit", 7.0)

    def forward(self, x, idx, weights):
        out = torch.zeros_like(x)
        for e in range(self.gate_up_proj.shape[0]):
            tokens = (idx == e).any(dim=-1).nonzero().flatten()
            if tokens.numel() == 0:
                continue
            gate_up = x[tokens] @ self.gate_up_proj[e] + self.gate_up_proj_bias[e]
            gate, up = gate_up[..., ::2], gate_up[..., 1::2]
            gate = gate.clamp(min=None, max=self.limit)
            up = up.clamp(min=-self.limit, max=self.limit)
            glu = gate * torch.sigmoid(gate * self.alpha)
            y = ((up + 1) * glu) @ self.down_proj[e] + self.down_proj_bias[e]
            out.index_add_(0, tokens, y * weights[tokens, e, None])
        return out


class GptOssMLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.router = GptOssTopKRouter(d)
        self.experts = GptOssExperts(d)

    def forward(self, x):
        b, t, h = x.shape
        flat = x.reshape(-1, h)
        scores, idx = self.router(flat)
        return self.experts(flat, idx, scores).view(b, t, h)


class GptOssDecoderLayer(PreNormLayer):
    def __init__(self, d, i):
        super().__init__()
        types = d.get("layer_types") or ["sliding_attention" if j % 2 == 0 else "full_attention"
                                         for j in range(d["num_hidden_layers"])]
        eps = d.get("rms_norm_eps", 1e-5)
        self.input_layernorm = LlamaRMSNorm(d["hidden_size"], eps)
        self.self_attn = GptOssAttention(d, types[i] == "sliding_attention")
        self.post_attention_layernorm = LlamaRMSNorm(d["hidden_size"], eps)
        self.mlp = GptOssMLP(d)


class GptOssModel(PreNormModel):
    def __init__(self, d):
        super().__init__()
        self.d = d
        self.embed_tokens = nn.Embedding(d["vocab_size"], d["hidden_size"])
        self.layers = nn.ModuleList([GptOssDecoderLayer(d, i) for i in range(d["num_hidden_layers"])])
        self.norm = LlamaRMSNorm(d["hidden_size"], d.get("rms_norm_eps", 1e-5))

    def tables(self, t):
        d = dict(self.d, rope_theta=self.d.get("rope_theta", 150000))
        return (z[None] for z in rope_tables(d, d.get("head_dim", 64), t))


class GptOssForCausalLM(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.model = GptOssModel(d)
        self.lm_head = nn.Linear(d["hidden_size"], d["vocab_size"], bias=False)

    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids))


def deepseek_rope(x, cos, sin):
    """DeepSeek's published apply_rotary_pos_emb (modeling_deepseek.py): the interleaved pairs
    of x [b, h, t, d] gathered into halves, then rotate-half with cos/sin [t, d]."""
    b, h, t, d = x.shape
    x = x.view(b, h, t, d // 2, 2).transpose(4, 3).reshape(b, h, t, d)
    return x * cos + rotate_half(x) * sin


class DeepseekV2Attention(nn.Module):
    """DeepseekV2Attention: multi-head latent attention, expanded (every key and value from the
    latent through kv_b_proj), the scores scaled by (qk_nope + qk_rope)^-0.5 times yarn's
    mscale(factor, mscale_all_dim)^2."""

    def __init__(self, d):
        super().__init__()
        h, self.H = d["hidden_size"], d["num_attention_heads"]
        self.dn, self.dr, self.dv, self.L = d["qk_nope_head_dim"], d["qk_rope_head_dim"], d["v_head_dim"], \
            d["kv_lora_rank"]
        eps, bias = d.get("rms_norm_eps", 1e-6), d.get("attention_bias", False)
        qd = self.H * (self.dn + self.dr)
        if d.get("q_lora_rank") is None:
            self.q_proj = nn.Linear(h, qd, bias=False)
        else:
            self.q_a_proj = nn.Linear(h, d["q_lora_rank"], bias=bias)
            self.q_a_layernorm = LlamaRMSNorm(d["q_lora_rank"], eps)
            self.q_b_proj = nn.Linear(d["q_lora_rank"], qd, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, self.L + self.dr, bias=bias)
        self.kv_a_layernorm = LlamaRMSNorm(self.L, eps)
        self.kv_b_proj = nn.Linear(self.L, self.H * (self.dn + self.dv), bias=False)
        self.o_proj = nn.Linear(self.H * self.dv, h, bias=bias)
        self.scale = (self.dn + self.dr) ** -0.5
        rs = d.get("rope_scaling")
        if rs and rs.get("mscale_all_dim"):
            f = rs["factor"]
            m = 0.1 * rs["mscale_all_dim"] * math.log(f) + 1.0 if f > 1 else 1.0
            self.scale = self.scale * m * m

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x) if hasattr(self, "q_proj") else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(b, t, self.H, self.dn + self.dr).transpose(1, 2)
        q_nope, q_pe = torch.split(q, [self.dn, self.dr], dim=-1)
        c, k_pe = torch.split(self.kv_a_proj_with_mqa(x), [self.L, self.dr], dim=-1)
        k_pe = k_pe.view(b, t, 1, self.dr).transpose(1, 2)
        kv = self.kv_b_proj(self.kv_a_layernorm(c)).view(b, t, self.H, self.dn + self.dv).transpose(1, 2)
        k_nope, v = torch.split(kv, [self.dn, self.dv], dim=-1)
        q_pe, k_pe = deepseek_rope(q_pe, cos, sin), deepseek_rope(k_pe, cos, sin)
        q = torch.cat((q_nope, q_pe), dim=-1)
        k = torch.cat((k_nope, k_pe.expand(b, self.H, t, self.dr)), dim=-1)
        s = q @ k.transpose(2, 3) * self.scale
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        p = nn.functional.softmax(s, dim=-1, dtype=torch.float32)
        return self.o_proj((p @ v).transpose(1, 2).reshape(b, t, self.H * self.dv))


class DeepseekV2MoE(nn.Module):
    """DeepseekV2MoE as DeepSeek published it: MoEGate's softmax scores, greedy or
    group_limited_greedy top-k, the gates renormalised (norm_topk_prob and top_k > 1) or scaled
    by routed_scaling_factor; the routed experts and the shared ones, summed. DeepseekV3MoE
    (model_type deepseek_v3) differs in the gate (noaux_tc): sigmoid scores plus
    e_score_correction_bias choose, the groups ranked by their best two, the others' scores
    masked to 0; the gates the sigmoids, renormalised, then scaled."""

    def __init__(self, d):
        super().__init__()
        h, f = d["hidden_size"], d["moe_intermediate_size"]
        self.top_k, self.e = d["num_experts_per_tok"], d["n_routed_experts"]
        self.method, self.n_group, self.topk_group = d.get("topk_method", "greedy"), d.get("n_group", 1), \
            d.get("topk_group", 1)
        self.norm, self.scaling = d.get("norm_topk_prob", False), d.get("routed_scaling_factor", 1.0)
        self.v3 = d["model_type"] == "deepseek_v3"
        self.gate = nn.Linear(h, self.e, bias=False)
        if self.v3:
            self.gate.e_score_correction_bias = nn.Parameter(torch.zeros(self.e))
        self.experts = nn.ModuleList([Qwen3MoeMLP(h, f) for _ in range(self.e)])
        shared = d.get("n_shared_experts") or 0
        if shared:
            self.shared_experts = Qwen3MoeMLP(h, f * shared)

    def forward(self, x):
        b, t, h = x.shape
        flat = x.reshape(-1, h)
        if self.v3:
            scores = self.gate(flat).sigmoid()
            choice = scores + self.gate.e_score_correction_bias[None]
            n = flat.shape[0]
            group_scores = choice.view(n, self.n_group, -1).topk(2, dim=-1)[0].sum(dim=-1)
            group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
            score_mask = group_mask.unsqueeze(-1).expand(n, self.n_group, self.e // self.n_group).reshape(n, -1)
            idx = torch.topk(choice.masked_fill(~score_mask.bool(), 0.0), k=self.top_k, dim=-1, sorted=False)[1]
            weight = scores.gather(1, idx)
            if self.top_k > 1 and self.norm:
                weight = weight / (weight.sum(dim=-1, keepdim=True) + 1e-20)
            return self.experts_sum(flat, idx, weight * self.scaling).view(b, t, h)
        scores = self.gate(flat).softmax(dim=-1, dtype=torch.float32)
        if self.method == "group_limited_greedy":
            n = flat.shape[0]
            group_scores = scores.view(n, self.n_group, -1).max(dim=-1).values
            group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
            score_mask = group_mask.unsqueeze(-1).expand(n, self.n_group, self.e // self.n_group).reshape(n, -1)
            scores = scores.masked_fill(~score_mask.bool(), 0.0)
        weight, idx = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
        if self.top_k > 1 and self.norm:
            weight = weight / (weight.sum(dim=-1, keepdim=True) + 1e-20)
        else:
            weight = weight * self.scaling
        return self.experts_sum(flat, idx, weight).view(b, t, h)

    def experts_sum(self, flat, idx, weight):
        out = torch.zeros_like(flat)
        for e in range(self.e):
            rows, slot = (idx == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, self.experts[e](flat[rows]) * weight[rows, slot, None])
        if hasattr(self, "shared_experts"):
            out = out + self.shared_experts(flat)
        return out


class DeepseekV2DecoderLayer(PreNormLayer):
    def __init__(self, d, i):
        super().__init__()
        eps = d.get("rms_norm_eps", 1e-6)
        self.input_layernorm = LlamaRMSNorm(d["hidden_size"], eps)
        self.self_attn = DeepseekV2Attention(d)
        self.post_attention_layernorm = LlamaRMSNorm(d["hidden_size"], eps)
        sparse = d.get("n_routed_experts") is not None and i >= d.get("first_k_dense_replace", 0) and \
            i % d.get("moe_layer_freq", 1) == 0
        self.mlp = DeepseekV2MoE(d) if sparse else Qwen3MoeMLP(d["hidden_size"], d["intermediate_size"])


class DeepseekV2Model(PreNormModel):
    def __init__(self, d):
        super().__init__()
        self.d = d
        self.embed_tokens = nn.Embedding(d["vocab_size"], d["hidden_size"])
        self.layers = nn.ModuleList([DeepseekV2DecoderLayer(d, i) for i in range(d["num_hidden_layers"])])
        self.norm = LlamaRMSNorm(d["hidden_size"], d.get("rms_norm_eps", 1e-6))

    def tables(self, t):
        return rope_tables(self.d, self.d["qk_rope_head_dim"], t)


class DeepseekV2ForCausalLM(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.model = DeepseekV2Model(d)
        self.lm_head = nn.Linear(d["hidden_size"], d["vocab_size"], bias=False)
        if d.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids))


def from_config(path):
    """The model of a config.json (a file, or the folder holding it), random weights:
    GPTNeoXForCausalLM for gpt_neox, GPT2LMHeadModel for gpt2, GemmaForCausalLM for gemma, gemma2 and gemma3_text,
    LlamaForCausalLM (and its variants) otherwise."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path) as f:
        d = json.load(f)
    if d.get("model_type") == "gpt_neox":
        return GPTNeoXForCausalLM(d)
    if d.get("model_type") == "gpt2":
        return GPT2LMHeadModel(d)
    if d.get("model_type") == "gpt_oss":
        return GptOssForCausalLM(d)
    if d.get("model_type") in ("deepseek_v2", "deepseek_v3"):
        return DeepseekV2ForCausalLM(d)
    if d.get("model_type") in ("gemma", "gemma2", "gemma3_text"):
        return GemmaForCausalLM(d)
    return LlamaForCausalLM(Config(d))


def tiny_llama():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-llama"))


def tiny_qwen2():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-qwen2"))


def tiny_qwen3():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-qwen3"))


def tiny_olmo2():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-olmo2"))


def tiny_phi3():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-phi3"))


def tiny_gpt_neox():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-gpt_neox"))


def tiny_gpt_neox_serial():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-gpt_neox-serial"))


def tiny_qwen3_moe():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-qwen3_moe"))


def tiny_gpt2():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-gpt2"))


def tiny_gemma():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-gemma"))


def tiny_gemma2():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-gemma2"))


def tiny_gemma3():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-gemma3"))


def tiny_qwen2_moe():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-qwen2_moe"))


def tiny_olmoe():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-olmoe"))


def tiny_smollm3():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-smollm3"))


def tiny_phi3_longrope():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-phi3-longrope"))


def tiny_qwen3_yarn():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-qwen3-yarn"))


def tiny_gpt_oss():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-gpt_oss"))


def tiny_deepseek_v2():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-deepseek_v2"))


def tiny_deepseek_v2_lora():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-deepseek_v2-lora"))


def tiny_deepseek_v3():
    return from_config(os.path.join(HERE, "..", "tests", "data", "hf", "tiny-deepseek_v3"))
