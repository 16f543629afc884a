"""What a verdict rests on, as a gate and a PR comment state it: the speedup, its interval,
the rounds, and the error rates a gate on it has at that noise
(perflab.analysis.gate_rates).

One value for both kinds of comparison a gate judges: a paired comparison of the sweep
(perflab.formats.summary.Estimate: its own spread of the log-ratios) and an unpaired one
of two runs (--against, --history: Welch's interval, whose width implies the noise).
"""

from __future__ import annotations

from dataclasses import dataclass

from perflab.analysis.gate_rates import GateRates, describe, gate_error_rates, sd_from_interval
from perflab.formats.summary import Estimate


@dataclass(frozen=True)
class Evidence:
    # speedup, baseline cost / variant cost (> 1: the variant is faster)
    speedup: float
    # the interval that gave the verdict
    ci_low: float
    ci_high: float
    # its confidence level
    level: float
    # the band the verdict was judged against
    delta: float
    # rounds behind it (paired), or the smaller run's trials (two runs)
    rounds: int
    # independent units the interval was computed from (worker generations, or rounds)
    units: int
    # standard deviation of the units' log-ratios (paired-equivalent for two runs)
    sd_log_ratio: float

    @property
    def effect(self) -> float:
        """The effect a gate's power is stated for: twice the band, the smallest effect
        the band lets a verdict catch with room to spare."""
        return 2 * self.delta

    def interval(self) -> str:
        """ "1.26x [1.21, 1.31]" """
        return f"{self.speedup:.3f}x [{self.ci_low:.3f}, {self.ci_high:.3f}]"

    def rates(self, direction: int = 1) -> GateRates:
        """The error rates of a gate on this verdict, for an effect of ``effect`` in
        ``direction`` (+1 a speedup, -1 a slowdown)."""
        return gate_error_rates(
            self.sd_log_ratio, self.units, self.level, self.delta, direction * self.effect
        )

    def rates_text(self, direction: int = 1) -> str:
        """ "false-positive rate 0.1 %, power 99 % for a 2 % slowdown at 8 rounds" """
        return describe(self.rates(direction), direction * self.effect, self.rounds)


def paired(estimate: Estimate, delta: float) -> Evidence:
    """A comparison of the sweep: its paired estimate and its band."""
    return Evidence(
        speedup=estimate.speedup,
        ci_low=estimate.ci_low,
        ci_high=estimate.ci_high,
        level=estimate.ci_level,
        delta=delta,
        rounds=estimate.rounds,
        units=estimate.units or estimate.rounds,
        sd_log_ratio=estimate.sd_log_ratio,
    )


def unpaired(
    speedup: float, low: float, high: float, level: float, delta: float, trials: int
) -> Evidence:
    """A comparison of two runs (Welch's interval over ``trials``, the smaller run's):
    the noise its width implies (gate_rates.sd_from_interval)."""
    return Evidence(
        speedup=speedup,
        ci_low=low,
        ci_high=high,
        level=level,
        delta=delta,
        rounds=trials,
        units=trials,
        sd_log_ratio=sd_from_interval(low, high, trials, level),
    )
