"""The step and the loops that time it: build the variant's step, run blocks of steps.

``prepare`` applies every knob to the workload; ``make_step`` turns it into a closure that
calls ``mark`` at the end of each phase; ``run_block`` runs steps until the bounds say
stop. Only the user's step runs between marks, plus one clock reading per step for the
time bound (0.55 us per step in all on this project's CPU, benchmarks/RESULTS.md). The
timed block's memory reading per sample (perflab.measure.memory.SampleMemory) runs in an
untimed gap between one sample's closing mark and the next one's opening mark.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from perflab.analysis import steady
from perflab.config.schema import PerflabConfig, TrialConfig
from perflab.measure import knobs, memory
from perflab.measure.resolve import Resolved
from perflab.measure.timing import Timer, split_marks, steps_per_event_window
from perflab.workloads import Workload, build_workload

TRAIN_PHASES = ("data", "h2d", "forward", "backward", "optimizer")
INFER_PHASES = ("data", "h2d", "forward")

Step = Callable[[Iterator[Any], Callable[[], None]], None]


def _noop() -> None:
    pass


def to_device(value: Any, device: torch.device, non_blocking: bool) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=non_blocking)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device, non_blocking) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device, non_blocking) for k, v in value.items()}
    return value


def call_model(model: Callable[..., Any], x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return model(*x)
    if isinstance(x, dict):
        return model(**x)
    return model(x)


@dataclass
class Prepared:
    """The workload with every knob applied: what the step closure runs."""

    workload: Workload
    model: torch.nn.Module
    # the model as called in the step: compiled, or the model itself
    runner: Callable[..., Any]
    optimizer: torch.optim.Optimizer | None
    device: torch.device
    input_fn: Callable[[Any], Any]
    # modules swapped for perflab's fused kernels (fused=triton), e.g. "0+1: Linear+GELU"
    fused: list[str] = field(default_factory=list)
    # knobs.fused_op_calls() before the model was built: a trial counts what it added
    fused_calls: dict[str, int] = field(default_factory=dict)


def prepare(cfg: PerflabConfig, resolved: Resolved) -> Prepared:
    fused_calls_at_start = knobs.fused_op_calls()
    workload = build_workload(cfg, cfg.seed)
    device = torch.device(resolved.device)
    model = workload.model.to(device)
    # before channels_last and compile: compile then traces the fused custom ops
    fused = knobs.apply_fused(model, cfg.fused, resolved.device)
    model = knobs.apply_channels_last(model, cfg.channels_last)
    model.train(cfg.mode == "train")
    optimizer = knobs.build_optimizer(cfg, model) if cfg.mode == "train" else None
    runner = knobs.apply_compile(model, resolved, cfg.compile_dynamic)
    non_blocking = cfg.pin_memory and device.type == "cuda"

    def input_fn(x: Any) -> Any:
        x = to_device(x, device, non_blocking)
        return knobs.channels_last_batch(x) if cfg.channels_last else x

    if workload.loader is None:
        # data.source=memory: move the one batch to the device once, outside any timing.
        x, y = next(workload.batches)
        batch = (input_fn(x), to_device(y, device, False))
        workload.batches = _repeat(batch)
    return Prepared(
        workload, model, runner, optimizer, device, input_fn, fused, fused_calls_at_start
    )


def _repeat(value: Any) -> Iterator[Any]:
    while True:
        yield value


def make_step(cfg: PerflabConfig, resolved: Resolved, prep: Prepared) -> Step:
    """The user's step as a closure; ``mark`` is called at the end of every phase."""
    if prep.optimizer is None:
        return _infer_step(resolved, prep)
    return _train_step(resolved, prep, prep.optimizer)


def _train_step(resolved: Resolved, prep: Prepared, optimizer: torch.optim.Optimizer) -> Step:
    runner, loss_fn, input_fn, device = (
        prep.runner,
        prep.workload.loss_fn,
        prep.input_fn,
        prep.device,
    )
    autocast = knobs.autocast(resolved)
    # fp16 gradients underflow without loss scaling; bf16 has fp32's range and needs none.
    scaler = torch.amp.GradScaler(resolved.device) if resolved.amp_dtype == "float16" else None

    def step(source: Iterator[Any], mark: Callable[[], None]) -> None:
        x, y = next(source)
        mark()
        x, y = input_fn(x), to_device(y, device, False)
        mark()
        with autocast:
            loss = loss_fn(call_model(runner, x), y)
        mark()
        (scaler.scale(loss) if scaler else loss).backward()
        mark()
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        mark()

    return step


def _infer_step(resolved: Resolved, prep: Prepared) -> Step:
    runner, input_fn = prep.runner, prep.input_fn
    autocast = knobs.autocast(resolved)

    def step(source: Iterator[Any], mark: Callable[[], None]) -> None:
        x, _ = next(source)
        mark()
        x = input_fn(x)
        mark()
        with torch.inference_mode(), autocast:
            call_model(runner, x)
        mark()

    return step


@dataclass
class Block:
    steps: int
    seconds: float
    stop_reason: str


def run_block(
    step: Step,
    source: Iterator[Any],
    timer: Timer,
    *,
    min_steps: int,
    max_steps: int,
    min_s: float,
    max_s: float,
    group: int = 1,
    phase_marks: bool = True,
    clock: Callable[[], int] = time.perf_counter_ns,
    after_sample: Callable[[], None] | None = None,
) -> Block:
    """Run steps until the bounds say stop. Marks: one at the start, then either one per
    phase (``phase_marks``) or one per group of ``group`` steps. With ``after_sample``
    (the timed block's memory reading) every sample gets its own opening mark, and the
    reading and the bound check run in the gap between a sample's closing mark and the
    next one's opening mark, timed by no sample: the marks then come in the layout
    ``split_marks(..., gapped=True)`` reads."""
    mark = timer.mark
    inner = mark if phase_marks else _noop
    min_ns, max_ns = int(min_s * 1e9), int(max_s * 1e9)
    steps = 0
    start = clock()
    mark()
    while True:
        step(source, inner)
        steps += 1
        if steps % group:
            continue
        if not phase_marks:
            mark()
        if after_sample is not None:
            after_sample()
        elapsed = clock() - start
        if steps >= max_steps:
            reason = "max_steps"
        elif elapsed >= max_ns:
            reason = "max_s"
        elif steps >= min_steps and elapsed >= min_ns:
            reason = "min_reached"
        else:
            if after_sample is not None:
                mark()  # the next sample opens after the gap
            continue
        timer.sync()
        return Block(steps, (clock() - start) / 1e9, reason)


def first_call(step: Step, prep: Prepared, timer: Timer) -> tuple[int, Any]:
    """Time the first step apart: first batch, compilation, autotuning, lazy init."""
    start = time.perf_counter_ns()
    batch = next(prep.workload.batches)
    step(iter([batch]), _noop)
    timer.sync()
    return time.perf_counter_ns() - start, batch


@dataclass
class KeptWindow:
    """The warm-up's last samples, which open the timed block (trial.keep_steady_window):
    durations, phases and memory readings, as the block records its own."""

    count: int
    steps: int
    step_ns: list[int]
    phases_ns: dict[str, list[int]]
    sample_bytes: list[int]

    @property
    def seconds(self) -> float:
        return sum(self.step_ns) / 1e9


@dataclass
class WarmedUp:
    """The warm-up as the steady rule saw it, and what the timed block needs of its last
    samples should they open it."""

    warmup: steady.Warmup
    # per phase, one duration per warm-up sample; zeros for grouped samples, whose block
    # records no phases
    phases_ns: dict[str, list[int]]
    # memory after each warm-up sample (perflab.measure.memory.SampleMemory)
    sample_bytes: list[int]

    def last(self, n: int) -> KeptWindow:
        w, last = self.warmup, steady.last
        return KeptWindow(
            count=n,
            steps=sum(last(w.sample_steps, n)),
            step_ns=last(w.sample_ns, n),
            phases_ns={name: last(durations, n) for name, durations in self.phases_ns.items()},
            sample_bytes=last(self.sample_bytes, n),
        )


def warm_up(
    step: Step,
    source: Iterator[Any],
    timer: Timer,
    tcfg: TrialConfig,
    device: str,
    phases: tuple[str, ...],
    fixed_group: int | None = None,
) -> WarmedUp:
    """Warm up under perflab.analysis.steady's rule: the minimum (trial.warmup_steps and
    warmup_s), then until the step time is steady or trial.warmup_max_s has passed. Each
    stretch ends with a synchronisation, outside any timed window. Samples are taken as
    the timed block takes them, so that the last ones can join it: one-step samples
    marked phase by phase, and a memory reading in the gap after each."""
    phases_ns: dict[str, list[int]] = {name: [] for name in phases}
    readings = memory.SampleMemory(device)

    def stretch(steps: int, group: int, min_s: float, max_s: float) -> list[int]:
        bound = max(group, tcfg.max_steps - tcfg.max_steps % group)  # the timer's capacity
        run_block(
            step,
            source,
            timer,
            min_steps=min(steps, bound),
            max_steps=bound,
            min_s=min_s,
            max_s=max_s,
            group=group,
            phase_marks=group == 1,
            after_sample=readings.read,
        )
        names = phases if group == 1 else ("step",)
        times = split_marks(*timer.collect(), names, group, gapped=True)
        for name in phases:  # zeros for grouped samples: a grouped block reads no phases
            phases_ns[name].extend(times.phases_ns.get(name, [0] * len(times.step_ns)))
        return times.step_ns

    with readings:
        rule = steady.warm_up(
            stretch,
            time.perf_counter_ns,
            tcfg,
            choose_group=lambda per_step: steps_per_sample(
                device, per_step, tcfg.min_event_window_us
            ),
            fixed_group=fixed_group,
        )
    return WarmedUp(rule, phases_ns, readings.in_bytes())


def steps_per_sample(device: str, warmup_ns: list[float], min_window_us: float) -> int:
    """1 on CPU (a clock reading costs ~0.05 us); on accelerators, enough steps that one
    event pair spans min_window_us, judged from the median warm-up step."""
    if device != "cuda" or not warmup_ns:
        return 1
    return steps_per_event_window(sorted(warmup_ns)[len(warmup_ns) // 2], min_window_us)
