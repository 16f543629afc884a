"""One variant's summary: step-time percentiles, phases, memory, GPU telemetry, failures
and health flags, from its trial records (a part of summary.json, see
perflab.analysis.summarize; its model is perflab.formats.summary.variant.VariantSummary)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import fields

import numpy as np

from perflab.analysis import stats, steady
from perflab.analysis.health import leak_flag, stall_flag, telemetry_flags
from perflab.analysis.trials import TrialSummary, summarize_trial, trial_cost
from perflab.config.plan import Variant
from perflab.formats.records import Samples, TrialRecord
from perflab.formats.summary import finite, finite_json
from perflab.formats.summary.variant import (
    Measured,
    StepTimes,
    Telemetry,
    TrialCost,
    TrialLength,
    Variance,
    VariantSummary,
    Warmup,
)
from perflab.formats.trial_parts import CostParts

# IQR/median of a trial's steps above these: noisy, then grossly noisy
# (docs/design.md#health-flags)
NOISE_WARN, NOISE_GROSS = 0.10, 0.25


def _steady_state(record: TrialRecord) -> bool:
    """False when the block medians of log step time change level inside the trial."""
    assert record.samples is not None
    logs = [math.log(v) for v in record.samples.step_ns]
    return not steady.changepoints(steady.block_medians(logs, 10))


def variant_summary(
    variant: Variant, trials: dict[int, TrialRecord], metric: str
) -> VariantSummary:
    """One variant's entry of summary.json, from its trial records."""
    ok = [t for _, t in sorted(trials.items()) if t.status == "ok"]
    measured = _measured(ok, list(trials.values()), metric) if ok else None
    return VariantSummary(
        name=variant.name,
        label=variant.label,
        dir=variant.dir,
        trials=len(trials),
        ok=len(ok),
        failed={str(r): _why(t) for r, t in sorted(trials.items()) if t.status != "ok"},
        health=_health(ok, measured.load_max) if measured is not None else [],
        measured=measured,
    )


def _measured(ok: list[TrialRecord], trials: list[TrialRecord], metric: str) -> Measured:
    """What the ok trials ``ok`` measured (``trials``: all of the variant's, for their
    costs)."""
    samples = [t.samples for t in ok if t.samples is not None]
    per_trial = [summarize_trial(t) for t in ok]
    workers = [_worker_of(t) for t in ok if t.samples is not None]
    cost_s, served_by = _costs(trials, workers)
    return Measured(
        step_ns=_step_times(samples),
        trial_cost_ns=_trial_cost(ok, metric),
        throughput=float(np.median([p.throughput for p in per_trial])),
        first_call_ns=float(np.median([p.first_call_ns for p in per_trial])),
        phase_median_ns=_phase_medians(per_trial),
        peak_memory_bytes=max((p.peak_memory_bytes or 0) for p in per_trial),
        # memory kind (cuda_allocator or process_rss) and, from the instrumented
        # step of the trials that ran the checks, memory at the end of each phase
        memory_kind=ok[0].memory.kind,
        memory_by_phase=next((t.memory.phases for t in ok if t.memory.phases), []),
        telemetry=telemetry_summary(ok),
        load_max=max((max(t.load_start + t.load_end, default=0.0) for t in ok), default=0.0),
        settings=finite_json(ok[0].settings),
        warmup=_warmup(samples),
        trial_length=_trial_length(samples),
        variance=_variance(samples, workers),
        cost_s=cost_s,
        workers=served_by,
    )


def _phase_medians(per_trial: list[TrialSummary]) -> dict[str, float | None]:
    """The median of each phase over the trials that have it (on accelerators, trials
    whose steps were timed in groups have none); None for a phase without samples."""
    phases = dict.fromkeys(k for p in per_trial for k in p.phase_median_ns)
    return {
        k: finite(
            float(np.median([p.phase_median_ns[k] for p in per_trial if k in p.phase_median_ns]))
        )
        for k in phases
    }


def _step_times(samples: list[Samples]) -> StepTimes:
    """Every timed step of the ok trials, pooled."""
    steps = [s for x in samples for s in stats.per_step_ns(x.step_ns, x.steps_per_sample)]
    d = stats.describe(steps)
    return StepTimes(
        p50=d.p50,
        p90=d.p90,
        p95=d.p95,
        p99=d.p99,
        mean=d.mean,
        std=d.std,
        iqr=d.iqr,
        mad=d.mad,
        cv=d.cv,
        bounded_percentiles=list(d.bounded),
        steps=d.n,
        # steps outside Tukey's fences within their own trial: flagged, kept
        outlier_steps=sum(len(stats.tukey_outliers(x.step_ns)) for x in samples),
    )


def _trial_cost(ok: list[TrialRecord], metric: str) -> TrialCost:
    costs = [trial_cost(t, metric) for t in ok]
    return TrialCost(
        median=float(np.median(costs)),
        outlier_trials=[ok[i].round for i in stats.mad_outliers(np.log(costs))],
    )


def _variance(samples: list[Samples], workers: list[tuple[int, int, int] | None]) -> Variance:
    """Where the spread of the trials comes from (stats.variance_split); with warm
    workers, the part the worker brings too."""
    split = stats.variance_split(
        [[math.log(v) for v in x.step_ns] for x in samples],
        workers if any(w is not None for w in workers) else None,
    )
    return Variance(
        within=finite(split.within),
        between=finite(split.between),
        advice=split.advice,
        worker=finite(split.worker),
    )


def _worker_of(record: TrialRecord) -> tuple[int, int, int] | None:
    """The warm worker a trial ran in, or None: a fresh process. Its pid too: a resumed
    sweep numbers its workers from 0 again."""
    w = record.worker
    if not w.warm:
        return None
    return w.generation or 0, w.id or 0, w.pid or 0


# the parts of a trial's cost, in the order a trial spends them (TrialRecord.cost_s)
# ("other": the rest of the trial's own span, see perflab/measure/trial.py)
COST_PARTS = tuple(f.name for f in fields(CostParts))


def parts_written(costs: list[dict[str, float]]) -> list[str]:
    """The parts summed over ``costs`` (CostParts.spent of each trial that wrote its
    costs down): every part but "other", which is absent from records before
    2026-11-24: summed as 0 it would claim that nothing went uncounted."""
    return [p for p in COST_PARTS if p != "other" or any(p in c for c in costs)]


def spent_costs(trials: list[TrialRecord]) -> list[dict[str, float]]:
    """The parts each trial that wrote its costs down spent (schema 4 on), by name."""
    return [spent for t in trials if (spent := t.cost_s.spent())]


def _costs(
    trials: list[TrialRecord], workers: list[tuple[int, int, int] | None]
) -> tuple[dict[str, float] | None, int | None]:
    """Where a variant's trials spent their time: the mean seconds per trial of each part
    (over the trials that wrote their costs down, schema 4 on), and how many warm workers
    served them; (None, None) when no trial wrote its costs down."""
    with_costs = spent_costs(trials)
    if not with_costs:
        return None, None
    cost_s = {
        p: float(np.mean([c.get(p, 0.0) for c in with_costs])) for p in parts_written(with_costs)
    }
    served = [w for w in workers if w is not None]
    return cost_s, len(set(served)) if served else None


def _warmup(samples: list[Samples]) -> Warmup:
    """How long the warm-ups ran and why they stopped (perflab.analysis.steady's rule)."""
    return Warmup(
        median_s=float(np.median([x.warmup_s for x in samples])),
        # the steps before the window kept for the timed block, as median_s counts them
        median_steps=float(
            np.median(
                [
                    sum(x.warmup_sample_steps)
                    - sum(steady.last(x.warmup_sample_steps, x.warmup_kept))
                    for x in samples
                ]
            )
        ),
        stops=dict(sorted(Counter(x.warmup_stop for x in samples).items())),
    )


def _trial_length(samples: list[Samples]) -> TrialLength:
    """The timed block's length: fixed by the calibrating trial of the configuration
    (in a sweep), or each trial's own (bounds)."""
    fixed = next((x for x in samples if x.length == "fixed"), None)
    return TrialLength(
        rule="fixed" if fixed else samples[0].length,
        from_round=fixed.length_from_round if fixed else None,
        steps_per_sample=sorted({x.steps_per_sample for x in samples}),
        timed_steps=sorted({x.timed_steps for x in samples}),
    )


def telemetry_summary(ok: list[TrialRecord]) -> Telemetry:
    """GPU telemetry over a variant's trials: medians of the per-trial medians, extremes
    of the extremes; not available when no trial had any."""
    have = [t.telemetry for t in ok if t.telemetry.available]
    if not have:
        reasons = {t.telemetry.reason for t in ok if t.telemetry.reason}
        return Telemetry(available=False, reason="; ".join(sorted(reasons)) or "not recorded")
    temps = [x.temperature_c_max for x in have if x.temperature_c_max is not None]
    return Telemetry(
        available=True,
        device=have[0].device,
        trials=len(have),
        util_pct_median=_median_of(x.util_pct_median for x in have),
        clock_ratio_median=_median_of(x.clock_ratio_median for x in have),
        power_w_median=_median_of(x.power_w_median for x in have),
        temperature_c_max=finite(max(temps)) if temps else None,
    )


def _median_of(readings: Iterable[float | None]) -> float | None:
    """The median of the trials' readings that were taken; None without any."""
    values = [x for x in readings if x is not None]
    return finite(float(np.median(values))) if values else None


# Exception types that mean the trial ran out of memory: torch.OutOfMemoryError (CUDA and
# other accelerators; torch.cuda.OutOfMemoryError is the same class) and Python's own.
OUT_OF_MEMORY = ("OutOfMemoryError", "MemoryError")


def _why(record: TrialRecord) -> str:
    if record.invalid_reason:
        return f"{record.status}: {record.invalid_reason}"
    if record.error is None:
        return f"{record.status}: "
    message = record.error.message.splitlines()[0] if record.error.message else ""
    if record.error.type in (record.status, ""):  # the parent's record of a dead process
        return f"{record.status}: {message}"
    why = f"{record.status}: {record.error.type}: {message}"
    if record.error.type in OUT_OF_MEMORY:
        batch = record.config.get("batch_size")
        why += f" (out of memory at batch_size={batch}: lower batch_size or the model size)"
    return why


def _iqr_ratio(step_ns: list[int]) -> float:
    d = stats.describe(step_ns)
    return d.iqr / d.p50 if d.p50 else 0.0


def _health(ok: list[TrialRecord], load: float) -> list[str]:
    flags = []
    noise = float(np.median([_iqr_ratio(t.samples.step_ns) for t in ok if t.samples]))
    if noise >= NOISE_GROSS:
        flags.append(f"grossly noisy steps: IQR/median {noise:.0%} (>= {NOISE_GROSS:.0%})")
    elif noise >= NOISE_WARN:
        flags.append(f"noisy steps: IQR/median {noise:.0%} (>= {NOISE_WARN:.0%})")
    capped = sum(t.samples.warmup_stop == "cap" for t in ok if t.samples)
    if capped:
        flags.append(
            f"warm-up reached trial.warmup_max_s before the step time was steady in "
            f"{capped}/{len(ok)} trials"
        )
    unsteady = sum(not _steady_state(t) for t in ok)
    if unsteady:
        flags.append(
            f"{unsteady}/{len(ok)} trials changed level inside the timed block "
            "(not steady: longer warm-up may help)"
        )
    cores = ok[0].environment.get("usable_cpus") or ok[0].environment.get("cpu_count")
    if cores and load > cores:
        flags.append(f"machine loaded: load average up to {load:.1f} on {cores} cores")
    flags += [f for f in (leak_flag(ok), stall_flag(ok)) if f]
    flags += telemetry_flags([t.telemetry for t in ok])
    evidence_off = sorted({k for t in ok for k, e in t.evidence.items() if e.ok is False})
    if evidence_off:
        flags.append(f"knob not in effect: {', '.join(evidence_off)}")
    return flags
