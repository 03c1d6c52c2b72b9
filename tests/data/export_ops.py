"""Small modules for tests/test_export.sh: the operations the exporter turns into slice
layers (x[:, a:b], torch.split with sizes, x.chunk along the last dim), and a forward of
two inputs, which it refuses in one line."""
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
    """A UNet ResBlock's shape of call: the feature map and a timestep embedding."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x, temb):
        return self.conv(x) + temb


def two_inputs():
    return TwoInputs()
