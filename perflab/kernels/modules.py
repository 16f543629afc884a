"""Fused modules and the pass that swaps them into a model in place.

The fused modules hold the very Parameter objects of the layers they replace, under the
same names, so the model's state_dict keeps its keys and values, an optimizer built
afterwards updates them, and loading a snapshot (the numerics probe) reaches them.
"""

from __future__ import annotations

from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import nn

from perflab.kernels import ops


class FusedLinearGELU(nn.Module):
    """Linear followed by exact GELU: the matmul without its bias, then one fused
    bias + GELU kernel (forward and backward)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if linear.bias is None:
            raise ValueError("FusedLinearGELU needs a Linear with a bias")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.bias_gelu(F.linear(x, self.weight), self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class FusedLayerNorm(nn.Module):
    """LayerNorm over the last dimension, with weight and bias, as one Triton kernel."""

    def __init__(self, norm: nn.LayerNorm) -> None:
        super().__init__()
        if not _fusable_norm(norm):
            raise ValueError("FusedLayerNorm needs an affine LayerNorm over one dimension")
        self.normalized_shape = norm.normalized_shape
        self.eps = norm.eps
        self.weight = norm.weight
        self.bias = norm.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.layer_norm(x, self.weight, self.bias, self.eps)[0]

    def extra_repr(self) -> str:
        return f"{tuple(self.normalized_shape)}, eps={self.eps}"


def _fusable_norm(m: nn.Module) -> bool:
    return (
        isinstance(m, nn.LayerNorm)
        and m.elementwise_affine
        and m.bias is not None
        and len(m.normalized_shape) == 1
    )


def _fusable_pair(first: nn.Module, second: nn.Module) -> bool:
    return (
        type(first) is nn.Linear
        and first.bias is not None
        and type(second) is nn.GELU
        and second.approximate == "none"
    )


def fuse_model(model: nn.Module) -> list[str]:
    """Swap perflab's fused modules into ``model`` in place; return what was replaced.

    Rule 1: inside any nn.Sequential, a Linear with a bias immediately followed by an
    exact GELU becomes FusedLinearGELU + Identity ("0+1: Linear+GELU").
    Rule 2: any affine LayerNorm over one dimension becomes FusedLayerNorm
    ("blocks.0.ln1: LayerNorm"). Indices stay put, so state_dict keys do not change.
    The list follows the model's module order.
    """
    modules = list(model.named_modules())
    order = {name: i for i, (name, _) in enumerate(modules)}
    replaced: list[tuple[str, str]] = []  # (first replaced module, description)
    for prefix, parent in modules:
        dotted = f"{prefix}." if prefix else ""
        children = list(parent.named_children())
        if isinstance(parent, nn.Sequential):
            for (name, first), (next_name, second) in pairwise(children):
                if _fusable_pair(first, second):
                    assert isinstance(first, nn.Linear)
                    setattr(parent, name, FusedLinearGELU(first))
                    setattr(parent, next_name, nn.Identity())
                    replaced.append((dotted + name, f"{dotted}{name}+{next_name}: Linear+GELU"))
        for name, child in children:
            if _fusable_norm(child):
                assert isinstance(child, nn.LayerNorm)
                setattr(parent, name, FusedLayerNorm(child))
                replaced.append((dotted + name, f"{dotted}{name}: LayerNorm"))
    return [text for name, text in sorted(replaced, key=lambda r: order[r[0]])]
