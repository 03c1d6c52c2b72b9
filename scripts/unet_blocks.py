"""The blocks of a Stable-Diffusion-style UNet (v1.x: the latent's 64 x 64 map, 320
channels, a 1280-wide timestep embedding, text states of 77 tokens x 768), written in
plain PyTorch from the published architecture (Rombach et al. 2022; the LDM code's
openaimodel.py ResBlock, Downsample, Upsample and attention.py SpatialTransformer,
BasicTransformerBlock, CrossAttention and GEGLU). No weights are downloaded: the modules
are built with torch's default initialisation, which is all a timing needs.

Each callable below returns one block; its forward takes the map, then the timestep
embedding and/or the text states, as the UNet passes them:

  resblock              ResBlock(320) at 64 x 64:              x, emb
  spatial_transformer   SpatialTransformer(320, 8 heads of 40): x, context
  down_block            SD's first down level: (ResBlock, SpatialTransformer) x 2, then
                        Downsample to 32 x 32:                    x, emb, context
  up_block              SD's second up level (32 x 32, 640 channels): (ResBlock on the
                        map concatenated with a skip, SpatialTransformer) x 3, then
                        Upsample to 64 x 64:       x, emb, context, skip0, skip1, skip2

Export one with scripts/torch_export.py, a --input per argument, e.g.
  python3 scripts/torch_export.py unet_blocks:resblock --input 320,64,64 --input 1280
(with scripts/ on PYTHONPATH). The small_* callables are the same blocks at test sizes."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ResBlock(nn.Module):
    """GroupNorm(32), SiLU, 3x3 convolution; the timestep embedding through SiLU and a
    linear, added to every pixel; GroupNorm, SiLU, dropout, 3x3 convolution; the skip (a
    1x1 convolution when the channels change)."""

    def __init__(self, channels, emb_channels, out_channels=None, groups=32):
        super().__init__()
        out_channels = out_channels or channels
        self.in_layers = nn.Sequential(nn.GroupNorm(groups, channels), nn.SiLU(),
                                       nn.Conv2d(channels, out_channels, 3, padding=1))
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_channels, out_channels))
        self.out_layers = nn.Sequential(nn.GroupNorm(groups, out_channels), nn.SiLU(), nn.Dropout(0.0),
                                        nn.Conv2d(out_channels, out_channels, 3, padding=1))
        self.skip_connection = nn.Identity() if out_channels == channels else nn.Conv2d(channels, out_channels, 1)

    def forward(self, x, emb):
        h = self.in_layers(x)
        h = h + self.emb_layers(emb)[:, :, None, None]
        h = self.out_layers(h)
        return self.skip_connection(x) + h


class CrossAttention(nn.Module):
    """Multi-head attention with separate q, k, v projections (no biases) and an out
    projection; k and v read the context (cross-attention) or the input itself."""

    def __init__(self, query_dim, heads, dim_head, context_dim=None):
        super().__init__()
        inner = heads * dim_head
        self.heads, self.scale = heads, dim_head ** -0.5
        self.to_q = nn.Linear(query_dim, inner, bias=False)
        self.to_k = nn.Linear(context_dim or query_dim, inner, bias=False)
        self.to_v = nn.Linear(context_dim or query_dim, inner, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner, query_dim), nn.Dropout(0.0))

    def forward(self, x, context=None):
        context = x if context is None else context
        q, k, v = self.to_q(x), self.to_k(context), self.to_v(context)
        b, h = x.shape[0], self.heads
        q, k, v = (t.reshape(b, t.shape[1], h, -1).transpose(1, 2) for t in (q, k, v))
        attn = (q @ k.transpose(-1, -2) * self.scale).softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, x.shape[1], -1)
        return self.to_out(out)


class GEGLU(nn.Module):
    def __init__(self, dim, inner):
        super().__init__()
        self.proj = nn.Linear(dim, inner * 2)

    def forward(self, x):
        x, gate = self.proj(x).chunk(2, dim=-1)
        return x * F.gelu(gate)


class FeedForward(nn.Module):
    def __init__(self, dim, mult=4):
        super().__init__()
        self.net = nn.Sequential(GEGLU(dim, dim * mult), nn.Dropout(0.0), nn.Linear(dim * mult, dim))

    def forward(self, x):
        return self.net(x)


class BasicTransformerBlock(nn.Module):
    """Self-attention, cross-attention to the context, GEGLU feed-forward; each pre-norm
    (LayerNorm) with a residual."""

    def __init__(self, dim, heads, dim_head, context_dim):
        super().__init__()
        self.attn1 = CrossAttention(dim, heads, dim_head)
        self.ff = FeedForward(dim)
        self.attn2 = CrossAttention(dim, heads, dim_head, context_dim)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x, context):
        x = self.attn1(self.norm1(x)) + x
        x = self.attn2(self.norm2(x), context) + x
        return self.ff(self.norm3(x)) + x


class SpatialTransformer(nn.Module):
    """GroupNorm(32, eps 1e-6), a 1x1 convolution in, the map as H*W tokens, a transformer
    block, back to a map, a 1x1 convolution out, the residual."""

    def __init__(self, channels, heads, dim_head, context_dim, groups=32):
        super().__init__()
        inner = heads * dim_head
        self.norm = nn.GroupNorm(groups, channels, eps=1e-6)
        self.proj_in = nn.Conv2d(channels, inner, 1)
        self.transformer_blocks = nn.ModuleList([BasicTransformerBlock(inner, heads, dim_head, context_dim)])
        self.proj_out = nn.Conv2d(inner, channels, 1)

    def forward(self, x, context):
        b, _, h, w = x.shape
        y = self.proj_in(self.norm(x))
        c = y.shape[1]
        y = y.flatten(2).transpose(1, 2)
        for block in self.transformer_blocks:
            y = block(y, context)
        y = y.transpose(1, 2).reshape(b, c, h, w)
        return self.proj_out(y) + x


class Downsample(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.op = nn.Conv2d(channels, channels, 3, stride=2, padding=1)

    def forward(self, x):
        return self.op(x)


class Upsample(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2, mode="nearest"))


class DownBlock(nn.Module):
    def __init__(self, channels, emb, heads, dim_head, context, layers=2, groups=32):
        super().__init__()
        self.resnets = nn.ModuleList([ResBlock(channels, emb, groups=groups) for _ in range(layers)])
        self.attentions = nn.ModuleList([SpatialTransformer(channels, heads, dim_head, context, groups)
                                         for _ in range(layers)])
        self.downsample = Downsample(channels)

    def forward(self, x, emb, context):
        for res, attn in zip(self.resnets, self.attentions):
            x = attn(res(x, emb), context)
        return self.downsample(x)


class UpBlock(nn.Module):
    """Each ResBlock reads the map concatenated with a skip from the down path (the last
    skip first, as the UNet pops them)."""

    def __init__(self, channels, prev, skips, emb, heads, dim_head, context, groups=32):
        super().__init__()
        ins = [prev + skips[0]] + [channels + s for s in skips[1:]]
        self.resnets = nn.ModuleList([ResBlock(i, emb, channels, groups=groups) for i in ins])
        self.attentions = nn.ModuleList([SpatialTransformer(channels, heads, dim_head, context, groups)
                                         for _ in ins])
        self.upsample = Upsample(channels)

    def forward(self, x, emb, context, skip0, skip1, skip2):
        for res, attn, skip in zip(self.resnets, self.attentions, (skip0, skip1, skip2)):
            x = attn(res(torch.cat([x, skip], dim=1), emb), context)
        return self.upsample(x)


# Stable Diffusion v1.x at its first (64 x 64) and second (32 x 32) levels
def resblock():
    return ResBlock(320, 1280)


def spatial_transformer():
    return SpatialTransformer(320, 8, 40, 768)


def down_block():
    return DownBlock(320, 1280, 8, 40, 768)


def up_block():
    return UpBlock(640, 1280, [640, 640, 320], 1280, 8, 80, 768)


# the same blocks at test sizes (groups of 4)
def small_resblock():
    return ResBlock(16, 32, groups=4)


def small_down_block():
    return DownBlock(16, 32, 2, 8, 12, groups=4)


def small_up_block():
    return UpBlock(16, 24, [16, 16, 8], 32, 2, 8, 12, groups=4)
