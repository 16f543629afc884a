"""Models whose outputs are not one tensor, for tests/test_outputs.py: a tuple, a dict, an
object with fields, one that computes its own loss, and a loss function of a user's own.

    perflab model=custom model._target_=tests.shaped_outputs.build model.input.shape=[5] \\
        model.target.num_classes=3 +model.args.shape=dict device=cpu

Trial processes import this file as ``tests.shaped_outputs`` (an editable install puts
the repository root on sys.path), as they do tests/faulty.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Output:
    """Fields as a Hugging Face ModelOutput has them (an object, not a dict)."""

    logits: torch.Tensor
    hidden: torch.Tensor
    loss: torch.Tensor | None = None


class Shaped(nn.Module):
    def __init__(self, shape: str) -> None:
        super().__init__()
        self.shape = shape
        self.lin = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> object:
        logits = self.lin(x)
        hidden = torch.relu(logits)
        if self.shape == "tuple":
            return hidden, logits  # the logits second: model.output=1 picks them
        if self.shape == "dict":
            return {"hidden": hidden, "logits": logits}
        if self.shape == "object":
            return Output(logits, hidden)
        if self.shape == "own_loss":
            return Output(logits, hidden, loss=logits.square().mean())
        if self.shape == "nothing":
            return {"count": 3}
        raise ValueError(f"unknown shape {self.shape!r}")


def build(shape: str = "dict") -> nn.Module:
    return Shaped(shape)


def per_sample_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Not a scalar: one loss per sample (a user who forgot the mean)."""
    return nn.functional.cross_entropy(output, target, reduction="none")


def mean_square(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A loss of a user's own: (output, target) -> scalar."""
    return output.float().square().mean() + 0 * target.float().sum()


def pairs(n: int = 16) -> torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]:
    """A dataset of the user's own: 5 features and a class id per sample, no image."""
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(
        torch.randn(n, 5, generator=g), torch.randint(0, 3, (n,), generator=g)
    )
