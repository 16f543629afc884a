"""Steps of a user's own (``step=tests.user_steps.NAME``) and functions of one (``model=function
model.fn=tests.user_steps.NAME``), for tests/test_user_step.py and tests/test_function_ab.py:
each of the things issue 26 asks a user's step to express (gradient accumulation, clipping,
a scheduler, two optimizers), and the ways a step can be wrong.

    perflab step=tests.user_steps.accumulate_and_clip device=cpu model=mlp

Trial processes import this file as ``tests.user_steps`` (an editable install puts the
repository root on sys.path). A test that runs its trial in the pytest process reads what
the steps saw in ``SEEN``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from perflab import StepContext

# what the steps saw, by step name: read by tests whose trials run in their own process
SEEN: dict[str, list[Any]] = {}

# micro-batches per optimizer step, and the gradient norm clipped to, in accumulate_and_clip
MICRO_BATCHES = 2
MAX_GRAD_NORM = 1e-3


def _seen(name: str, value: Any) -> None:
    SEEN.setdefault(name, []).append(value)


def plain(ctx: StepContext) -> Callable[[Any], Any]:
    """perflab's own training step, written as a user would: forward and loss under the
    variant's autocast, backward, perflab's optimizer; three phases marked."""
    optimizer = ctx.optimizer
    assert optimizer is not None

    def step(batch: Any) -> Any:
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


def unmarked(ctx: StepContext) -> Callable[[Any], Any]:
    """The same step with no marks: timed whole, as the phase "step"."""
    optimizer = ctx.optimizer
    assert optimizer is not None

    def step(batch: Any) -> Any:
        x, y = batch
        with ctx.autocast():
            out = ctx.forward(x)
            loss = ctx.loss_fn(out, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return out

    return step


def accumulate_and_clip(ctx: StepContext) -> Callable[[Any], Any]:
    """Gradient accumulation over MICRO_BATCHES micro-batches (the batch split; batch_size
    is the effective batch), then clipping to MAX_GRAD_NORM, then one optimizer step.
    Each micro-batch marks its forward and backward (their times add up per step)."""
    optimizer = ctx.optimizer
    assert optimizer is not None
    params = [p for p in ctx.model.parameters() if p.requires_grad]

    def step(batch: Any) -> Any:
        x, y = batch
        outs = []
        for xs, ys in zip(x.chunk(MICRO_BATCHES), y.chunk(MICRO_BATCHES), strict=True):
            with ctx.autocast():
                out = ctx.forward(xs)
                loss = ctx.loss_fn(out, ys) / MICRO_BATCHES
            ctx.mark("forward")
            loss.backward()
            ctx.mark("backward")
            outs.append(out.detach())
        norm = torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        after = torch.sqrt(sum(p.grad.pow(2).sum() for p in params if p.grad is not None))
        _seen("accumulate_and_clip", (float(norm), float(after)))
        ctx.mark("clip")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        ctx.mark("optimizer")
        return torch.cat(outs)

    return step


def scheduled(ctx: StepContext) -> Callable[[Any], Any]:
    """perflab's optimizer under a learning-rate schedule of the user's: the rate halves
    at every step (StepLR, step_size 1, gamma 0.5)."""
    optimizer = ctx.optimizer
    assert optimizer is not None
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)

    def step(batch: Any) -> Any:
        x, y = batch
        out = ctx.forward(x)
        loss = ctx.loss_fn(out, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        _seen("scheduled", optimizer.param_groups[0]["lr"])
        ctx.mark("update")
        return out

    return step


def two_optimizers(ctx: StepContext) -> Callable[[Any], Any]:
    """Two optimizers of the user's own, perflab's left unused: SGD for the first layer's
    parameters, Adam for the rest, each stepped and zeroed in its own phase."""
    params = list(ctx.model.parameters())
    first = torch.optim.SGD(params[:2], lr=0.01)
    rest = torch.optim.Adam(params[2:], lr=1e-3)
    _seen("two_optimizers", (len(params[:2]), len(params[2:])))

    def step(batch: Any) -> Any:
        x, y = batch
        out = ctx.forward(x)
        loss = ctx.loss_fn(out, y)
        ctx.mark("forward")
        loss.backward()
        ctx.mark("backward")
        first.step()
        first.zero_grad(set_to_none=True)
        ctx.mark("sgd")
        rest.step()
        rest.zero_grad(set_to_none=True)
        ctx.mark("adam")
        _seen("two_optimizers_steps", int(rest.state[params[2]]["step"]))
        return out

    return step


def infer(ctx: StepContext) -> Callable[[Any], Any]:
    """An inference step: the forward under inference_mode and the variant's autocast."""

    def step(batch: Any) -> Any:
        x, _ = batch
        with torch.inference_mode(), ctx.autocast():
            return ctx.forward(x)

    return step


def no_autocast(ctx: StepContext) -> Callable[[Any], Any]:
    """A step that ignores ctx.autocast(): with amp on, its evidence must say NO."""

    def step(batch: Any) -> Any:
        x, _ = batch
        with torch.no_grad():
            return ctx.forward(x)

    return step


def eager_model(ctx: StepContext) -> Callable[[Any], Any]:
    """A step that calls ctx.model, not ctx.runner: with compile on, nothing compiles."""

    def step(batch: Any) -> Any:
        x, _ = batch
        with torch.no_grad():
            return ctx.model(x)

    return step


# --- two implementations of one step, for a sweep of step= ----------------------------------

# the extra wait of the slower implementation, us
EXTRA_US = 3000


def _busy_wait_us(us: float) -> None:
    deadline = time.perf_counter_ns() + int(us * 1000)
    while time.perf_counter_ns() < deadline:
        pass


def reference(ctx: StepContext) -> Callable[[Any], Any]:
    """A reference inference step."""
    return infer(ctx)


def slower(ctx: StepContext) -> Callable[[Any], Any]:
    """The same outputs, EXTRA_US later."""
    inner = infer(ctx)

    def step(batch: Any) -> Any:
        out = inner(batch)
        _busy_wait_us(EXTRA_US)
        return out

    return step


# --- steps the settings check refuses ---------------------------------------------------------


def returns_none(ctx: StepContext) -> Callable[[Any], Any]:
    def step(batch: Any) -> None:
        ctx.forward(batch[0])

    return step


def marks_data(ctx: StepContext) -> Callable[[Any], Any]:
    def step(batch: Any) -> Any:
        out = ctx.forward(batch[0])
        ctx.mark("data")
        return out

    return step


def not_a_factory(ctx: StepContext) -> int:
    return 3


def marks_differently(ctx: StepContext) -> Callable[[Any], Any]:
    """Marks one phase in its first call and two in every later one."""
    calls = [0]

    def step(batch: Any) -> Any:
        calls[0] += 1
        out = ctx.forward(batch[0])
        ctx.mark("forward")
        if calls[0] > 1:
            ctx.mark("again")
        return out

    return step


# --- functions (model=function) -----------------------------------------------------------------


def pairs(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs of a two-argument function: two [batch_size, 8, 8] matrices."""
    return torch.randn(batch_size, 8, 8), torch.randn(batch_size, 8, 8)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def matmul_einsum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.einsum("bij,bjk->bik", a, b)


def matmul_wrong(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return b @ a


def not_inputs(batch_size: int) -> str:
    return "no tensors here"
