"""Built-in models. Each factory takes the model config's fields as keyword arguments.

A user's own model plugs in the same way: any ``module.function`` that takes keyword
arguments and returns a ``torch.nn.Module`` (see docs/configuration.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def mlp(in_features: int, hidden: int, depth: int, num_classes: int) -> nn.Module:
    layers: list[nn.Module] = []
    width = in_features
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.GELU()]
        width = hidden
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


class _ResidualBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


def convnet(width: int, stages: int, blocks: int, image_size: int, num_classes: int) -> nn.Module:
    """ResNet-style: a stem, then stages of residual blocks, global pooling, a classifier."""
    del image_size  # the network is size-agnostic; the config uses it for the input shape
    layers: list[nn.Module] = [
        nn.Conv2d(3, width, 3, padding=1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
    ]
    channels = width
    for stage in range(stages):
        out_ch = width * 2**stage
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            layers.append(_ResidualBlock(channels, out_ch, stride))
            channels = out_ch
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes)]
    return nn.Sequential(*layers)


class _Block(nn.Module):
    """Pre-LayerNorm decoder block: causal self-attention (SDPA) and a GELU MLP."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        # a Sequential of Linear, GELU, Linear, so fused=triton's Linear+GELU rule applies
        self.ffn = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d_model, dim=2)
        q, k, v = (t.view(batch, seq, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(batch, seq, d_model))
        return x + self.ffn(self.ln2(x))


class _GPT(nn.Module):
    def __init__(self, vocab_size: int, seq_len: int, d_model: int, heads: int, layers: int):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, d_model))
        self.blocks = nn.Sequential(*[_Block(d_model, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos[:, : tokens.shape[1]]
        return self.head(self.ln(self.blocks(x)))


def transformer(vocab_size: int, seq_len: int, d_model: int, heads: int, layers: int) -> nn.Module:
    return _GPT(vocab_size, seq_len, d_model, heads, layers)
