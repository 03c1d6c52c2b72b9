"""Small modules for tests/test_export.sh: the operations the exporter turns into slice
layers (x[:, a:b], torch.split with sizes, x.chunk along the last dim), torch.roll, a small
Swin (V1 and V2) and MaxViT from torchvision's own classes, a module it has no kind for,
a forward of two inputs (the second a model_input layer), a DiT block (adaptive layer
norm, timm's packed attention) and arithmetic with numbers; nanoGPT's GPT as its model.py
writes it (fused c_attn, n_head, the masked softmax torch 1.13 takes, learned positions,
tied embeddings), found by what it computes, and variants the exporter must refuse (a
soft-cap of the scores) or fit (no mask: an encoder); a router's topk (refused by name); a
Llama written with names of its own (its RMSNorm's weight w, its heads h and hd);
nn.MultiheadAttention with the causal mask."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Slices(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(6, 6, 1)

    def forward(self, x):
        x = self.conv(x)
        a = x[:, 1:4]
        b, c = torch.split(x, [2, 4], dim=1)
        d, e = x.chunk(2, dim=-1)
        return torch.cat((a[:, :, :, :4], b[:, :, :, 2:6], c[:, :, :, 4:], d + e), dim=1)


def slices():
    return Slices()


class TwoInputs(nn.Module):
    """A UNet ResBlock's shape of call: the feature map and a timestep embedding, projected
    and added to every pixel."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)
        self.temb_proj = nn.Linear(5, 3)

    def forward(self, x, temb):
        return self.conv(x) + self.temb_proj(temb)[:, :, None, None]


def two_inputs():
    return TwoInputs()


def tiny_swin(v2=False):
    """torchvision's own SwinTransformer, small: two stages of two blocks (the second
    block of each shifted), 4 x 4 windows; on a 40 x 36 input the maps are 10 x 9 (padded
    to whole windows; PatchMerging pads the odd width) and 5 x 5."""
    from torchvision.models import swin_transformer as st
    extra = {"block": st.SwinTransformerBlockV2, "downsample_layer": st.PatchMergingV2} if v2 else {}
    return st.SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                              stochastic_depth_prob=0.1, num_classes=10, **extra)


def tiny_swin_v2():
    return tiny_swin(v2=True)


class Roll(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        return torch.roll(self.conv(x), shifts=(1, -2), dims=(2, 3))


def roll():
    return Roll()


def tiny_maxvit():
    """torchvision's own MaxVit, small: on a 64 x 64 input two blocks of one layer each
    (MBConv, window attention, grid attention), 4 x 4 partitions."""
    from torchvision.models.maxvit import MaxVit
    return MaxVit(input_size=(64, 64), stem_channels=16, partition_size=4, block_channels=[16, 32],
                  block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.1, num_classes=10)


class Unsupported(nn.Module):
    """A module layerbench has no kind for (nn.PixelShuffle) between supported layers."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 12, 1)
        self.shuffle = nn.PixelShuffle(2)
        self.conv2 = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        return self.conv2(torch.relu(self.shuffle(self.conv(x))))


def unsupported():
    return Unsupported()


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class Attention(nn.Module):
    """timm's Attention, unfused: one qkv linear, the heads, proj."""

    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class DiTBlock(nn.Module):
    """A DiT block (Peebles and Xie 2023): adaptive layer norm, its shift, scale and gate
    from the conditioning vector c (adaLN_modulation, chunked in six)."""

    def __init__(self, hidden=32, heads=4):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden, heads)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(approximate="tanh"), nn.Linear(4 * hidden, hidden))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))

    def forward(self, x, c):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + gate_msa.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift_msa, scale_msa))
        return x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))


def dit_block():
    return DiTBlock()


class Scalars(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        y = self.conv(x)
        return (1 - y) * 0.5 + y / 8 - 2


def scalars():
    return Scalars()


class NanoAttention(nn.Module):
    """nanoGPT's CausalSelfAttention (the path without flash attention); cap soft-caps the
    scores (Gemma 2's form, which no attention layer of layerbench's computes), mask False
    drops the causal mask."""

    def __init__(self, n_embd, n_head, block_size, cap=None, mask=True):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout, self.resid_dropout = nn.Dropout(0.0), nn.Dropout(0.0)
        self.n_head, self.n_embd, self.cap, self.mask = n_head, n_embd, cap, mask
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if self.cap:
            att = torch.tanh(att / self.cap) * self.cap
        if self.mask:
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class NanoBlock(nn.Module):
    def __init__(self, n_embd, n_head, block_size, **kw):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = NanoAttention(n_embd, n_head, block_size, **kw)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(n_embd, 4 * n_embd), gelu=nn.GELU(),
                                      c_proj=nn.Linear(4 * n_embd, n_embd)))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        m = self.mlp
        return x + m.c_proj(m.gelu(m.c_fc(self.ln_2(x))))


class NanoGPT(nn.Module):
    def __init__(self, vocab=97, block_size=16, n_layer=2, n_head=4, n_embd=32, **kw):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, n_embd), wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([NanoBlock(n_embd, n_head, block_size, **kw) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT does

    def forward(self, idx):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def nanogpt():
    torch.manual_seed(0)
    return NanoGPT()


def nanogpt_softcap():
    torch.manual_seed(0)
    return NanoGPT(cap=30.0)


def nanogpt_encoder():
    torch.manual_seed(0)
    return NanoGPT(n_head=2, mask=False)


class RouterTopk(nn.Module):
    """A router's top-k written out (a mixture of experts' first step): refused, naming topk."""

    def __init__(self):
        super().__init__()
        self.gate, self.proj = nn.Linear(16, 4, bias=False), nn.Linear(16, 16)

    def forward(self, x):
        w, sel = torch.topk(self.gate(x).softmax(-1), 2)
        return self.proj(x) * w.sum(-1, keepdim=True)


def router_topk():
    return RouterTopk()


class Norm(nn.Module):
    """RMSNorm with its weight kept as w (what it computes is what the exporter follows)."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.w, self.eps = nn.Parameter(torch.rand(d) + 0.5), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w


class RotaryEmbedding(nn.Module):
    def __init__(self, hd, theta=10000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd))

    def forward(self, t):
        f = torch.arange(t).float()[:, None] * self.inv_freq[None]
        e = torch.cat((f, f), -1)
        return e.cos(), e.sin()


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]), -1)


class OwnAttention(nn.Module):
    """Llama's attention with its heads kept as h, kvh and hd (no num_heads to read)."""

    def __init__(self, d, h, kvh):
        super().__init__()
        self.h, self.kvh, self.hd = h, kvh, d // h
        self.q_proj, self.k_proj = nn.Linear(d, d, bias=False), nn.Linear(d, kvh * self.hd, bias=False)
        self.v_proj, self.o_proj = nn.Linear(d, kvh * self.hd, bias=False), nn.Linear(d, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kvh, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kvh, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = (z.repeat_interleave(self.h // self.kvh, dim=1) for z in (k, v))
        s = (q @ k.transpose(2, 3)) / math.sqrt(self.hd)
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        return self.o_proj((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1))


class OwnLlama(nn.Module):
    """A Llama block written with its own names: the RMSNorm's weight w, the heads as h
    and hd, a rotary embedding of its own; its MLP SwiGLU."""

    def __init__(self, vocab=61, d=32, h=4, kvh=2, f=48):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.rotary = nn.Embedding(vocab, d), RotaryEmbedding(d // h, 500.0)
        self.norm1, self.attn, self.norm2 = Norm(d), OwnAttention(d, h, kvh), Norm(d)
        self.gate, self.up, self.down = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False), nn.Linear(f, d, bias=False)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        cos, sin = self.rotary(ids.shape[1])
        x = x + self.attn(self.norm1(x), cos, sin)
        y = self.norm2(x)
        x = x + self.down(F.silu(self.gate(y)) * self.up(y))
        return self.head(x)


def own_llama():
    return OwnLlama()


class CausalMHA(nn.Module):
    """A decoder block on nn.MultiheadAttention with the causal mask nn.Transformer makes."""

    def __init__(self, e=24, h=3):
        super().__init__()
        torch.manual_seed(0)
        self.norm = nn.LayerNorm(e)
        self.attn = nn.MultiheadAttention(e, h, batch_first=True)
        self.proj = nn.Linear(e, e)

    def forward(self, x):
        t = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        y = self.norm(x)
        y, _ = self.attn(y, y, y, attn_mask=mask, need_weights=False)
        return self.proj(x + y)


def causal_mha():
    return CausalMHA()


def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    freqs = torch.outer(torch.arange(end).float(), freqs)
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(bs, slen, n_kv_heads * n_rep, head_dim)


class MetaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self._norm(x.float()).type_as(x) * self.weight


class MetaAttention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads):
        super().__init__()
        self.n_kv_heads, self.n_local_heads, self.n_local_kv_heads = n_kv_heads, n_heads, n_kv_heads
        self.n_rep, self.head_dim = n_heads // n_kv_heads, dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, start_pos, freqs_cis, mask):
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        keys, values = repeat_kv(xk, self.n_rep), repeat_kv(xv, self.n_rep)
        xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class MetaFeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MetaBlock(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, hidden_dim):
        super().__init__()
        self.attention = MetaAttention(dim, n_heads, n_kv_heads)
        self.feed_forward = MetaFeedForward(dim, hidden_dim)
        self.attention_norm, self.ffn_norm = MetaRMSNorm(dim), MetaRMSNorm(dim)

    def forward(self, x, start_pos, freqs_cis, mask):
        h = x + self.attention(self.attention_norm(x), start_pos, freqs_cis, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class MetaLlama(nn.Module):
    """Meta's reference model.py for Llama (llama3's), as torchtitan trains it (no inference
    KV cache): wq/wk/wv/wo, n_heads and n_kv_heads, repeat_kv, rope on complex pairs
    (view_as_complex with freqs_cis from torch.polar, passed down), the mask added to the
    scores."""

    def __init__(self, vocab=53, dim=48, n_layers=2, n_heads=6, n_kv_heads=2, hidden_dim=80, theta=500000.0):
        super().__init__()
        torch.manual_seed(0)
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(MetaBlock(dim, n_heads, n_kv_heads, hidden_dim) for _ in range(n_layers))
        self.norm = MetaRMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        self.freqs_cis = precompute_freqs_cis(dim // n_heads, 64, theta)

    def forward(self, tokens, start_pos=0):
        _, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        freqs_cis = self.freqs_cis[start_pos: start_pos + seqlen]
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"))
            mask = torch.triu(mask, diagonal=1)
            mask = torch.hstack([torch.zeros((seqlen, start_pos)), mask]).type_as(h)
        for layer in self.layers:
            h = layer(h, start_pos, freqs_cis, mask)
        return self.output(self.norm(h)).float()


def meta_llama():
    return MetaLlama()


class MixtralExpert(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.w1, self.w2, self.w3 = nn.Linear(d, f, bias=False), nn.Linear(f, d, bias=False), nn.Linear(d, f, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MixtralMoE(nn.Module):
    """Mixtral's sparse MoE block as a loop over experts: softmax, topk, renormalised gates,
    one_hot masks, torch.where, index_add_ into zeros."""

    def __init__(self, d, f, experts, top_k, normalize=True, shared=False):
        super().__init__()
        self.top_k, self.num_experts, self.normalize = top_k, experts, normalize
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(MixtralExpert(d, f) for _ in range(experts))
        self.shared_expert = MixtralExpert(d, f) if shared else None

    def forward(self, hidden_states):
        b, t, d = hidden_states.shape
        hidden_states = hidden_states.view(-1, d)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        if self.normalize:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final = torch.zeros((b * t, d), dtype=hidden_states.dtype)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        for i in range(self.num_experts):
            idx, top_x = torch.where(expert_mask[i])
            current = hidden_states[None, top_x].reshape(-1, d)
            out = self.experts[i](current) * routing_weights[top_x, idx, None]
            final.index_add_(0, top_x, out.to(hidden_states.dtype))
        if self.shared_expert is not None:  # Qwen2-MoE's and DeepSeek's: every token
            final = final + self.shared_expert(hidden_states)
        return final.reshape(b, t, d)


class MixtralBlockMoE(nn.Module):
    def __init__(self, vocab=41, d=32, f=24, experts=5, top_k=2, **kw):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab, d)
        self.norm = MetaRMSNorm(d)
        self.block_sparse_moe = MixtralMoE(d, f, experts, top_k, **kw)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        x = x + self.block_sparse_moe(self.norm(x))
        return self.head(x)


def mixtral_moe():
    return MixtralBlockMoE()


def moe_top3_softmax():
    """Qwen-MoE's norm_topk_prob false: the top 3 of 7 experts at their softmax probabilities."""
    return MixtralBlockMoE(experts=7, top_k=3, normalize=False)


def moe_shared():
    """The loop with a shared expert beside it (Qwen2-MoE's, DeepSeek's): refused by name."""
    return MixtralBlockMoE(shared=True)


class CrossDecoder(nn.Module):
    """nn.TransformerDecoderLayer (batch first): causal self-attention, then cross-attention
    to an encoder's memory, both through nn.MultiheadAttention."""

    def __init__(self, e=24, h=4, f=40):
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.TransformerDecoderLayer(e, h, f, dropout=0.0, batch_first=True)

    def forward(self, x, memory):
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.layer(x, memory, tgt_mask=mask)


def cross_decoder():
    return CrossDecoder().eval()
