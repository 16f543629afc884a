"""model=function: one function, not a model, timed with all of perflab's machinery.

``model.fn`` names the function; perflab wraps it in a module whose forward calls it on
the batch's inputs with ``model.args`` as keyword arguments, so isolation, interleaved
rounds, verdicts, profiles and the numerics check (on the function's output) apply as
they do to a model. ``model.inputs`` names ``make_inputs(batch_size)``, which builds the
function's inputs once (torch seeded with ``seed``, so every variant gets the same ones);
they stay on the device for the whole trial. Sweeping ``model.fn`` compares two
implementations on the same inputs (docs/configuration.md, "Two implementations of one
function").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from perflab.errors import ConfigError


def _scaled(value: Any, scale: torch.Tensor) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value * scale.to(value.dtype)
    return value


class Function(nn.Module):
    """``fn`` as a module. In train mode (``mode=train``) each floating input is
    multiplied by ``scale``, a parameter that stays at exactly 1 on the probe batch
    (x * 1.0 is x, bit for bit), so that the gradient of the loss flows back through
    ``fn`` to its inputs and the optimizer has a parameter to update: the step then
    times the function's forward and backward. In infer mode the inputs go to ``fn``
    untouched."""

    def __init__(self, fn: Callable[..., Any], name: str, kwargs: dict[str, Any]) -> None:
        super().__init__()
        self.fn, self.name, self.kwargs = fn, name, kwargs
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.training:
            args = tuple(_scaled(a, self.scale) for a in args)
            kwargs = {k: _scaled(v, self.scale) for k, v in kwargs.items()}
        return self.fn(*args, **kwargs, **self.kwargs)

    def extra_repr(self) -> str:
        return self.name


def build(fn: str, inputs: str | None = None, **kwargs: Any) -> nn.Module:
    """The module around ``fn`` (``inputs`` is read by build_workload, not here)."""
    from perflab.workloads import locate

    function = locate(fn)
    if not callable(function):
        raise ConfigError(
            "model.fn", fn, "a dotted path to a function", f"names a {type(function).__name__}"
        )
    return Function(function, fn, kwargs)


INPUTS_ALLOWED = (
    "make_inputs(batch_size) returning the function's inputs: a tensor, a tuple or list "
    "of positional arguments, or a dict of keyword arguments"
)


def make_inputs(path: str, batch_size: int, seed: int) -> Any:
    """Call the user's make_inputs with torch seeded: the same inputs in every variant
    and every call."""
    from perflab.workloads import locate

    torch.manual_seed(seed)
    inputs = locate(path)(batch_size)
    if not isinstance(inputs, (torch.Tensor, tuple, list, dict)):
        raise ConfigError(
            "model.inputs", path, INPUTS_ALLOWED, f"it returned a {type(inputs).__name__}"
        )
    return inputs
