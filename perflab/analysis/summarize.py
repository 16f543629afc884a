"""From the records of a sweep to its summary: per-variant numbers, comparisons, verdicts.

Pure functions over what is on disk (experiment.json and the trial records, read by
perflab.analysis.sweep), so running the analysis again on the same directory gives the
same numbers, bit for bit, and a finished or interrupted sweep can be analysed on a
machine without torch or the model:

    python -m perflab.report SWEEP_DIR

The analysis computes with summary.json's own types (perflab.formats.summary) and builds
the Summary directly; JSON is written from it at the edge (Summary.to_dict). The method's
rules (the paired comparison, the adjustments, the A/A sentinel's findings) are in
perflab.analysis.verdicts: this module applies them to a sweep's records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from perflab.analysis import carryover, sessions, stats
from perflab.analysis.numerics import compare_probes
from perflab.analysis.sweep import (
    Experiment,
    ScheduleSettings,
    SweepRecords,
    edited_records,
    read_sweep,
)
from perflab.analysis.trials import trial_cost
from perflab.analysis.variants import parts_written, spent_costs, variant_summary
from perflab.analysis.verdicts import (
    EXPLORATORY_COMPARISONS,
    adjust,
    adjust_for_carryover,
    as_sentinel,
    compare,
    sentinel_findings,
)
from perflab.config.plan import SENTINEL, Plan, Variant
from perflab.formats.records import TrialRecord
from perflab.formats.summary import (
    Comparison,
    Estimate,
    Isolation,
    Numerics,
    ScalingRow,
    Sentinel,
    Summary,
    finite,
    finite_json,
)
from perflab.formats.summary.variant import VariantSummary


@dataclass(frozen=True)
class Analysis:
    """A sweep's records as one command read them, and the summary computed from them:
    passed along whole, so that the report is built without reading the records again
    (perflab.report.load)."""

    records: SweepRecords
    summary: Summary


def analysis_of(records: SweepRecords) -> Analysis:
    """The summary of the records one command read."""
    return Analysis(records, analyze(records.experiment, records.trials))


def costs(trials: dict[int, TrialRecord], metric: str) -> dict[int, float]:
    """Per-round trial cost of the ok trials."""
    return {r: trial_cost(t, metric) for r, t in trials.items() if t.status == "ok"}


# --- the whole summary ------------------------------------------------------------------


def analyze(experiment: Experiment, trials: dict[str, dict[int, TrialRecord]]) -> Summary:
    """The summary of an experiment (summary.json: Summary.to_dict), from its records."""
    plan, sched = experiment.plan, experiment.schedule
    level, delta = sched.confidence, sched.delta
    cost = {name: costs(t, sched.metric) for name, t in trials.items()}
    variants = {v.name: variant_summary(v, trials[v.name], sched.metric) for v in plan.variants}
    comparisons = [
        _comparison(experiment, trials, cost, variants, variant, base)
        for variant, base in plan.comparisons()
    ]
    in_order = carryover.in_order(plan, trials, sched.metric, experiment.resumed)
    fit = carryover.fit(in_order, carryover.reference(plan))
    carry = fit.carryovers(level) if fit else []
    sentinel = _sentinel(experiment, trials, cost)
    if fit is not None and carryover.flagged(carry):
        comparisons, sentinel = _carryover_model(plan, fit, comparisons, sentinel, level, delta)
    comparisons = adjust(comparisons, 1 - level, delta)
    unreliable, health = sentinel_findings(sentinel, delta)
    health += carryover.findings(plan, carry)
    # rounds not paired because a resume split them: said where the console and the
    # report's header show it, beside each comparison's own "across_sessions"
    health += [h for c in comparisons for h in c.health if h.startswith(sessions.UNPAIRED)]
    return Summary(
        metric=sched.metric,
        ci_level=level,
        delta=delta,
        label=sched.label,
        rounds=experiment.rounds,
        stop_reason=experiment.stop_reason,
        elapsed_s=experiment.elapsed_s,
        isolation=isolation(sched, trials),
        unreliable=unreliable,
        health=health,
        edited_records=edited_records(plan, trials),
        exploratory=len(comparisons) > EXPLORATORY_COMPARISONS,
        sentinel=sentinel,
        carryover=[
            replace(c, after=_label(plan, c.after), reference=_label(plan, c.reference))
            for c in carry
        ],
        comparisons=comparisons,
        scaling=batch_scaling(plan, trials, level) if "batch_size" in plan.swept else [],
        variants=list(variants.values()),
    )


def _comparison(
    experiment: Experiment,
    trials: dict[str, dict[int, TrialRecord]],
    cost: dict[str, dict[int, float]],
    variants: dict[str, VariantSummary],
    variant: Variant,
    base: Variant,
) -> Comparison:
    """One variant against its baseline, paired within sessions, with the health flags of
    both and the numerics check; before the carry-over and multiplicity adjustments."""
    sched = experiment.schedule
    estimate, between = _paired(experiment, trials, cost, base.name, variant.name)
    across = between.across(set(cost[base.name]) & set(cost[variant.name]))
    health = variants[variant.name].health + [f"baseline: {h}" for h in variants[base.name].health]
    if across:
        health.append(sessions.finding(variant.label, across))
    numerics = _numerics(trials[base.name], trials[variant.name])
    if numerics is not None and not numerics.ok:
        health.append(
            "numerics CHANGED beyond tolerance: the variant computes something "
            "else (fast and wrong is not a win)"
        )
    return Comparison(
        variant=variant.label,
        baseline=base.label,
        cell=finite_json(variant.cell),
        metric=sched.metric,
        delta=sched.delta,
        health=health,
        numerics=numerics,
        estimate=estimate,
        across_sessions=across or None,
    )


def isolation(
    schedule: ScheduleSettings, trials: dict[str, dict[int, TrialRecord]]
) -> Isolation | None:
    """summary.json's "isolation": how the trials ran and the seconds each part of them
    took, summed over the experiment; None for an experiment.json from before
    schedule.isolation existed."""
    if schedule.isolation is None:
        return None
    costs = spent_costs([t for by_round in trials.values() for t in by_round.values()])
    workers = {
        (name, t.worker.generation, t.worker.id, t.worker.pid)
        for name, by_round in trials.items()
        for t in by_round.values()
        if t.worker.warm
    }
    return Isolation(
        mode=schedule.isolation,
        trials_per_worker=schedule.rounds_per_unit,
        workers=len(workers) if schedule.isolation == "worker" else None,
        trials=len(costs),
        cost_s={p: round(sum(c.get(p, 0.0) for c in costs), 3) for p in parts_written(costs)},
    )


def _paired(
    experiment: Experiment,
    trials: dict[str, dict[int, TrialRecord]],
    cost: dict[str, dict[int, float]],
    base: str,
    variant: str,
) -> tuple[Estimate | None, stats.Sessions]:
    """The paired estimate of ``variant`` against ``base`` (compare), with the schedule's
    units, paired within the sessions that ran their trials (also returned)."""
    sched = experiment.schedule
    between = sessions.between(trials[base], trials[variant], experiment.resumed)
    estimate = compare(
        cost[base], cost[variant], sched.confidence, sched.delta, sched.rounds_per_unit, between
    )
    return estimate, between


def _carryover_model(
    plan: Plan,
    fit: carryover.Fit,
    comparisons: list[Comparison],
    sentinel: Sentinel | None,
    level: float,
    delta: float,
) -> tuple[list[Comparison], Sentinel | None]:
    """Every comparison, and the A/A sentinel, as the carry-over model estimates them
    (adjust_for_carryover): a carry-over was flagged."""
    comparisons = [
        adjust_for_carryover(c, fit.speedup(base.name, variant.name, level), delta)
        for c, (variant, base) in zip(comparisons, plan.comparisons(), strict=True)
    ]
    if sentinel is not None and (pair := plan.sentinel()) is not None:
        copy, base = pair
        sentinel = adjust_for_carryover(sentinel, fit.speedup(base.name, copy.name, level), delta)
    return comparisons, sentinel


def _sentinel(
    experiment: Experiment,
    trials: dict[str, dict[int, TrialRecord]],
    cost: dict[str, dict[int, float]],
) -> Sentinel | None:
    """The A/A comparison, with its noise floor (how far from 1 its interval reaches),
    reported for information: it never changes the band. Paired within sessions, as the
    comparisons are."""
    pair = experiment.plan.sentinel()
    if pair is None:
        return None
    copy, base = pair
    return as_sentinel(_paired(experiment, trials, cost, base.name, copy.name)[0])


def _label(plan: Plan, name: str) -> str:
    return plan.by_name(name).label


def batch_scaling(
    plan: Plan, trials: dict[str, dict[int, TrialRecord]], level: float
) -> list[ScalingRow]:
    """Throughput (samples/s) of each baseline variant, by batch size, with a t interval
    over its trials (batch sizes are separate cells: unpaired, so no speedup claim)."""
    rows = []
    for v in plan.variants:
        if v.baseline is not None or v.name == SENTINEL:
            continue
        logs = np.log([1e9 / c for c in costs(trials[v.name], "throughput").values()])
        if len(logs) < 2:
            continue
        mean = float(logs.mean())
        half = (
            float(stats.sps.t.ppf(0.5 + level / 2, len(logs) - 1))
            * float(logs.std(ddof=1))
            / math.sqrt(len(logs))
        )
        rows.append(
            ScalingRow(
                batch_size=finite_json(v.cell.get("batch_size")),
                variant=v.label,
                throughput=math.exp(mean),
                ci_low=math.exp(mean - half),
                ci_high=math.exp(mean + half),
                trials=len(logs),
            )
        )
    return rows


def _numerics(base: dict[int, TrialRecord], var: dict[int, TrialRecord]) -> Numerics | None:
    """The variant's probe against its baseline's (both from their earliest probed trial),
    as summary.json holds it: a NaN (a diverged model's loss) is null."""
    b = next((t.probe for _, t in sorted(base.items()) if t.probe is not None), None)
    v = next((t.probe for _, t in sorted(var.items()) if t.probe is not None), None)
    if b is None or v is None:
        return None
    n = compare_probes(b, v)
    return replace(
        n,
        max_abs_err=finite(n.max_abs_err),
        max_rel_err=finite(n.max_rel_err),
        cosine=finite(n.cosine),
        loss_diff=finite(n.loss_diff),
        tolerance=finite(n.tolerance),
    )


def analyze_dir(sweep_dir: Path) -> dict[str, Any]:
    """summary.json of a sweep directory, recomputed from its records: the JSON object
    (Summary.to_dict), as a file written now would hold it."""
    records = read_sweep(sweep_dir)
    return analyze(records.experiment, records.trials).to_dict()
