"""How often a gate on a verdict is wrong, from the noise of the comparison it judges.

A gate (``perflab-report --fail-on``, a pytest assertion) acts on a verdict: FASTER when
the Student t interval on the mean log-ratio of n independent units lies wholly above
log(1 + delta), SLOWER when wholly below log(1 - delta) (perflab.analysis.stats.verdict).
"Wholly above" is (mean - log(1 + delta)) / (s / sqrt(n)) > t, and for normal log-ratios
of true mean mu and standard deviation sd that statistic follows a noncentral t
distribution with n - 1 degrees of freedom and noncentrality
(mu - log(1 + delta)) * sqrt(n) / sd. Both rates are therefore exact, not simulated:

- the false-positive rate: an A/A pair (mu = 0) called FASTER or SLOWER;
- the power: a true effect of a given size called in its direction.

They are computed for the sd a run measured, so they describe the next run of the same
size on the same machine, not a guarantee about this one. A verdict given by the trimmed
or the carry-over model's interval, or downgraded by the Holm adjustment, follows another
rule; for it the rates are an approximation. tests/test_gate_rates.py checks them against
a seeded simulation and against the validation harness's measured rates
(benchmarks/RESULTS.md, "Statistics on simulated experiments").

Pure functions over numbers: no record types, so the report and the pytest plugin both
call them (rates_text reads the few numbers it needs from any comparison that has them,
perflab.formats.summary.Comparison among them, without importing it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from scipy import stats as sps

# Below this power a gate misses a real effect of the size asked about more often than it
# catches it: no better than a coin toss.
COIN_TOSS = 0.5


@dataclass(frozen=True)
class GateRates:
    """The error rates of a verdict gate at one comparison's noise and size (NaN: no
    interval, fewer than two units)."""

    # probability that a pair with no difference (A/A) is called FASTER or SLOWER
    false_positive: float
    # probability that a true effect of the size asked about is called in its direction
    power: float

    @property
    def coin_toss(self) -> bool:
        """The gate misses the effect at least as often as it catches it."""
        return self.power < COIN_TOSS


def log_effect(effect: float) -> float:
    """The true mean log-ratio of a relative effect on speed: +0.02 is a variant 2 %
    faster (speedup 1.02), -0.02 one 2 % slower (speedup 1 / 1.02), so that a slowdown and
    a speedup of the same size are the same distance from 1 on the log scale."""
    return math.copysign(math.log1p(abs(effect)), effect)


def verdict_odds(
    mean_log: float, sd_log_ratio: float, units: int, level: float, delta: float
) -> tuple[float, float]:
    """(P(FASTER), P(SLOWER)) for a comparison whose units' log-ratios have true mean
    ``mean_log`` and standard deviation ``sd_log_ratio``, judged with a ``level`` t
    interval over ``units`` units against the band +-``delta``."""
    up, down = math.log1p(delta), math.log1p(-delta)
    if units < 2 or not math.isfinite(sd_log_ratio) or sd_log_ratio < 0:
        return math.nan, math.nan
    if sd_log_ratio == 0:
        # no spread: the interval is the mean itself
        return float(mean_log > up), float(mean_log < down)
    dof, scale = units - 1, math.sqrt(units) / sd_log_ratio
    t = float(sps.t.ppf(0.5 + level / 2, dof))
    # both as upper tails: P(T < -t) of noncentrality nc is P(T > t) of -nc, and scipy's
    # nct.cdf gives NaN far in its lower tail (scipy 1.17: nct.cdf(-3.2, 3, 10))
    faster = float(sps.nct.sf(t, dof, (mean_log - up) * scale))
    slower = float(sps.nct.sf(t, dof, (down - mean_log) * scale))
    return faster, slower


def gate_error_rates(
    sd_log_ratio: float, units: int, level: float, delta: float, effect: float
) -> GateRates:
    """The false-positive rate and the power to detect a true ``effect`` (log_effect's
    sign convention: negative for a slowdown) of a gate on a comparison with ``units``
    independent units (rounds, or worker generations) whose log-ratios have standard
    deviation ``sd_log_ratio`` (perflab.formats.summary.Estimate.sd_log_ratio), a
    ``level`` interval and the band +-``delta``."""
    faster, slower = verdict_odds(0.0, sd_log_ratio, units, level, delta)
    hit = verdict_odds(log_effect(effect), sd_log_ratio, units, level, delta)
    return GateRates(faster + slower, hit[0] if effect >= 0 else hit[1])


def sd_from_interval(low: float, high: float, units: int, level: float) -> float:
    """The standard deviation of the log-ratios that a ``level`` t interval [low, high]
    over ``units`` units implies: for an interval that is not paired (Welch's, of two
    runs), the paired-equivalent noise, with ``units`` the smaller run's trials (fewer
    degrees of freedom than Welch's: the rates err on the safe side)."""
    if units < 2 or not 0 < low <= high:
        return math.nan
    t = float(sps.t.ppf(0.5 + level / 2, units - 1))
    return math.log(high / low) / 2 / t * math.sqrt(units)


def describe(rates: GateRates, effect: float, rounds: int) -> str:
    """The rates as a gate prints them: "false-positive rate 0.1 %, power 99 % for a
    2 % slowdown at 8 rounds", and "a coin toss" where the power is below one half."""
    if math.isnan(rates.power):
        return "error rates unknown: too few rounds for an interval"
    kind = "speedup" if effect >= 0 else "slowdown"
    text = (
        f"false-positive rate {_percent(rates.false_positive, 1)}, power "
        f"{_percent(rates.power, 0)} for a {abs(effect) * 100:.3g} % {kind} at {rounds} rounds"
    )
    return text + (": a coin toss" if rates.coin_toss else "")


def _percent(p: float, digits: int) -> str:
    """A probability in percent that never rounds a small risk to nothing or a near
    certainty to one: "< 0.1 %", "> 99 %"."""
    step = 10.0**-digits
    if 0 < p * 100 < step:
        return f"< {step:.{digits}f} %"
    if 100 - step < p * 100 < 100:
        return f"> {100 - step:.{digits}f} %"
    return f"{p * 100:.{digits}f} %"


class PairedNumbers(Protocol):
    """What the rates need of a paired estimate (perflab.formats.summary.Estimate)."""

    @property
    def sd_log_ratio(self) -> float: ...
    @property
    def units(self) -> int | None: ...
    @property
    def rounds(self) -> int: ...
    @property
    def ci_level(self) -> float: ...


class ComparisonNumbers(Protocol):
    """What the rates need of a comparison (perflab.formats.summary.Comparison)."""

    @property
    def estimate(self) -> PairedNumbers | None: ...
    @property
    def delta(self) -> float: ...


def rates_text(comparison: ComparisonNumbers, effect: float) -> str:
    """describe() for a paired comparison and a true ``effect`` (log_effect's sign: +
    a speedup, - a slowdown); "" without an estimate (NO DATA: no interval)."""
    e = comparison.estimate
    if e is None:
        return ""
    units = e.units or e.rounds
    rates = gate_error_rates(e.sd_log_ratio, units, e.ci_level, comparison.delta, effect)
    return describe(rates, effect, e.rounds)
