"""The step and the loops that time it: build the variant's step, run blocks of steps.

``prepare`` applies every knob to the workload; ``make_step`` turns it into a closure that
calls ``mark`` at the end of each phase (perflab's step for the mode, or ``UserStep``
around the user's own, ``step=``: its phases are the ones it marks through
``StepContext.mark``); ``run_block`` runs steps until the bounds say
stop. Only the user's step runs between marks, plus one clock reading per step for the
time bound (0.55 us per step in all on this project's CPU, benchmarks/RESULTS.md). The
timed block's memory reading per sample (perflab.measure.memory.SampleMemory) runs in an
untimed gap between one sample's closing mark and the next one's opening mark.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from perflab.analysis import steady
from perflab.config.schema import PerflabConfig, TrialConfig
from perflab.errors import ConfigError
from perflab.formats.trial_parts import KnobEvidence
from perflab.measure import knobs, memory
from perflab.measure.resolve import Resolved
from perflab.measure.timing import Timer, split_marks, steps_per_event_window
from perflab.step import StepContext
from perflab.workloads import Workload, build_workload, locate
from perflab.workloads.outputs import output_tensor

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
    input_fn = make_input_fn(cfg, device)
    if workload.loader is None:
        # data.source=memory: move the one batch to the device once, outside any timing.
        x, y = next(workload.batches)
        batch = (input_fn(x), to_device(y, device, False))
        workload.batches = _repeat(batch)
    return Prepared(
        workload, model, runner, optimizer, device, input_fn, fused, fused_calls_at_start
    )


def make_input_fn(cfg: PerflabConfig, device: torch.device) -> Callable[[Any], Any]:
    """The batch's inputs onto the device, channels_last when asked: the h2d phase."""
    non_blocking = cfg.pin_memory and device.type == "cuda"

    def input_fn(x: Any) -> Any:
        x = to_device(x, device, non_blocking)
        return knobs.channels_last_batch(x) if cfg.channels_last else x

    return input_fn


def _repeat(value: Any) -> Iterator[Any]:
    while True:
        yield value


def make_step(cfg: PerflabConfig, resolved: Resolved, prep: Prepared) -> Step:
    """The step as a closure; ``mark`` is called at the end of every phase: perflab's
    for the mode, or the user's (``step=``, a UserStep)."""
    if cfg.step:
        return UserStep(cfg, resolved, prep)
    if prep.optimizer is None:
        return _infer_step(resolved, prep)
    return _train_step(resolved, prep, prep.optimizer)


def phases_of(cfg: PerflabConfig, step: Step) -> tuple[str, ...]:
    """The phases a step marks, in order: perflab's for the mode, or those of the user's
    step (known after its first call)."""
    if isinstance(step, UserStep):
        return step.phases
    return TRAIN_PHASES if cfg.mode == "train" else INFER_PHASES


# --- the user's own step (step=pkg.mod.make_step, perflab.step) -----------------------------

# phases named by perflab around a user's step: its own (data, h2d) and the remainder after
# the step's last mark (rest, or step when it marks none); p50..p99 name the report's
# percentile columns beside the phases' (variants.csv: NAME_ms)
RESERVED_PHASES = ("data", "h2d", "step", "rest", "p50", "p90", "p95", "p99")
PHASE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
STEP_RETURNS = (
    "a step that returns its output (a tensor, or a tuple, dict or object holding one; "
    "model.output picks which): the numerics check compares it between variants"
)


def step_output(out: Any, cfg: PerflabConfig) -> torch.Tensor:
    """The tensor of a user step's return value that the numerics check compares; a
    return that holds none is a ConfigError naming ``step``."""
    if out is not None:
        try:
            return output_tensor(out, cfg.model.output)
        except ConfigError:
            if cfg.model.output != "auto":
                raise  # the field the user set names the problem
    raise ConfigError(
        "step", cfg.step, STEP_RETURNS, f"it returned {type(out).__name__}, no tensor"
    )


def implementation_evidence(
    cfg: PerflabConfig, prep: Prepared, step: Step
) -> dict[str, KnobEvidence]:
    """What the variant ran, under the keys a sweep of implementations varies (their
    report column reads it as a knob's evidence): ``step``, the user's step function and
    the factory that made it, or perflab's own; ``model.fn``, the function model=function
    called."""
    if isinstance(step, UserStep):
        made = _qualified(step.fn)
        ran = knobs.evidence(cfg.step, made, True, f"the trial ran {made}, made by {cfg.step}(ctx)")
    else:
        ran = knobs.evidence(None, "perflab", True, f"perflab's {cfg.mode} step")
    found = {"step": ran}
    called = getattr(prep.model, "fn", None) if hasattr(cfg.model, "fn") else None
    if called is not None:
        name = _qualified(called)
        found["model.fn"] = knobs.evidence(cfg.model.fn, name, True, f"each forward called {name}")
    return found


def _qualified(fn: Any) -> str:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}.{name}" if module else str(name)


class StepMarksError(RuntimeError):
    """A user's step that marked other phases than in its first call."""


class Marks:
    """``ctx.mark``: the phases of the user's step, learned in its first call and checked
    in every later one (run_block's marks are positional: every step must mark the same
    phases in the same order), each passed on to perflab's ``mark`` of the moment."""

    def __init__(self, factory: str) -> None:
        self.factory = factory
        self.names: list[str] = []
        self.learned = False
        self._i = 0
        self._mark: Callable[[], None] = _noop

    def begin(self, mark: Callable[[], None]) -> None:
        self._mark, self._i = mark, 0
        if not self.learned:
            self.names = []

    def __call__(self, name: str) -> None:
        i = self._i
        if not self.learned:
            self._check(name)
            self.names.append(name)
        elif i >= len(self.names) or self.names[i] != name:
            raise StepMarksError(self._differs(f"{name!r} as mark {i + 1}"))
        self._i = i + 1
        self._mark()

    def end(self) -> None:
        if not self.learned:
            self.learned = True
        elif self._i != len(self.names):
            raise StepMarksError(self._differs(f"{self._i} mark(s)"))
        self._mark()  # closes the last phase: the rest of the step
        self._mark = _noop

    def _check(self, name: Any) -> None:
        ok = isinstance(name, str) and PHASE_NAME.fullmatch(name) is not None
        if not ok or name in RESERVED_PHASES:
            raise ConfigError(
                "step",
                self.factory,
                "phase names of letters, digits and underscores (up to 64), other than "
                f"{', '.join(RESERVED_PHASES)}: perflab's own and the report's",
                f"the step called ctx.mark({name!r})",
            )

    def _differs(self, seen: str) -> str:
        return (
            f"step={self.factory}: its first call marked the phases {self.names}, a later "
            f"one {seen}; allowed: the same phases, in the same order, in every call"
        )


class UserStep:
    """perflab's Step around the user's: fetch the batch (phase data), move it to the
    device (h2d), then the user's ``step(batch)`` with its own marks, and one mark at its
    end. The factory is called once, here, with the StepContext."""

    def __init__(self, cfg: PerflabConfig, resolved: Resolved, prep: Prepared) -> None:
        assert cfg.step is not None
        self.factory, self.input_fn, self.device = cfg.step, prep.input_fn, prep.device
        self.marks = Marks(cfg.step)
        train = cfg.mode == "train"
        scaler = (
            torch.amp.GradScaler(resolved.device)
            if train and resolved.amp_dtype == "float16"
            else None
        )
        self.ctx = StepContext(
            model=prep.model,
            runner=prep.runner,
            device=prep.device,
            optimizer=prep.optimizer,
            loss_fn=prep.workload.loss_fn,
            scaler=scaler,
            mode=cfg.mode,
            batch_size=cfg.batch_size,
            seed=cfg.seed,
            config=cfg,
            _autocast=lambda: knobs.autocast(resolved),
            _mark=self.marks,
            _call=call_model,
        )
        self.fn = locate(cfg.step)(self.ctx)
        if not callable(self.fn):
            raise ConfigError(
                "step",
                cfg.step,
                "a factory make_step(ctx) that returns the step, a function step(batch)",
                f"it returned {type(self.fn).__name__}",
            )

    @property
    def phases(self) -> tuple[str, ...]:
        if not self.marks.learned:
            raise RuntimeError("a user step's phases are known after its first call")
        names = tuple(self.marks.names)
        return ("data", "h2d", *names, "rest" if names else "step")

    def __call__(self, source: Iterator[Any], mark: Callable[[], None]) -> None:
        x, y = next(source)
        mark()
        batch = (self.input_fn(x), to_device(y, self.device, False))
        mark()
        self.run(batch, mark)

    def run(self, batch: Any, mark: Callable[[], None] = _noop) -> Any:
        """The user's step on a batch already on the device; its return value."""
        self.marks.begin(mark)
        out = self.fn(batch)
        self.marks.end()
        return out


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
    bounds: steady.Bounds,
    *,
    group: int = 1,
    phase_marks: bool = True,
    clock: Callable[[], int] = time.perf_counter_ns,
    after_sample: Callable[[], None] | None = None,
) -> Block:
    """Run steps until the bounds say stop (steady.Bounds: the rule). Marks: one at the
    start, then either one per phase (``phase_marks``) or one per group of ``group``
    steps. With ``after_sample`` (the timed block's memory reading) every sample gets its
    own opening mark, and the reading and the bound check run in the gap between a
    sample's closing mark and the next one's opening mark, timed by no sample: the marks
    then come in the layout ``split_marks(..., gapped=True)`` reads."""
    mark = timer.mark
    inner = mark if phase_marks else _noop
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
        reason = bounds.stop(steps, clock() - start)
        if reason is None:
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
    # a user's step may mark a phase more than once (micro-batches): one entry, summed
    phases_ns: dict[str, list[int]] = {name: [] for name in phases}
    readings = memory.SampleMemory(device)

    def stretch(bounds: steady.Bounds, group: int) -> list[int]:
        run_block(
            step,
            source,
            timer,
            bounds.within(tcfg.max_steps, group),  # the timer's capacity
            group=group,
            phase_marks=group == 1,
            after_sample=readings.read,
        )
        names = phases if group == 1 else ("step",)
        times = split_marks(*timer.collect(), names, group, gapped=True)
        for name in phases_ns:  # zeros for grouped samples: a grouped block reads no phases
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
