"""A training step of your own and two implementations of one function, for
docs/your-model.md: run perflab from this directory (``cd examples``), where perflab
finds this file as ``my_step``.

    perflab model=custom model._target_=my_model.build model.input.shape=[16,32] \\
        model.target.num_classes=4 step=my_step.accumulate_and_clip device=cpu
    perflab -m model=function model.fn=my_step.attention_ref,my_step.attention_sdpa \\
        model.inputs=my_step.attention_inputs device=cpu preset=quick

``accumulate_and_clip`` is a step perflab's own does not do: four micro-batches per
optimizer step, the gradient clipped, the learning rate scheduled. ``attention_ref`` and
``attention_sdpa`` compute the same attention two ways; the first listed is the baseline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from perflab import StepContext

MICRO_BATCHES = 4


def accumulate_and_clip(ctx: StepContext) -> Callable[[Any], torch.Tensor]:
    """perflab calls this once per build, after every knob; it returns the timed step."""
    optimizer = ctx.optimizer
    assert optimizer is not None, "a training step: run it with mode=train (the default)"
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100, gamma=0.5)
    params = list(ctx.model.parameters())

    def step(batch: Any) -> torch.Tensor:
        x, y = batch  # on the device already
        losses = []
        for xs, ys in zip(x.chunk(MICRO_BATCHES), y.chunk(MICRO_BATCHES), strict=True):
            with ctx.autocast():
                out = ctx.forward(xs)  # compiled when compile is on
                loss = ctx.loss_fn(out, ys) / MICRO_BATCHES
            ctx.mark("forward")  # a phase of the report; repeated marks add up
            loss.backward()
            ctx.mark("backward")
            losses.append(loss.detach())
        torch.nn.utils.clip_grad_norm_(params, max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        ctx.mark("optimizer")
        return torch.stack(losses)  # what the numerics check compares between variants

    return step


def attention_inputs(batch_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The function's inputs, built once per trial with torch seeded: the same for both."""
    return tuple(torch.randn(batch_size, 4, 128, 32) for _ in range(3))  # type: ignore[return-value]


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1) @ v


def attention_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)
