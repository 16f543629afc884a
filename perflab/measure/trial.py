"""One trial: build the workload, apply the knobs, time it honestly, write the record.

The order never changes: resolve settings -> build -> apply knobs -> first call timed
apart (a warm worker's later trials keep its build and start here) -> warm-up ->
timed block -> numerics probe -> evidence pass -> record. Only the
user's step runs inside the timed window, plus the timer's marks; the bound check and the
memory reading per sample (the leak flag's) run in the gap between one sample's closing
mark and the next one's opening mark, and the probe and the layer hooks of the evidence
pass after the block.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import random
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perflab.analysis import steady
from perflab.analysis.steady import Warmup, kept_samples
from perflab.config.schema import PerflabConfig, TrialConfig
from perflab.errors import ConfigError
from perflab.formats.records import ErrorInfo, Samples, TrialRecord, write_record
from perflab.formats.sweepdir import log_beside
from perflab.formats.trial_parts import CostParts, KnobEvidence
from perflab.measure import environment, hf_knobs, knobs, memory, telemetry
from perflab.measure.checks import evidence_pass, memory_by_phase, numerics_probe
from perflab.measure.preflight import exit_status, user_code_importable
from perflab.measure.resolve import Resolved, resolve
from perflab.measure.steps import (
    Block,
    KeptWindow,
    Prepared,
    Step,
    first_call,
    implementation_evidence,
    make_step,
    phases_of,
    prepare,
    run_block,
    warm_up,
)
from perflab.measure.timing import StepTimes, make_timer, split_marks
from perflab.process.isolation import output_to
from perflab.process.trial_request import TrialLength, TrialRequest, now

log = logging.getLogger(__name__)


def _now() -> str:
    return now()


def measure(
    cfg: PerflabConfig,
    built: Built,
    record: TrialRecord,
    length: TrialLength | None = None,
    calibrating: bool = False,
) -> None:
    """Warm-up and the timed block of a built workload (its first call, timed apart, came
    with the build); fills record.samples, evidence and the memory reading after every
    timed sample (record.memory.sample_bytes).
    ``length``: the timed steps and steps per sample fixed by an earlier trial of this
    configuration; without it the block runs to trial.min_*/max_* (``calibrating``: and
    this trial's length becomes the fixed one of its configuration)."""
    phases = phases_of(cfg, built.step)
    tcfg, source, resolved = cfg.trial, built.prep.workload.batches, built.resolved
    step = built.step
    # every timed sample opens with a mark of its own (run_block's untimed gap)
    timer = make_timer(resolved.device, capacity=tcfg.max_steps * (len(phases) + 1) + 1)

    record.evidence.update(built.loader_evidence)  # data_loader, pin_memory
    fixed_group = length.steps_per_sample if length else None
    at_warmup = knobs.compile_counters()
    warmed = warm_up(step, source, timer, tcfg, resolved.device, phases, fixed_group)
    warm, group = warmed.warmup, warmed.warmup.steps_per_sample

    before = knobs.compile_counters()
    # a warm-up that compiled keeps none of its samples: the window may hold the compile
    timed_steps = length.timed_steps if length else None
    kept = warmed.last(kept_samples(warm, tcfg, timed_steps) if before == at_warmup else 0)
    sampler, record.telemetry = telemetry.start_sampler(resolved.device, tcfg.telemetry_interval_ms)
    with memory.SampleMemory(resolved.device) as per_sample:
        block = run_block(
            step,
            source,
            timer,
            steady.timed_block(tcfg, timed_steps, kept.steps, kept.seconds),
            group=group,
            phase_marks=group == 1,
            after_sample=per_sample.read,
        )
    host, device = timer.collect()
    if sampler is not None:
        record.telemetry = sampler.stop()
    after = knobs.compile_counters()
    # beside the peak that _run adds: memory after each timed sample, the leak flag's
    # evidence
    record.memory.sample_bytes = kept.sample_bytes + per_sample.in_bytes()
    times = split_marks(host, device, phases if group == 1 else ("step",), group, gapped=True)
    record.samples = _samples(warm, kept, times, block, built.first_call_ns, length, calibrating)
    record.warnings += _short_block(tcfg, length, kept.steps + block.steps)
    if warm.stop == "cap":
        record.warnings.append(
            f"the warm-up reached trial.warmup_max_s={tcfg.warmup_max_s} before the step "
            "time was steady; the timed block may still be ramping"
        )
    compiled = knobs.compile_evidence(resolved, built.compile_at_start, before, after)
    if cfg.step and resolved.compile_mode and compiled.ok is False:
        compiled.detail += (
            f": step={cfg.step} calls no compiled code (call ctx.runner, not ctx.model)"
        )
    record.evidence["compile"] = compiled
    record.cost_s.warmup = record.samples.warmup_s
    record.cost_s.timed = record.samples.timed_s
    # Any capture inside the window means dynamo compiled (or recompiled) while timed;
    # graphs counts how many new graphs it produced.
    in_window = after.since(before)
    if in_window.frames_compiled > 0:
        record.status = "invalid"
        record.invalid_reason = (
            f"torch.compile compiled inside the timed window ({in_window.graphs}"
            " new graph(s)); the step times include compilation"
        )


def _samples(
    warm: Warmup,
    kept: KeptWindow,
    block_times: StepTimes,
    block: Block,
    first_call_ns: int,
    length: TrialLength | None,
    calibrating: bool,
) -> Samples:
    """The trial's samples: the kept warm-up window's, then the block's own."""
    return Samples(
        steps_per_sample=block_times.steps_per_sample,
        step_ns=kept.step_ns + block_times.step_ns,
        phases_ns={
            name: kept.phases_ns[name] + durations
            for name, durations in block_times.phases_ns.items()
        },
        warmup_sample_ns=warm.sample_ns,
        # the step's first call in this process: with a warm worker, the one that built it
        first_call_ns=first_call_ns,
        timed_s=round(block.seconds + kept.seconds, 6),
        stop_reason="fixed_steps"
        if length and block.stop_reason == "max_steps"
        else block.stop_reason,
        warmup_sample_steps=warm.sample_steps,
        warmup_stop=warm.stop,
        warmup_s=round(warm.seconds - kept.seconds, 6),
        warmup_kept=kept.count,
        length="fixed" if length else ("calibrating" if calibrating else "bounds"),
        length_from_round=length.from_round if length else None,
    )


def _short_block(tcfg: TrialConfig, length: TrialLength | None, steps: int) -> list[str]:
    if length is not None and steps < length.timed_steps:
        return [
            f"only {steps} of the {length.timed_steps} timed steps this configuration runs "
            f"(fixed in round {length.from_round}): trial.max_s={tcfg.max_s} ran out first"
        ]
    if length is None and steps < tcfg.min_steps:
        return [
            f"only {steps} timed steps (trial.min_steps={tcfg.min_steps}): trial.max_s="
            f"{tcfg.max_s} ran out first; raise trial.max_s for steps this slow"
        ]
    return []


def settings_of(cfg: PerflabConfig, resolved: Resolved) -> dict[str, Any]:
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
        "fused": cfg.fused,
        "model": cfg.model._target_,
        # model=function's function and the user's step: what the variant runs
        "function": getattr(cfg.model, "fn", None),
        "step": cfg.step,
    }


def run_trial(request: TrialRequest) -> str:
    """Run one trial in this process and write its record; return the record's status.

    A ConfigError (an impossible setting on this machine) propagates before anything is
    measured and no record is written; every other failure becomes a "failed" record.
    What the trial prints (warnings, compiler output, the user's model) goes to its log
    beside the record (perflab.process.isolation.log_beside), not to the console. In a warm
    worker (request.worker.warm) the workload built by the worker's first trial is kept
    for the later ones (see Built).
    """
    started = time.time()  # against the parent's sent_at: the start cost
    span_start = time.perf_counter()  # the trial's own span, on the parts' clock
    with output_to(log_beside(request.record_path)):
        return _trial(request, started, span_start)


def _trial(request: TrialRequest, started: float, span_start: float) -> str:
    cfg = request.config
    user_code_importable(request)
    record = TrialRecord(
        status="ok",
        config=request.config_dict,
        settings={},
        started_at=_now(),
        finished_at="",
        round=request.round,
        session=request.session,
        choices=dict(request.choices),
        load_start=environment.load_average(),
        worker=replace(request.worker, pid=os.getpid()),
    )
    if request.sent_at:
        record.cost_s.start = round(max(started - request.sent_at, 0.0), 6)
    built = _reusable(request)
    resolved = built.resolved if built else resolve(cfg)
    record.settings = settings_of(cfg, resolved)
    record.warnings.extend(resolved.warnings)
    # The probe and the evidence pass give the same answer in every round of a variant
    # (same seed, same weights, same knobs) and cost about two steps: round 0 runs them,
    # later rounds spend that time on measuring unless trial.checks_every_round is set.
    checks = request.round == 0 or cfg.trial.checks_every_round
    if request.settle:
        record.environment["settle"] = dict(request.settle)
    try:
        _run(cfg, resolved, record, checks, request, built)
    except ConfigError:
        raise
    except SystemExit as exc:  # sys.exit() in the user's code, e.g. importing the model
        record.status = "failed"
        message = f"the trial process {exit_status(exc)}"
        record.error = ErrorInfo("SystemExit", message, traceback.format_exc())
        log.error("trial failed: %s", message)
    except Exception as exc:  # noqa: BLE001 - every failure must become a record
        record.status = "failed"
        record.error = ErrorInfo(type(exc).__name__, str(exc), traceback.format_exc())
        log.error("trial failed: %s: %s", type(exc).__name__, exc)
    if record.status != "ok":
        _forget()  # a workload that failed is not served again
    record.environment.update({**request.invocation.as_environment(), **environment.machine()})
    record.load_end = environment.load_average()
    record.cost_s.other = uncounted(record.cost_s, time.perf_counter() - span_start)
    record.finished_at = _now()
    write_record(Path(request.record_path), record, parents=False)
    return record.status


def uncounted(cost_s: CostParts, span_s: float) -> float:
    """The seconds of a trial's span (from its code starting to its record being
    assembled) that no part counts, so that the parts after ``start`` add up to the span:
    the heap pad, the collection before measuring, the readings around the block; on
    CUDA, a process's first trial also starts the CUDA context here; in a failed trial,
    the part that did not finish. Never negative (the parts are rounded to the us)."""
    counted = sum(seconds for part, seconds in cost_s.spent().items() if part != "start")
    return round(max(span_s - counted, 0.0), 6)


@dataclass
class Built:
    """A variant's workload with its knobs applied and its first call made: what a warm
    worker keeps from its first trial to its last (schedule.isolation=worker), so that
    build, first call and compilation are paid once per worker, not once per trial
    (docs/design.md#warm-workers). What it does not keep is what makes a trial a sample:
    each trial gets its own heap-layout pad, warm-up, timed block and record."""

    # the configuration it was built for: a worker serves one variant
    key: str
    resolved: Resolved
    prep: Prepared
    step: Step
    first_call_ns: int
    # knobs.loader_evidence: the data_loader and pin_memory entries
    loader_evidence: dict[str, KnobEvidence]
    # dynamo's counters before the first call (knobs.compile_evidence counts from them)
    compile_at_start: knobs.CompileCounts
    # what the knobs did (threads, matmul precision, cudnn.benchmark) and the conditions
    evidence: dict[str, KnobEvidence]
    conditions: dict[str, Any]
    # the weights before the first step, for the numerics probe (None: not taken, as no
    # trial of this worker runs the probe)
    snapshot: dict[str, Any] | None
    build_s: float


# The workload a warm worker built, kept between its trials; None in a fresh process.
_BUILT: Built | None = None


def _config_key(request: TrialRequest) -> str:
    return json.dumps(request.config_dict, sort_keys=True, default=str)


def _in_worker(request: TrialRequest) -> bool:
    return request.worker.warm


def _reusable(request: TrialRequest) -> Built | None:
    """The worker's built workload, if this trial may use it: a later trial of the same
    configuration in the same worker."""
    later = _in_worker(request) and (request.worker.trial or 0) > 0
    if later and _BUILT is not None and _BUILT.key == _config_key(request):
        return _BUILT
    return None


def _forget() -> None:
    global _BUILT
    _BUILT = None


def _build(cfg: PerflabConfig, resolved: Resolved, request: TrialRequest) -> Built:
    """Apply the knobs, build the workload and make its first call (timed apart: first
    batch, compilation, autotuning, lazy initialisation)."""
    start = time.perf_counter()
    evidence = {
        "threads": knobs.apply_threads(cfg.threads),
        "matmul_precision": knobs.apply_matmul_precision(cfg.matmul_precision),
        "cudnn_benchmark": knobs.apply_cudnn_benchmark(cfg.cudnn_benchmark, resolved.device),
    }
    knobs.apply_seed(cfg.seed)
    conditions = {**knobs.conditions(), "seed": cfg.seed}
    prep = prepare(cfg, resolved)
    # the probe restores these weights: taken whenever a trial of this worker may run it
    snapshot = (
        {k: v.detach().to("cpu", copy=True) for k, v in prep.model.state_dict().items()}
        if request.round == 0 or cfg.trial.checks_every_round
        else None
    )
    step = make_step(cfg, resolved, prep)
    build_s = time.perf_counter() - start
    at_start = knobs.compile_counters()
    first_ns, first_batch = first_call(step, prep, make_timer(resolved.device, capacity=8))
    loader = knobs.loader_evidence(cfg, first_batch, resolved.device)
    return Built(
        _config_key(request),
        resolved,
        prep,
        step,
        first_ns,
        loader,
        at_start,
        evidence,
        conditions,
        snapshot,
        build_s,
    )


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


def _run(
    cfg: PerflabConfig,
    resolved: Resolved,
    record: TrialRecord,
    checks: bool,
    request: TrialRequest,
    built: Built | None,
) -> None:
    """Measure (building the workload first unless the worker has it); with ``checks``,
    also the numerics probe and the layer-evidence pass."""
    global _BUILT
    pad = randomize_layout()
    record.environment["layout_pad_bytes"] = len(pad)
    # the previous trial's garbage (a warm worker's) is collected here, not while timed
    gc.collect()
    if _in_worker(request):
        # What the worker's earlier trials left alive (its built workload) lives until the
        # worker ends: frozen, it is not walked again by the next trial's collection or by
        # one inside a timed step (the fork server froze its imports:
        # perflab/process/frozen_heap.py).
        # This trial's own live objects are frozen too: reference counting still frees them
        # when it ends, and any in a cycle stay until the worker ends (trials_per_worker).
        gc.freeze()
    memory.reset_peak(resolved.device)
    rss_at_start = memory.current_rss_bytes()
    if built is None:
        built = _build(cfg, resolved, request)
        record.cost_s.build = round(built.build_s, 6)
        record.cost_s.first_call = round(built.first_call_ns / 1e9, 6)
        if _in_worker(request):
            _BUILT = built
    else:
        record.cost_s.build, record.cost_s.first_call = 0.0, 0.0
    record.evidence.update(built.evidence)
    record.evidence.update(implementation_evidence(cfg, built.prep, built.step))
    record.conditions = dict(built.conditions)
    measure(cfg, built, record, request.length, request.calibrating)
    prep = built.prep
    calibration = getattr(prep.model, "calibration", None)  # the spin model's, on CUDA
    if calibration is not None:
        record.environment["spin_calibration"] = {
            "cycles_per_ns": calibration.cycles_per_ns,
            "launches_timed": len(calibration.measured),
        }
    record.evidence["fused"] = knobs.fused_evidence(cfg.fused, prep.fused, prep.fused_calls)
    record.memory = memory.with_peak(record.memory, resolved.device, rss_at_start)
    if checks and built.snapshot is not None:
        start = time.perf_counter()
        record.memory.phases = memory_by_phase(cfg, resolved, built.step, prep)
        record.probe = numerics_probe(cfg, resolved, prep, built.snapshot, built.step)
        evidence_pass(cfg, resolved, prep, record, built.step)
        record.evidence.update(hf_knobs.evidence_of(cfg, resolved, prep))
        record.evidence.update(knobs.user_evidence(cfg, prep.model, taken=record.evidence))
        record.cost_s.checks = round(time.perf_counter() - start, 6)
    del pad  # held until here on purpose
