"""Small modules for tests/test_export.sh: the operations the exporter turns into slice
layers (x[:, a:b], torch.split with sizes, x.chunk along the last dim), torch.roll, a small
Swin (V1 and V2) and MaxViT from torchvision's own classes, a module it has no kind for,
a forward of two inputs (the second a model_input layer), a DiT block (adaptive layer
norm, timm's packed attention) and arithmetic with numbers."""
import torch
import torch.nn as nn


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
