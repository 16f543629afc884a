"""One trial: build the workload, apply the knobs, time it honestly, write the record.

The order never changes: resolve settings -> build -> apply knobs -> first call timed
apart -> warm-up -> timed block -> numerics probe -> evidence pass -> record. Only the
user's step runs inside the timed window, plus the timer's marks and one clock reading
per step for the time bound; the probe and the layer hooks of the evidence pass run
after it.
"""

from __future__ import annotations

import logging
import math
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from perflab import environment, knobs, memory
from perflab.config import PerflabConfig, TrialConfig
from perflab.errors import ConfigError
from perflab.records import ErrorInfo, Probe, Samples, TrialRecord, write_record
from perflab.resolve import Resolved, resolve
from perflab.timing import Timer, make_timer, split_marks, steps_per_event_window
from perflab.workloads import Workload, build_workload, check_factories

log = logging.getLogger(__name__)

TRAIN_PHASES = ("data", "h2d", "forward", "backward", "optimizer")
INFER_PHASES = ("data", "h2d", "forward")
PROBE_SAMPLE_SIZE = 4096

Step = Callable[[Iterator[Any], Callable[[], None]], None]


@dataclass
class TrialRequest:
    """Everything a trial process needs; plain data so it crosses the process boundary."""

    config: PerflabConfig
    # the composed config as a plain dict, stored in the record
    config_dict: dict[str, Any]
    record_path: str
    # command line, working directory and git state of the CLI process
    invocation: dict[str, Any] = field(default_factory=dict)
    round: int = 0
    # config group options chosen (Hydra's runtime.choices), for labels
    choices: dict[str, str] = field(default_factory=dict)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


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


def prepare(cfg: PerflabConfig, resolved: Resolved) -> Prepared:
    workload = build_workload(cfg, cfg.seed)
    device = torch.device(resolved.device)
    model = knobs.apply_channels_last(workload.model.to(device), cfg.channels_last)
    model.train(cfg.mode == "train")
    optimizer = knobs.build_optimizer(cfg, model) if cfg.mode == "train" else None
    runner = knobs.apply_compile(model, resolved, cfg.compile_dynamic)
    non_blocking = cfg.pin_memory and device.type == "cuda"

    def input_fn(x: Any) -> Any:
        x = to_device(x, device, non_blocking)
        if cfg.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    if workload.loader is None:
        # data.source=memory: move the one batch to the device once, outside any timing.
        x, y = next(workload.batches)
        batch = (input_fn(x), to_device(y, device, False))
        workload.batches = _repeat(batch)
    return Prepared(workload, model, runner, optimizer, device, input_fn)


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
) -> Block:
    """Run steps until the bounds say stop. Marks: one at the start, then either one per
    phase (``phase_marks``) or one per group of ``group`` steps."""
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
        elapsed = clock() - start
        if steps >= max_steps:
            reason = "max_steps"
        elif elapsed >= max_ns:
            reason = "max_s"
        elif steps >= min_steps and elapsed >= min_ns:
            reason = "min_reached"
        else:
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


def warm_up(step: Step, source: Iterator[Any], timer: Timer, tcfg: TrialConfig) -> list[int]:
    """Run warm-up steps (at least warmup_steps and warmup_s); return each step's time."""
    if tcfg.warmup_steps == 0 and tcfg.warmup_s == 0:
        return []
    run_block(
        step,
        source,
        timer,
        min_steps=max(tcfg.warmup_steps, 1),
        max_steps=tcfg.max_steps,
        min_s=tcfg.warmup_s,
        max_s=tcfg.max_s,
        phase_marks=False,
    )
    host, device = timer.collect()
    return split_marks(host, device, ("step",)).step_ns


def steps_per_sample(device: str, warmup_ns: list[int], min_window_us: float) -> int:
    """1 on CPU (a clock reading costs ~0.05 us); on accelerators, enough steps that one
    event pair spans min_window_us, judged from the median warm-up step."""
    if device != "cuda" or not warmup_ns:
        return 1
    return steps_per_event_window(sorted(warmup_ns)[len(warmup_ns) // 2], min_window_us)


def measure(cfg: PerflabConfig, resolved: Resolved, prep: Prepared, record: TrialRecord) -> None:
    """First call, warm-up and the timed block; fills record.samples and evidence."""
    phases = TRAIN_PHASES if cfg.mode == "train" else INFER_PHASES
    tcfg, source = cfg.trial, prep.workload.batches
    step = make_step(cfg, resolved, prep)
    timer = make_timer(resolved.device, capacity=tcfg.max_steps * len(phases) + 1)

    first_ns, first_batch = first_call(step, prep, timer)
    record.evidence["data_loader"] = knobs.loader_evidence(cfg, first_batch, resolved.device)
    warmup_ns = warm_up(step, source, timer, tcfg)
    group = steps_per_sample(resolved.device, warmup_ns, tcfg.min_event_window_us)

    before = knobs.compile_counters()
    block = run_block(
        step,
        source,
        timer,
        min_steps=tcfg.min_steps,
        max_steps=tcfg.max_steps,
        min_s=tcfg.min_s,
        max_s=tcfg.max_s,
        group=group,
        phase_marks=group == 1,
    )
    host, device = timer.collect()
    after = knobs.compile_counters()

    times = split_marks(host, device, phases if group == 1 else ("step",), group)
    record.samples = Samples(
        steps_per_sample=times.steps_per_sample,
        step_ns=times.step_ns,
        phases_ns=times.phases_ns,
        warmup_step_ns=warmup_ns,
        first_call_ns=first_ns,
        timed_s=round(block.seconds, 6),
        stop_reason=block.stop_reason,
    )
    if block.steps < tcfg.min_steps:
        record.warnings.append(
            f"only {block.steps} timed steps (trial.min_steps={tcfg.min_steps}): trial.max_s="
            f"{tcfg.max_s} ran out first; raise trial.max_s for steps this slow"
        )
    record.evidence["compile"] = knobs.compile_evidence(resolved, before, after)
    # Any capture inside the window means dynamo compiled (or recompiled) while timed;
    # graphs counts how many new graphs it produced.
    if after["frames_compiled"] > before["frames_compiled"]:
        record.status = "invalid"
        record.invalid_reason = (
            f"torch.compile compiled inside the timed window ({after['graphs'] - before['graphs']}"
            " new graph(s)); the step times include compilation"
        )


def _flatten_output(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    return knobs.first_tensor(out)


def numerics_probe(
    cfg: PerflabConfig, resolved: Resolved, prep: Prepared, snapshot: dict[str, torch.Tensor]
) -> Probe:
    """Outputs, loss (and gradient norm in train mode) on the fixed probe batch, with the
    initial seeded weights restored, under every knob of the variant."""
    prep.model.load_state_dict(snapshot)  # copies in place: compiled graphs stay valid
    x, y = prep.workload.probe
    x, y = prep.input_fn(x), to_device(y, prep.device, False)
    autocast = knobs.autocast(resolved)
    grad_norm = None
    if cfg.mode == "train":
        assert prep.optimizer is not None
        prep.optimizer.zero_grad(set_to_none=True)
        with autocast:
            out = call_model(prep.runner, x)
            loss = prep.workload.loss_fn(out, y)
        loss.backward()
        grads = [p.grad.detach().double() for p in prep.model.parameters() if p.grad is not None]
        grad_norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
        prep.optimizer.zero_grad(set_to_none=True)
    else:
        with torch.inference_mode(), autocast:
            out = call_model(prep.runner, x)
            loss = prep.workload.loss_fn(out, y)
    flat = _flatten_output(out).detach().reshape(-1)
    stride = max(1, flat.numel() // PROBE_SAMPLE_SIZE)
    return Probe(
        batch_size=cfg.batch_size,
        loss=float(loss.detach().float()),
        output_shape=list(_flatten_output(out).shape),
        output_dtype=str(flat.dtype).removeprefix("torch."),
        output_norm=float(flat.double().norm()),
        output_sample=[float(v) for v in flat[::stride][:PROBE_SAMPLE_SIZE].float().cpu()],
        grad_norm=grad_norm,
    )


def evidence_pass(
    cfg: PerflabConfig, resolved: Resolved, prep: Prepared, record: TrialRecord
) -> None:
    """Run the eager model once with layer hooks to see what the knobs did to its layers.

    Hooks on a compiled model would force a recompilation, so the pass uses the eager
    module under the same autocast and memory format; compile has its own evidence.
    """
    x = prep.input_fn(prep.workload.probe[0])
    with torch.no_grad(), knobs.observe_layers(prep.model) as seen, knobs.autocast(resolved):
        call_model(prep.model, x)
    record.evidence["amp"] = knobs.amp_evidence(resolved, seen)
    record.evidence["channels_last"] = knobs.channels_last_evidence(cfg.channels_last, seen)


def _settings(cfg: PerflabConfig, resolved: Resolved) -> dict[str, Any]:
    return {
        "device": resolved.device,
        "amp_dtype": resolved.amp_dtype,
        "compile_mode": resolved.compile_mode,
        "mode": cfg.mode,
        "batch_size": cfg.batch_size,
        "threads": cfg.threads,
        "data_source": cfg.data.source,
        "num_workers": cfg.num_workers,
        "pin_memory": cfg.pin_memory,
        "channels_last": cfg.channels_last,
        "model": cfg.model._target_,
    }


def failure_record(request: TrialRequest, kind: str, message: str) -> TrialRecord:
    """The record the parent writes for a trial process that died ("crashed") or hung
    ("timeout") before it could write its own: a failure is never a lost result."""
    now = _now()
    status = "timeout" if kind == "timeout" else "failed"
    return TrialRecord(
        status=status,
        config=request.config_dict,
        settings={},
        started_at=now,
        finished_at=now,
        round=request.round,
        choices=dict(request.choices),
        error=ErrorInfo(status, message, ""),
        environment=dict(request.invocation),
    )


def _user_code_importable(request: TrialRequest) -> None:
    cwd = request.invocation.get("cwd")
    if cwd and cwd not in sys.path:
        sys.path.insert(0, cwd)  # the user's own factories live beside their command


def check_settings(request: TrialRequest) -> list[str]:
    """Resolve the config on this machine without running anything: raises ConfigError
    for impossible settings or factories that cannot be built with their arguments,
    returns the warnings for unwise ones."""
    _user_code_importable(request)
    warnings = resolve(request.config).warnings
    check_factories(request.config)
    return warnings


def run_trial(request: TrialRequest) -> str:
    """Run one trial in this process and write its record; return the record's status.

    A ConfigError (an impossible setting on this machine) propagates before anything is
    measured and no record is written; every other failure becomes a "failed" record.
    """
    cfg = request.config
    _user_code_importable(request)
    record = TrialRecord(
        status="ok",
        config=request.config_dict,
        settings={},
        started_at=_now(),
        finished_at="",
        round=request.round,
        choices=dict(request.choices),
        load_start=environment.load_average(),
    )
    resolved = resolve(cfg)
    record.settings = _settings(cfg, resolved)
    record.warnings.extend(resolved.warnings)
    # The probe and the evidence pass give the same answer in every round of a variant
    # (same seed, same weights, same knobs) and cost about two steps: round 0 runs them,
    # later rounds spend that time on measuring unless trial.checks_every_round is set.
    checks = request.round == 0 or cfg.trial.checks_every_round
    try:
        _run(cfg, resolved, record, checks)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure must become a record
        record.status = "failed"
        record.error = ErrorInfo(type(exc).__name__, str(exc), traceback.format_exc())
        log.error("trial failed: %s: %s", type(exc).__name__, exc)
    record.environment.update({**request.invocation, **environment.machine()})
    record.load_end = environment.load_average()
    record.finished_at = _now()
    write_record(Path(request.record_path), record)
    return record.status


# Every trial process is forked from the same server, so without this every trial of a
# variant would get the same heap layout, decided by incidental bytes such as the length
# of its record path. Layout alone moved the convnet step by up to 15 % here (a 5000-byte
# longer request: 83 ms against 97 ms, four trials each), and a layout that sticks to a
# variant is a bias no number of rounds removes: an A/A pair read 1.089x [1.071, 1.109].
# A random-size allocation held for the whole trial gives each trial its own layout, so
# layout becomes trial-to-trial noise that the confidence interval accounts for
# (randomised layout, as in Curtsinger & Berger's Stabilizer, 2013).
LAYOUT_PAD_MAX = 64 * 1024


def randomize_layout() -> bytearray:
    """Shift the trial's heap by a random amount; keep the result alive for the trial."""
    return bytearray(random.SystemRandom().randrange(0, LAYOUT_PAD_MAX, 16))


def _run(cfg: PerflabConfig, resolved: Resolved, record: TrialRecord, checks: bool) -> None:
    """Measure; with ``checks``, also the numerics probe and the layer-evidence pass."""
    pad = randomize_layout()
    record.environment["layout_pad_bytes"] = len(pad)
    memory.reset_peak(resolved.device)
    rss_at_start = memory.current_rss_bytes()
    record.evidence["threads"] = knobs.apply_threads(cfg.threads)
    knobs.apply_seed(cfg.seed)
    record.evidence["matmul_precision"] = knobs.apply_matmul_precision(cfg.matmul_precision)
    record.evidence["cudnn_benchmark"] = knobs.apply_cudnn_benchmark(
        cfg.cudnn_benchmark, resolved.device
    )
    record.conditions = {**knobs.conditions(), "seed": cfg.seed}
    prep = prepare(cfg, resolved)
    snapshot = (
        {k: v.detach().to("cpu", copy=True) for k, v in prep.model.state_dict().items()}
        if checks
        else {}
    )
    measure(cfg, resolved, prep, record)
    record.memory = memory.peak_memory(resolved.device, rss_at_start)
    if checks:
        record.probe = numerics_probe(cfg, resolved, prep, snapshot)
        evidence_pass(cfg, resolved, prep, record)
    del pad  # held until here on purpose
