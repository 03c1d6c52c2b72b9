"""Decoders whose attention computes more than rope + attention (scripts/hf_decoder.py's
tiny Llama with its attention replaced), for tests/test_export.sh: the exporter must
refuse each, never write a config that leaves the difference out. Gemma 2's logit
soft-cap (tanh(s / cap) * cap) at a cap of 50, which random weights' small scores never
reach, and at 1; Gemma's query_pre_attn_scalar (another scale than 1/sqrt(head_dim));
and, as the control, the same module computing exactly Llama's attention."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import hf_decoder as hd  # noqa: E402


class VariantAttention(hd.LlamaAttention):
    def __init__(self, config, cap=None, scale=None):
        super().__init__(config)
        self.cap, self.query_scale = cap, scale

    def forward(self, hidden_states, position_embeddings, attention_mask):
        b, t, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, t, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, t, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, t, -1, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = hd.apply_rotary_pos_emb(q, k, cos, sin)
        k, v = hd.repeat_kv(k, self.num_key_value_groups), hd.repeat_kv(v, self.num_key_value_groups)
        s = q @ k.transpose(2, 3) * (self.query_scale or self.head_dim ** -0.5)
        if self.cap:
            s = torch.tanh(s / self.cap) * self.cap
        s = (s + attention_mask).softmax(-1)
        return self.o_proj((s @ v).transpose(1, 2).reshape(b, t, -1)), s


def _tiny(cap=None, scale=None):
    m = hd.tiny_llama()
    for layer in m.model.layers:
        new = VariantAttention(layer.self_attn.config, cap, scale)
        new.load_state_dict(layer.self_attn.state_dict())
        layer.self_attn = new
    return m


def plain():
    return _tiny()


def softcap50():
    return _tiny(cap=50.0)


def softcap1():
    return _tiny(cap=1.0)


def query_scale():
    return _tiny(scale=0.2)
