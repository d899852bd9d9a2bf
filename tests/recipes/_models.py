"""Small real models built from torch.nn, shared by the recipe tests."""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock, rebuilt: conv-bn-relu-conv-bn plus a (projected) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class TinyResNet(nn.Module):
    """A torchvision-style ResNet (stem, two stages, pooling, classifier), a few thousand weights."""

    def __init__(self, classes: int = 10, width: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(BasicBlock(width, width))
        self.layer2 = nn.Sequential(BasicBlock(width, 2 * width, stride=2))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# Every parameter of TinyResNet that must be decayed: conv kernels and the classifier's weight.
RESNET_DECAYED = {
    "conv1.weight",
    "layer1.0.conv1.weight",
    "layer1.0.conv2.weight",
    "layer2.0.conv1.weight",
    "layer2.0.conv2.weight",
    "layer2.0.downsample.0.weight",
    "fc.weight",
}


class TransformerBlock(nn.Module):
    """A pre-norm ViT-style encoder: embedding, cls token, positional embedding, one block."""

    def __init__(self, vocab: int = 50, dim: int = 16, heads: int = 2, length: int = 6) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, length + 1, dim) * 0.02)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, 2)

    def no_weight_decay(self) -> set[str]:
        return {"cls_token", "pos_embed"}

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.mlp(self.norm2(x))
        return self.head(x[:, 0])


TRANSFORMER_DECAYED = {
    "embed.weight",
    "attn.in_proj_weight",
    "attn.out_proj.weight",
    "mlp.0.weight",
    "mlp.2.weight",
    "head.weight",
}


class MyNorm(nn.LayerNorm):
    """A user's norm layer: a LayerNorm subclass over (channels, length), so its weight has rank 2."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 1.0


class CustomNormNet(nn.Module):
    """Norm layers whose parameters have rank 2: only their *type* says they must not be decayed."""

    def __init__(self, channels: int = 4, length: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, 3, padding=1)
        self.my_norm = MyNorm([channels, length])
        self.rms = nn.RMSNorm([channels, length])
        self.group = nn.GroupNorm(2, channels)
        self.inorm = nn.InstanceNorm1d(channels, affine=True)
        self.proj = nn.Linear(length, length, bias=False)
        self.scale = nn.Parameter(torch.ones(()))  # rank 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.rms(self.my_norm(self.conv(x)))
        return self.proj(self.inorm(self.group(x))) * self.scale


CUSTOM_DECAYED = {"conv.weight", "proj.weight"}
