"""Simulated experiments with known truth, to check perflab's statistics.

A simulated trial's cost is log-normal around its variant's true cost, plus the things
that make real machines hard: a machine state that wanders from trial to trial (AR(1)),
a steady drift, process-level offsets, and occasional outlier trials (a co-tenant woke
up). Trials run in rounds, interleaved in a shuffled order like perflab runs them, or
sequentially (all of A, then all of B) to show what interleaving buys. Everything is
seeded: the test suite runs small versions that can fail, benchmarks/ the full ones.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from perflab import stats


@dataclass(frozen=True)
class Machine:
    # per-trial log-scale noise (process placement, allocator layout, ...)
    sd_trial: float = 0.02
    # AR(1) coefficient of the machine state from one trial to the next
    ar_phi: float = 0.5
    # standard deviation of the machine state's innovations
    sd_state: float = 0.01
    # multiplicative drift per trial (0.002 = +0.2 % per trial)
    drift: float = 0.0
    # probability that a trial is an outlier, and how much slower it then is
    outlier_p: float = 0.0
    outlier_size: float = 0.3


def simulate(
    rng: random.Random, ratios: list[float], rounds: int, machine: Machine, interleaved: bool = True
) -> list[list[float]]:
    """Per-round costs (ns) of variants whose true speedups over the first are ``ratios``
    (ratios[0] is the baseline's own, 1.0)."""
    k = len(ratios)
    if interleaved:
        order = []
        for r in range(rounds):
            names = list(range(k))
            rng.shuffle(names)
            order += [(r, v) for v in names]
    else:
        order = [(r, v) for v in range(k) for r in range(rounds)]
    out = [[0.0] * rounds for _ in range(k)]
    state = 0.0
    for i, (r, v) in enumerate(order):
        state = machine.ar_phi * state + rng.gauss(0, machine.sd_state)
        log_cost = (
            math.log(1e6 / ratios[v])
            + state
            + rng.gauss(0, machine.sd_trial)
            + math.log1p(machine.drift) * i
        )
        if rng.random() < machine.outlier_p:
            log_cost += math.log1p(machine.outlier_size)
        out[v][r] = math.exp(log_cost)
    return out


def run_rounds(
    rng: random.Random, true_ratio: float, rounds: int, machine: Machine, interleaved: bool = True
) -> tuple[list[float], list[float]]:
    """Per-round costs of a baseline and a variant with true speedup ``true_ratio``."""
    base, var = simulate(rng, [1.0, true_ratio], rounds, machine, interleaved)
    return base, var


def one_experiment(
    rng: random.Random,
    true_ratio: float,
    rounds: int,
    machine: Machine,
    level: float = 0.95,
    delta: float = 0.0,
    interleaved: bool = True,
) -> tuple[str, stats.Effect]:
    base, var = run_rounds(rng, true_ratio, rounds, machine, interleaved)
    effect = stats.paired_effect(stats.paired_log_ratios(base, var), level)
    return stats.verdict(effect.low, effect.high, delta), effect


def sentinel_experiment(
    rng: random.Random,
    true_ratio: float,
    rounds: int,
    machine: Machine,
    level: float = 0.95,
    delta: float = 0.01,
) -> tuple[str, stats.Effect]:
    """perflab's full rule: a hidden A/A copy of the baseline runs in every round, and
    the band is max(delta, how far the A/A interval reaches from 1)."""
    base, var, copy = simulate(rng, [1.0, true_ratio, 1.0], rounds, machine)
    aa = stats.paired_effect(stats.paired_log_ratios(base, copy), level)
    band = max(delta, aa.high - 1, 1 - aa.low)
    effect = stats.paired_effect(stats.paired_log_ratios(base, var), level)
    return stats.verdict(effect.low, effect.high, band), effect


def sequential_experiment(
    rng: random.Random,
    true_ratio: float,
    machine: Machine,
    min_rounds: int,
    max_rounds: int,
    target: float,
    level: float = 0.95,
    delta: float = 0.0,
) -> tuple[str, stats.Effect]:
    """perflab's stopping rule: after min_rounds, stop once the stopping half-width
    (stats.stopping_half_width) is at most the target."""
    base, var = run_rounds(rng, true_ratio, max_rounds, machine)
    for n in range(min_rounds, max_rounds + 1):
        effect = stats.paired_effect(stats.paired_log_ratios(base[:n], var[:n]), level)
        if stats.stopping_half_width(effect) <= target:
            break
    return stats.verdict(effect.low, effect.high, delta), effect


@dataclass(frozen=True)
class Rates:
    experiments: int
    # share of experiments whose verdict was FASTER or SLOWER
    decided: float
    # share whose CI contained the true ratio
    coverage: float
    # mean of log(estimate / truth), as a relative bias
    bias: float


def rates(
    run: Callable[[random.Random], tuple[str, stats.Effect]],
    true_ratio: float,
    experiments: int,
    seed: int,
) -> Rates:
    rng = random.Random(seed)
    decided = covered = 0
    log_err = 0.0
    for _ in range(experiments):
        verdict, effect = run(rng)
        decided += verdict in (stats.FASTER, stats.SLOWER)
        covered += effect.low <= true_ratio <= effect.high
        log_err += math.log(effect.speedup / true_ratio)
    return Rates(
        experiments, decided / experiments, covered / experiments, math.expm1(log_err / experiments)
    )


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval for a rate observed as successes/trials."""
    from scipy.stats import beta

    alpha = 1 - level
    low = 0.0 if successes == 0 else float(beta.ppf(alpha / 2, successes, trials - successes + 1))
    high = (
        1.0
        if successes == trials
        else float(beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    )
    return low, high
