"""From the records of a sweep to its summary: per-variant numbers, comparisons, verdicts.

Pure functions over what is on disk (experiment.json and the trial records, read by
perflab.analysis.sweep), so running the analysis again on the same directory gives the
same numbers, bit for bit, and a finished or interrupted sweep can be analysed on a
machine without torch or the model:

    python -m perflab.report SWEEP_DIR

The analysis computes with summary.json's own types (perflab.formats.summary) and builds
the Summary directly; JSON is written from it at the edge (Summary.to_dict).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

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
from perflab.analysis.variants import parts_written, variant_summary
from perflab.config.plan import SENTINEL, Plan, Variant
from perflab.formats.records import TrialRecord
from perflab.formats.summary import (
    Comparison,
    Estimate,
    Interval,
    Isolation,
    Numerics,
    ScalingRow,
    Sentinel,
    Summary,
    Unadjusted,
    Welch,
    finite,
    finite_json,
)
from perflab.formats.summary.variant import VariantSummary

# Comparisons above this count are an exploratory grid: Benjamini-Hochberg, labelled.
EXPLORATORY_COMPARISONS = 20
# A round whose modified z-score exceeds 3.5 is listed as an outlier; the verdict moves to
# the trimmed interval only above this. With ten rounds the MAD is itself noisy: in
# simulated experiments without outliers 11 % of them had a round above 3.5, and
# switching on those cost 2 points of coverage (the switch picks exactly the samples whose
# spread looks small once trimmed); above 7, 0.6 % did, while a trial 30 % slower than
# its round's partner is still caught (benchmarks/validate_statistics.py).
GROSS_OUTLIER_Z = 7.0
# the interval of a comparison that the carry-over model decided
CARRYOVER_INTERVAL = "carry-over model"
# how the p-values are adjusted across the comparisons (Comparison.adjustment)
HOLM, BENJAMINI_HOCHBERG = "holm", "benjamini-hochberg"


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


# --- one comparison -------------------------------------------------------------------


def compare(
    base: dict[int, float],
    var: dict[int, float],
    level: float,
    delta: float,
    rounds_per_unit: int = 1,
    sessions: stats.Sessions | None = None,
) -> Estimate | None:
    """Paired comparison over the rounds where both trials are ok, one log-ratio per
    independent unit: a round, or with warm workers a worker generation of
    ``rounds_per_unit`` rounds (stats.paired_units).

    The verdict comes from the Student t interval on the units' log-ratios or, when a
    unit is a gross outlier (modified z-score above GROSS_OUTLIER_Z: a trial hit by a
    co-tenant), from the 20 %-trimmed interval (stats.trimmed_effect), which such units
    cannot widen or move; the other intervals are kept beside it. With ``sessions`` (a
    resumed sweep), a round is paired only within one session, and the unpaired
    interval leaves out the rounds it ran across two (stats.Sessions)."""
    if sessions is not None:
        across = set(sessions.across(set(base) & set(var)))
        base = {r: c for r, c in base.items() if r not in across}
        var = {r: c for r, c in var.items() if r not in across}
    d, units = stats.paired_units(base, var, rounds_per_unit, sessions)
    if len(d) < stats.MIN_PAIRED_ROUNDS:
        return None
    effect = stats.paired_effect(d, level)
    outliers = stats.mad_outliers(d)
    chosen, interval = effect, "t"
    if stats.mad_outliers(d, GROSS_OUTLIER_Z) and len(d) >= 5:
        chosen, interval = stats.trimmed_effect(d, level), "trimmed"
    hl, hl_low, hl_high = stats.hodges_lehmann(d, level)
    verdict = stats.verdict(chosen.low, chosen.high, delta)
    rounds_to_decide = None
    if verdict == stats.INCONCLUSIVE:
        needed = (
            stats.rounds_to_decide(effect, delta)
            if interval == "t"
            else stats.rounds_to_narrow(chosen.speedup, chosen.low, chosen.high, len(d), delta)
        )
        # in rounds, as the schedule counts them: units are rounds_per_unit rounds each
        rounds_to_decide = None if needed is None else needed * rounds_per_unit
    welch, without = _companions(base, var, d, outliers, level, rounds_per_unit, sessions)
    return Estimate(
        speedup=chosen.speedup,
        ci_low=chosen.low,
        ci_high=chosen.high,
        ci_level=level,
        interval=interval,
        half_width=chosen.half_width,
        rounds=sum(len(u) for u in units),
        # only with warm workers: a fresh process per trial makes every round a unit
        units=len(units) if rounds_per_unit > 1 else None,
        rounds_per_unit=rounds_per_unit if rounds_per_unit > 1 else None,
        p_value=finite(chosen.p_value),
        sd_log_ratio=effect.sd_log,
        verdict=verdict,
        t=_interval(effect.speedup, effect.low, effect.high),
        hodges_lehmann=_interval(hl, hl_low, hl_high),
        # the distribution-free interval gives another verdict: skewed or bimodal data
        distribution_sensitive=stats.verdict(hl_low, hl_high, delta) != verdict
        and math.isfinite(hl_high),
        outlier_rounds=[r for i in outliers for r in units[i]],
        rounds_to_decide=rounds_to_decide,
        welch=welch,
        without_outliers=without,
    )


def _interval(speedup: float, low: float, high: float) -> Interval:
    """An interval as summary.json holds it: an end that does not exist is None."""
    return Interval(speedup=speedup, ci_low=finite(low), ci_high=finite(high))


def unit_costs(
    costs: dict[int, float], rounds_per_unit: int, session: Mapping[int, int] | None = None
) -> list[float]:
    """One cost per unit (stats.paired_units): the geometric mean of its rounds' costs; a
    unit is a worker generation within one session (``session``: each round's)."""
    units: dict[tuple[int, int], list[float]] = {}
    for r, c in sorted(costs.items()):
        key = ((session or {}).get(r, 0), r // max(rounds_per_unit, 1))
        units.setdefault(key, []).append(math.log(c))
    return [math.exp(sum(v) / len(v)) for v in units.values()]


def _companions(
    base: dict[int, float],
    var: dict[int, float],
    d: list[float],
    outliers: list[int],
    level: float,
    rounds_per_unit: int = 1,
    sessions: stats.Sessions | None = None,
) -> tuple[Welch | None, Interval | None]:
    """The unpaired Welch interval over every ok trial (rounds ignored; with warm workers,
    one cost per worker generation), and the t interval without the outlier units: shown
    beside the verdict, never deciding it."""
    welch, without = None, None
    base_costs = unit_costs(base, rounds_per_unit, sessions.base if sessions else None)
    var_costs = unit_costs(var, rounds_per_unit, sessions.variant if sessions else None)
    if len(base_costs) >= 2 and len(var_costs) >= 2:
        w = stats.welch_effect(base_costs, var_costs, level)
        welch = Welch(
            speedup=w.speedup,
            ci_low=finite(w.low),
            ci_high=finite(w.high),
            p_value=finite(w.p_value),
        )
    if outliers and len(d) - len(outliers) >= 2:
        kept = stats.paired_effect([x for i, x in enumerate(d) if i not in outliers], level)
        without = _interval(kept.speedup, kept.low, kept.high)
    return welch, without


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
    records = [t for by_round in trials.values() for t in by_round.values()]
    costs = [t.cost_s for t in records if t.cost_s]
    workers = {
        (name, t.worker.get("generation"), t.worker.get("id"), t.worker.get("pid"))
        for name, by_round in trials.items()
        for t in by_round.values()
        if t.worker.get("isolation") == "worker"
    }
    return Isolation(
        mode=schedule.isolation,
        trials_per_worker=schedule.rounds_per_unit,
        workers=len(workers) if schedule.isolation == "worker" else None,
        trials=len(costs),
        cost_s={p: round(sum(c.get(p, 0.0) for c in costs), 3) for p in parts_written(costs)},
    )


# a comparison, or the A/A sentinel: what a carry-over adjusts
Adjusted = TypeVar("Adjusted", Comparison, Sentinel)


def adjust_for_carryover(
    comparison: Adjusted, adjusted: tuple[float, float, float, float] | None, delta: float
) -> Adjusted:
    """With a carry-over flagged, the comparison adjusted for it (perflab.analysis.carryover: both
    variants after the same predecessor) decides: the plain paired one is biased by the
    order and widened by it. The plain numbers are kept as ``unadjusted``."""
    plain = comparison.estimate
    if adjusted is None or plain is None:
        return comparison
    speedup, low, high, p = adjusted
    verdict = stats.verdict(low, high, delta)
    estimate = replace(
        plain,
        speedup=speedup,
        ci_low=low,
        ci_high=high,
        verdict=verdict,
        interval=CARRYOVER_INTERVAL,
        p_value=finite(p),
        half_width=max(high / speedup - 1, 1 - low / speedup),
        rounds_to_decide=(
            stats.rounds_to_narrow(speedup, low, high, plain.rounds, delta)
            if verdict == stats.INCONCLUSIVE
            else None
        ),
    )
    unadjusted = Unadjusted(
        speedup=plain.speedup,
        ci_low=plain.ci_low,
        ci_high=plain.ci_high,
        verdict=plain.verdict,
        interval=plain.interval,
        p_value=plain.p_value,
        half_width=plain.half_width,
    )
    return replace(comparison, estimate=estimate, unadjusted=unadjusted)


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


def as_sentinel(estimate: Estimate | None) -> Sentinel | None:
    """The A/A comparison's estimate with its noise floor; None without one."""
    if estimate is None:
        return None
    floor = max(estimate.ci_high - 1, 1 - estimate.ci_low)
    return Sentinel(estimate=estimate, noise_floor=floor)


def sentinel_findings(sentinel: Sentinel | None, delta: float) -> tuple[list[str], list[str]]:
    """What the A/A sentinel says about the method: (reasons the run is UNRELIABLE, health
    notes). Its interval wholly outside +-delta means identical code measured as
    different by more than the band: no verdict of the run can be trusted. An interval
    inside the band that excludes 1 is a bias smaller than the band: a note, with its
    size."""
    if sentinel is None:
        return [], []
    e = sentinel.estimate
    s, low, high = e.speedup, e.ci_low, e.ci_high
    aa = f"{s:.3f}x [{low:.3f}, {high:.3f}]"
    if e.verdict in (stats.FASTER, stats.SLOWER):
        return [
            f"the A/A sentinel (identical to its baseline) read {aa}, outside the band "
            f"+-{delta:.1%}: timings drifted or the machine was disturbed; do not trust "
            "the verdicts"
        ], []
    if low > 1 or high < 1:
        return [], [
            f"A/A bias: the sentinel read {aa}, which excludes 1 (inside the band "
            f"+-{delta:.1%}): every comparison may carry a bias of about {s - 1:+.1%}"
        ]
    return [], []


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


def adjust(comparisons: list[Comparison], alpha: float, delta: float) -> list[Comparison]:
    """Holm across the comparisons of the experiment (Benjamini-Hochberg for an
    exploratory grid); a FASTER/SLOWER whose adjusted p-value is not below alpha is
    downgraded to INCONCLUSIVE."""
    done = [c.estimate for c in comparisons if c.estimate is not None]
    if not done:
        return comparisons
    # a p-value without a number (None: NaN, see finite) is NaN to the adjustment too
    raw = [math.nan if e.p_value is None else e.p_value for e in done]
    exploratory = len(comparisons) > EXPLORATORY_COMPARISONS
    method = BENJAMINI_HOCHBERG if exploratory else HOLM
    adjusted = iter(stats.benjamini_hochberg(raw) if exploratory else stats.holm(raw))
    return [
        c if c.estimate is None else _adjusted(c, next(adjusted), method, alpha, delta)
        for c in comparisons
    ]


def _adjusted(c: Comparison, p: float, method: str, alpha: float, delta: float) -> Comparison:
    """``c`` with its adjusted p-value, downgraded to INCONCLUSIVE when that is not below
    alpha."""
    e = c.estimate
    adjusted = replace(c, p_adjusted=finite(p), adjustment=method)
    if e is None or e.verdict not in (stats.FASTER, stats.SLOWER) or not p >= alpha:
        return adjusted
    narrow = stats.rounds_to_narrow(e.speedup, e.ci_low, e.ci_high, e.rounds, delta)
    return replace(
        adjusted,
        estimate=replace(e, verdict=stats.INCONCLUSIVE, rounds_to_decide=narrow),
        note=f"not significant after {method} adjustment (p={p:.3g})",
    )


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
