"""The method's verdicts, from per-round trial costs: the paired comparison of two
variants (an Estimate), the adjustments across the comparisons of an experiment (Holm,
Benjamini-Hochberg) and for a flagged carry-over, and what the A/A sentinel says of the
method. Pure functions over numbers and summary.json's types: perflab.analysis.summarize
applies them to a sweep's records, perflab.analysis.simulation to simulated ones
(docs/design.md has the reasons for each rule)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import TypeVar

from perflab.analysis import stats
from perflab.formats.summary import (
    Comparison,
    Estimate,
    Interval,
    Sentinel,
    Unadjusted,
    Welch,
    finite,
)

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


# --- across the comparisons -------------------------------------------------------------


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


# --- a carry-over ------------------------------------------------------------------------


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


# --- the A/A sentinel --------------------------------------------------------------------


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
