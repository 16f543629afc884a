"""Pure statistics over plain numbers: no torch, no I/O, nothing stored as truth.

The unit of analysis is the trial (one process), not the step: steps inside one process
share allocator layout, autotune choices and clocks, so pooling them as independent
samples gives confidence intervals far too narrow (22-72 % false verdicts in A/A
simulations: docs/design.md#statistics). Every estimate of an effect here is computed
from one number per trial, paired by round.

References: paired log-ratio and Student t (Kalibera & Jones, "Rigorous benchmarking in
reasonable time", 2013); Hodges-Lehmann estimator with the Wilcoxon signed-rank interval
(Hollander & Wolfe, "Nonparametric statistical methods", ch. 3); Holm (1979) and
Benjamini-Hochberg (1995) adjustments. Level shifts inside a trial: perflab.analysis.steady.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import stats as sps

FASTER, SLOWER, EQUIVALENT, INCONCLUSIVE = "FASTER", "SLOWER", "EQUIVALENT", "INCONCLUSIVE"

# A percentile is "bounded" by the data when at least this many samples lie beyond it;
# below that it is descriptive only (a p99 from 50 samples is the maximum, not a p99).
TAIL_SAMPLES_NEEDED = 10


# --- one trial -----------------------------------------------------------------------


def percentiles(values: Sequence[float] | np.ndarray, qs: Sequence[float]) -> list[float]:
    """Percentiles by linear interpolation between order statistics (numpy's default)."""
    if not len(values):
        return [float("nan")] * len(qs)
    return [float(v) for v in np.percentile(np.asarray(values, dtype=np.float64), qs)]


def per_step_ns(step_ns: Sequence[int], steps_per_sample: int) -> list[float]:
    return [v / steps_per_sample for v in step_ns]


# --- descriptive statistics of many steps ----------------------------------------------


@dataclass(frozen=True)
class Description:
    n: int
    mean: float
    std: float
    p50: float
    p90: float
    p95: float
    p99: float
    iqr: float
    mad: float
    cv: float
    # percentiles with at least TAIL_SAMPLES_NEEDED samples beyond them; the others are
    # descriptive only
    bounded: tuple[str, ...]


def describe(values: Sequence[float]) -> Description:
    x = np.asarray(values, dtype=np.float64)
    p25, p50, p75, p90, p95, p99 = percentiles(x, (25, 50, 75, 90, 95, 99))
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if len(x) > 1 else 0.0
    bounded = tuple(
        f"p{q}" for q in (50, 90, 95, 99) if len(x) * (100 - q) >= TAIL_SAMPLES_NEEDED * 100
    )
    return Description(
        n=len(x),
        mean=mean,
        std=std,
        p50=p50,
        p90=p90,
        p95=p95,
        p99=p99,
        iqr=p75 - p25,
        mad=float(np.median(np.abs(x - p50))),
        cv=std / mean if mean else float("nan"),
        bounded=bounded,
    )


def tukey_outliers(values: Sequence[float], k: float = 1.5) -> list[int]:
    """Indices outside [Q1 - k*IQR, Q3 + k*IQR]. Flagged, never dropped."""
    q1, q3 = percentiles(values, (25, 75))
    low, high = q1 - k * (q3 - q1), q3 + k * (q3 - q1)
    return [i for i, v in enumerate(values) if v < low or v > high]


def mad_outliers(values: Sequence[float] | np.ndarray, threshold: float = 3.5) -> list[int]:
    """Indices whose modified z-score |x - median| / (1.4826 MAD) exceeds threshold
    (Iglewicz & Hoaglin's 3.5). Flagged, never dropped."""
    x = np.asarray(values, dtype=np.float64)
    med = np.median(x)
    mad = 1.4826 * np.median(np.abs(x - med))
    if mad == 0:
        return []
    return [int(i) for i in np.nonzero(np.abs(x - med) / mad > threshold)[0]]


# --- paired comparison of two variants ------------------------------------------------


@dataclass(frozen=True)
class Effect:
    """A speedup S = cost_baseline / cost_variant (> 1 means the variant is faster)."""

    speedup: float
    low: float
    high: float
    level: float
    n: int
    # mean and standard deviation of the per-round log-ratios
    mean_log: float
    sd_log: float
    # two-sided p-value of "no difference" (S = 1)
    p_value: float

    @property
    def half_width(self) -> float:
        """Half the CI width, relative: the larger distance of an end from the estimate."""
        return max(self.high / self.speedup - 1, 1 - self.low / self.speedup)


@dataclass(frozen=True)
class Sessions:
    """Which session of a resumed sweep ran each round's trial, on both sides of a
    comparison (TrialRecord.session). A round is paired only when both of its trials ran
    in one session: a resumed session may run on a machine that has changed (another
    load, a driver update, a warmer room), and a round that sets a trial of one session
    against one of another measures that change with the variant. A round absent from a
    mapping counts as session 0, as every round of a sweep that was never resumed."""

    base: Mapping[int, int]
    variant: Mapping[int, int]

    def paired(self, round_: int) -> bool:
        return self.base.get(round_, 0) == self.variant.get(round_, 0)

    def across(self, rounds: Iterable[int]) -> list[int]:
        """The rounds, among ``rounds``, whose two trials ran in different sessions."""
        return sorted(r for r in rounds if not self.paired(r))

    def unit(self, round_: int, rounds_per_unit: int) -> tuple[int, int]:
        """The unit of a paired round: its session and its worker generation (a resumed
        session starts new workers, so a generation split by a resume is two units)."""
        return self.base.get(round_, 0), round_ // max(rounds_per_unit, 1)


def paired_log_ratios(base: Sequence[float], variant: Sequence[float]) -> list[float]:
    """d_r = ln(base_r) - ln(variant_r) per round: positive when the variant is faster."""
    return [math.log(b) - math.log(v) for b, v in zip(base, variant, strict=True)]


def paired_units(
    base: Mapping[int, float],
    variant: Mapping[int, float],
    rounds_per_unit: int = 1,
    sessions: Sessions | None = None,
) -> tuple[list[float], list[list[int]]]:
    """The independent units of a paired comparison and the rounds in each: the mean
    log-ratio (paired_log_ratios) over the paired rounds of each unit.

    A unit is ``rounds_per_unit`` consecutive rounds (round // rounds_per_unit): with warm
    workers (schedule.isolation=worker) every variant's worker serves that many rounds
    and is then replaced, so the rounds of one worker generation share whatever that pair
    of processes brought (placement, physical pages, heap layout) and are not
    independent of one another; generations are. Averaging within a generation and
    treating the generations as the sample is the cluster analysis that keeps the
    interval honest however large the worker-to-worker part of the variance is
    (docs/design.md#warm-workers). With 1 (a fresh process per trial) a unit is a round.
    With ``sessions`` (a resumed sweep), only rounds run within one session are paired
    (Sessions)."""
    sessions = sessions or Sessions({}, {})
    units: dict[tuple[int, int], list[int]] = {}
    for r in sorted(set(base) & set(variant)):
        if sessions.paired(r):
            units.setdefault(sessions.unit(r, rounds_per_unit), []).append(r)
    members = list(units.values())
    d = [
        float(np.mean(paired_log_ratios([base[r] for r in rs], [variant[r] for r in rs])))
        for rs in members
    ]
    return d, members


def _t_effect(mean: float, se: float, dof: float, level: float, n: int) -> Effect:
    """mean +- t(dof) * se on the log scale, exponentiated back to a speedup, with the
    two-sided p-value of mean = 0. By hand where scipy has no such test (the one-sample
    trimmed interval) or divides by a zero standard error (samples without spread)."""
    half = float(sps.t.ppf(0.5 + level / 2, dof)) * se
    p = float(2 * sps.t.sf(abs(mean) / se, dof)) if se > 0 else float(mean == 0)
    return Effect(
        math.exp(mean),
        math.exp(mean - half),
        math.exp(mean + half),
        level,
        n,
        mean,
        se * math.sqrt(n),
        p,
    )


def _t_test(test: Callable[..., Any], *samples: np.ndarray, **options: Any) -> Any:
    """A scipy t-test without its "precision loss" warning: scipy gives it for a sample
    whose values agree to ~15 digits (a repeated cost), where the interval is the same
    collapsed one perflab's own formula always gave, silently."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        return test(*samples, **options)


def _from_ttest(result: Any, mean: float, sd_log: float, level: float, n: int) -> Effect:
    """An Effect from a scipy t-test result on the log scale: scipy's interval (estimate
    + t quantile * its standard error) and p-value, exponentiated back to a speedup."""
    ci = result.confidence_interval(level)
    return Effect(
        math.exp(mean),
        math.exp(float(ci.low)),
        math.exp(float(ci.high)),
        level,
        n,
        mean,
        sd_log,
        float(result.pvalue),
    )


def paired_effect(d: Sequence[float], level: float = 0.95) -> Effect:
    """Student t interval on the mean log-ratio (scipy's one-sample t-test of mean 0, the
    paired t-test on log costs), exponentiated back to a speedup."""
    n = len(d)
    if n < 2:
        raise ValueError("a paired interval needs at least 2 rounds")
    x = np.asarray(d, dtype=np.float64)
    mean, sd = float(x.mean()), float(x.std(ddof=1))
    if not sd > 0:
        # identical log-ratios: scipy's statistic divides by zero, and its p-value is NaN
        # when they are all 0; the collapsed interval with p = 1 (0 when they are not 0)
        # is the limit perflab has always reported
        return _t_effect(mean, sd / math.sqrt(n), n - 1, level, n)
    return _from_ttest(_t_test(sps.ttest_1samp, x, popmean=0.0), mean, sd, level, n)


@lru_cache(maxsize=256)
def _signed_rank_cdf(n: int) -> tuple[float, ...]:
    """Exact null distribution of the Wilcoxon signed-rank statistic W+ for n pairs:
    cumulative P(W+ <= w) for w = 0 .. n(n+1)/2, by counting subsets of ranks."""
    counts = np.zeros(n * (n + 1) // 2 + 1, dtype=np.float64)
    counts[0] = 1.0
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return tuple(np.cumsum(counts) / 2.0**n)


def _signed_rank_critical(n: int, alpha: float) -> int:
    """The largest k with P(W+ < k) <= alpha/2: the k-th smallest and k-th largest Walsh
    averages bound a (1 - alpha) interval. Exact up to n = 60, normal beyond. By hand:
    scipy.stats.wilcoxon gives p-values, but neither this interval nor its critical value."""
    if n <= 60:
        cdf = _signed_rank_cdf(n)
        k = 0
        while k < len(cdf) and cdf[k] <= alpha / 2:
            k += 1
        return k
    mean, sd = n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    return max(0, int(math.floor(mean - float(sps.norm.ppf(1 - alpha / 2)) * sd)))


def hodges_lehmann(d: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Hodges-Lehmann speedup (median of Walsh averages of the log-ratios) and the
    distribution-free Wilcoxon signed-rank interval, as (estimate, low, high)."""
    x = np.asarray(d, dtype=np.float64)
    i, j = np.triu_indices(len(x))
    walsh = np.sort((x[i] + x[j]) / 2)
    k = _signed_rank_critical(len(x), 1 - level)
    if k == 0:  # too few rounds for this level: the interval is unbounded
        return math.exp(float(np.median(walsh))), 0.0, math.inf
    return (
        math.exp(float(np.median(walsh))),
        math.exp(float(walsh[k - 1])),
        math.exp(float(walsh[len(walsh) - k])),
    )


# Share trimmed from each end by the robust interval: with 10 rounds it sets aside the 2
# lowest and 2 highest log-ratios, so two rounds hit by a co-tenant cannot move it (Wilcox,
# "Introduction to robust estimation and hypothesis testing", ch. 4: 20 % is his default,
# with ~95 % of the t interval's efficiency on normal data).
TRIM = 0.2


def trimmed_effect(d: Sequence[float], level: float = 0.95, trim: float = TRIM) -> Effect:
    """Tukey-McLaughlin interval on the trimmed mean of the log-ratios (the one-sample
    form of Yuen's test): standard error from the winsorized spread, t with n - 2g - 1
    degrees of freedom, exponentiated back to a speedup. By hand: scipy's Yuen test
    (ttest_ind(trim=...)) is for two independent samples only."""
    x = np.sort(np.asarray(d, dtype=np.float64))
    n = len(x)
    g = int(math.floor(trim * n))
    if n - 2 * g < 2:
        raise ValueError("too few rounds for a trimmed interval")
    mean = float(x[g : n - g].mean())
    winsorized = np.clip(x, x[g], x[n - g - 1])
    se = float(winsorized.std(ddof=1)) / ((1 - 2 * g / n) * math.sqrt(n))
    return _t_effect(mean, se, n - 2 * g - 1, level, n)


def welch_effect(base: Sequence[float], variant: Sequence[float], level: float = 0.95) -> Effect:
    """Unpaired fallback: Welch's t interval on log trial costs (rounds not matched)."""
    a, b = np.log(np.asarray(base, np.float64)), np.log(np.asarray(variant, np.float64))
    n, mean = min(len(a), len(b)), float(a.mean() - b.mean())
    # only Effect.sd_log and the degenerate case need the standard error: the interval,
    # Welch-Satterthwaite degrees of freedom and p-value are scipy's
    se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    if not se > 0:
        # both samples constant (or one of one trial: NaN): scipy gives a NaN p-value where
        # the means agree; keep perflab's long-standing limit, as paired_effect does
        return _t_effect(mean, se, 1.0, level, n)
    welch = _t_test(sps.ttest_ind, a, b, equal_var=False)
    return _from_ttest(welch, mean, se * math.sqrt(n), level, n)


# The stopping rule judges precision with this upper confidence bound on the spread of
# the log-ratios, not with the spread itself: stopping when the sample spread happens to
# be small makes the reported interval too narrow. Simulated (benchmarks/
# validate_statistics.py, 2000 A/A experiments, min 10 rounds, target +-1 %): false
# verdicts 6.3 % and coverage 93.8 % with the plain spread, 5.2 % and 94.8 % with its
# 90 % upper bound.
STOPPING_SD_CONFIDENCE = 0.90


def stopping_half_width(effect: Effect, sd_confidence: float = STOPPING_SD_CONFIDENCE) -> float:
    """The relative CI half-width the stopping rule compares with its target: computed
    with a chi-square upper bound on the standard deviation of the log-ratios."""
    n = effect.n
    sd_upper = effect.sd_log * math.sqrt((n - 1) / float(sps.chi2.ppf(1 - sd_confidence, n - 1)))
    return math.expm1(float(sps.t.ppf(0.5 + effect.level / 2, n - 1)) * sd_upper / math.sqrt(n))


# No interval is computed, printed or judged before this many paired rounds: with two,
# the t quantile is 12.7 and the chi-square bound of the stopping rule explodes (a
# progress line once printed a half-width of +-1.7e15 %).
MIN_PAIRED_ROUNDS = 3


def widest_half_width(
    pairs: Sequence[tuple[str, Mapping[int, float], Mapping[int, float], Sessions | None]],
    level: float,
    rounds_per_unit: int = 1,
) -> tuple[float, str]:
    """The widest stopping half-width (stopping_half_width) over (label, baseline costs
    by round, variant costs by round, their sessions) pairs, and whose: infinity while a
    pair has fewer than MIN_PAIRED_ROUNDS paired units (paired_units), -1 when there is
    no pair."""
    worst, who = -1.0, ""
    for label, base, variant, sessions in pairs:
        d, _ = paired_units(base, variant, rounds_per_unit, sessions)
        if len(d) < MIN_PAIRED_ROUNDS:
            return math.inf, label
        width = stopping_half_width(paired_effect(d, level))
        if width > worst:
            worst, who = width, label
    return worst, who


def verdict(low: float, high: float, delta: float) -> str:
    """Four states against the practical band [1 - delta, 1 + delta]."""
    if low > 1 + delta:
        return FASTER
    if high < 1 - delta:
        return SLOWER
    if low >= 1 - delta and high <= 1 + delta:
        return EQUIVALENT
    return INCONCLUSIVE


def _margin(mean_log: float, delta: float) -> float:
    """How far a log-speedup sits from the nearest edge of the band it must clear: the
    band's edge beyond it, or, inside the band, the nearer edge (to prove EQUIVALENT)."""
    up, down = math.log(1 + delta), math.log(1 - delta)
    if mean_log > up:
        return mean_log - up
    if mean_log < down:
        return down - mean_log
    return min(mean_log - down, up - mean_log)


def rounds_to_decide(effect: Effect, delta: float, cap: int = 100_000) -> int | None:
    """Rounds likely needed (at the current mean and spread) for the interval to clear
    the nearest decision boundary; None when the estimate sits on a boundary."""
    sd, margin = effect.sd_log, _margin(effect.mean_log, delta)
    if margin <= 0:
        return None
    if sd == 0:
        return effect.n
    z = float(sps.norm.ppf(0.5 + effect.level / 2))
    n = max(effect.n, 2)
    for _ in range(20):  # fixed point: t's quantile depends on n
        t = float(sps.t.ppf(0.5 + effect.level / 2, max(n - 1, 1))) if n < 1000 else z
        needed = math.ceil((t * sd / margin) ** 2)
        if needed == n or needed > cap:
            break
        n = max(needed, 2)
    return None if needed > cap else max(needed, effect.n)


def rounds_to_narrow(speedup: float, low: float, high: float, n: int, delta: float) -> int | None:
    """Rounds likely needed for an interval of any kind, narrowing as 1/sqrt(rounds), to
    clear the nearest decision boundary; None when the estimate sits on a boundary."""
    half, margin = (math.log(high) - math.log(low)) / 2, _margin(math.log(speedup), delta)
    if margin <= 0:
        return None
    return max(n, math.ceil(n * (half / margin) ** 2))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control). By hand: scipy
    has Benjamini-Hochberg/Yekutieli (false_discovery_control) but no Holm."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (false discovery rate control): scipy's
    step-up min(1, min over j >= rank of p_(j) m / j). It refuses p-values outside [0, 1],
    NaN included, which the hand loop used to adjust silently."""
    return [float(p) for p in sps.false_discovery_control(np.asarray(p_values, np.float64))]


# --- variance ----------------------------------------------------------------------------


@dataclass(frozen=True)
class VarianceSplit:
    # variance of the per-trial log statistic that step noise inside trials explains
    within: float
    # the rest: trial-to-trial (process, placement, drift) variance
    between: float
    advice: str
    # with warm workers, the part of ``between`` that comes with the worker process
    # (placement, physical pages, heap layout of the built model); None without them
    worker: float | None = None


def variance_split(
    trials_log_steps: Sequence[Sequence[float]], workers: Sequence[Hashable] | None = None
) -> VarianceSplit:
    """Split the variance of per-trial mean log step time into what step noise within a
    trial explains (var/steps) and what is left between trials, with advice: more steps
    per trial shrink the first, only more rounds shrink the second. With ``workers`` (the
    worker each trial ran in, warm workers), the part of the second that workers bring is
    split off too, by one-way analysis of variance of the trial means (worker as a random
    effect): only more workers shrink it."""
    kept = [
        (t, w)
        for t, w in zip(trials_log_steps, workers or [None] * len(trials_log_steps), strict=True)
        if len(t) > 1
    ]
    means = [float(np.mean(t)) for t, _ in kept]
    if len(means) < 2:
        return VarianceSplit(float("nan"), float("nan"), "too few trials to split variance")
    within = float(np.mean([np.var(t, ddof=1) / len(t) for t, _ in kept]))
    between = max(float(np.var(means, ddof=1)) - within, 0.0)
    worker = _worker_variance(means, [w for _, w in kept]) if workers is not None else None
    if worker is not None:  # estimated apart, it can exceed the whole between-trial part
        worker = min(worker, between)
    if worker is not None and worker >= max(between - worker, within):
        advice = "worker-to-worker variance dominates: more workers (fewer trials per worker) help"
    elif between >= within:
        advice = "trial-to-trial variance dominates: more rounds help, longer trials do not"
    else:
        advice = "step noise within trials dominates: more steps per trial (trial.min_s) help"
    return VarianceSplit(within, between, advice, worker)


def _worker_variance(means: Sequence[float], workers: Sequence[Hashable]) -> float | None:
    """The worker component of the trial means' variance: (MS_between - MS_within) / n0,
    n0 the unbalanced design's effective group size; None without two workers and a
    worker with two trials."""
    groups: dict[Hashable, list[float]] = {}
    for m, w in zip(means, workers, strict=True):
        groups.setdefault(w, []).append(m)
    sizes = np.array([len(g) for g in groups.values()])
    n, k = int(sizes.sum()), len(groups)
    if k < 2 or n <= k:
        return None
    grand = float(np.mean(means))
    ms_between = sum(len(g) * (np.mean(g) - grand) ** 2 for g in groups.values()) / (k - 1)
    ms_within = sum(float(np.sum((np.asarray(g) - np.mean(g)) ** 2)) for g in groups.values()) / (
        n - k
    )
    n0 = (n - float(np.sum(sizes**2)) / n) / (k - 1)
    return max(float(ms_between - ms_within) / n0, 0.0)
