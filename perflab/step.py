"""Your own step: what perflab hands the factory that ``step=mypkg.steps.make_step`` names.

perflab calls the factory once per trial, after building the model and applying every
knob, with a :class:`StepContext`; the factory returns ``step(batch) -> output``, which
perflab times once per step, after fetching the batch (phase ``data``) and moving it to
the device (``h2d``)::

    from perflab import StepContext

    def make_step(ctx: StepContext):
        optimizer = ctx.optimizer

        def step(batch):
            x, y = batch
            with ctx.autocast():
                out = ctx.forward(x)
                loss = ctx.loss_fn(out, y)
            ctx.mark("forward")
            loss.backward()
            ctx.mark("backward")
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            ctx.mark("optimizer")
            return out

        return step

The contract (docs/configuration.md, "Your own step"): the step returns its output, which
the numerics check compares between variants on the probe batch; ``ctx.mark(name)`` ends
a phase, and every call marks the same phases in the same order; the time after the last
mark is the phase ``rest`` (``step`` when the step marks nothing). Importing this module
imports no torch: the types below are annotations.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from perflab.config.schema import PerflabConfig


@dataclass
class StepContext:
    """What your step's factory receives: the variant's model with every knob applied,
    and perflab's pieces of a step, to use or to leave."""

    # the model on the device, after fused kernels and channels_last, in train or eval mode
    model: torch.nn.Module
    # the model as a step calls it: torch.compile'd when compile is on, else the model;
    # call this one for compile to take effect inside your step
    runner: Callable[..., Any]
    device: torch.device
    # perflab's optimizer (optimizer=, lr=) over the model's parameters in mode=train,
    # None in mode=infer; build your own instead if you like
    optimizer: torch.optim.Optimizer | None
    # perflab's loss (model.loss, model.output, model.target): loss_fn(output, target)
    loss_fn: Callable[[Any, Any], torch.Tensor]
    # a GradScaler with amp=fp16 in mode=train (fp16 gradients underflow without one),
    # else None
    scaler: Any
    # train or infer
    mode: str
    batch_size: int
    seed: int
    # the whole validated config, for anything else
    config: PerflabConfig
    _autocast: Callable[[], contextlib.AbstractContextManager[Any]] = field(repr=False)
    _mark: Callable[[str], None] = field(repr=False)
    _call: Callable[[Callable[..., Any], Any], Any] = field(repr=False)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The variant's autocast (amp=): torch.autocast for the device and dtype, or a
        context that does nothing with amp=off. Wrap your forward and loss in it."""
        return self._autocast()

    def forward(self, inputs: Any) -> Any:
        """``runner(inputs)`` as perflab's step calls it: ``runner(*inputs)`` for a tuple
        or list of inputs, ``runner(**inputs)`` for a dict."""
        return self._call(self.runner, inputs)

    def mark(self, phase: str) -> None:
        """End the phase called ``phase``, which began at your previous mark (or where
        your step began). Names: letters, digits and underscores; a name may repeat
        (micro-batches: their times add up). Every call marks the same phases in the
        same order."""
        self._mark(phase)
