"""Small modules for tests/test_export.sh: the operations the exporter turns into slice
layers (x[:, a:b], torch.split with sizes, x.chunk along the last dim), torch.roll, a small
Swin (V1 and V2) and MaxViT from torchvision's own classes, a module it has no kind for,
and a forward of two inputs (the second a model_input layer)."""
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
