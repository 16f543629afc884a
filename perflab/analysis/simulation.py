"""Simulated experiments with known truth, to measure perflab's error rates.

A simulated experiment runs perflab's whole method on made-up step times: rounds of
freshly shuffled variants plus the A/A sentinel, every trial warmed up under
perflab.analysis.steady's rule, the first trial of each configuration fixing the timed steps of
its later ones, the stopping rule of perflab.experiment.schedule, and the verdicts, Holm adjustment,
sentinel check and carry-over estimate of perflab.analysis.summary, called exactly as perflab
calls them. Only the step times are invented.

A step's time is its variant's true step time, perturbed by what makes real machines
hard (``Machine``): step-to-step noise, a per-trial offset (the process's placement and
heap layout), a machine state that wanders from trial to trial (AR(1)), a steady drift,
outlier trials (a co-tenant woke up), a ramp at the start of every trial (clocks rising,
caches filling), decaying with time since the trial's process started, and a carry-over
into a trial that follows a heavy variant: a slowdown that decays the same way (a GPU
recovering from the power cap) and one that lasts the whole trial (a GPU still hot).
Everything is seeded: the same call gives the same numbers.
The test suite runs small versions that can fail; benchmarks/validate_statistics.py the
full ones.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
from omegaconf import OmegaConf
from scipy.stats import beta

from perflab.analysis import carryover, stats, steady
from perflab.analysis import summary as analysis
from perflab.config.schema import ScheduleConfig, TrialConfig


@dataclass(frozen=True)
class Machine:
    """How the simulated machine perturbs step times (log-scale standard deviations)."""

    # step-to-step noise inside a trial
    sd_step: float = 0.02
    # a per-trial offset: the process's placement, physical pages, heap layout
    sd_trial: float = 0.012
    # AR(1) machine state carried from one trial to the next, and its innovations
    ar_phi: float = 0.0
    sd_state: float = 0.0
    # multiplicative drift per trial (0.002 = +0.2 % per trial)
    drift: float = 0.0
    # probability that a trial is an outlier, and how much slower it then is
    outlier_p: float = 0.0
    outlier_size: float = 0.3
    # every trial starts this much slower, decaying with time constant ramp_tau_s
    ramp: float = 0.0
    ramp_tau_s: float = 0.05
    # a trial that follows a heavy variant starts this much slower, decaying with
    # time constant carry_tau_s (a GPU leaving the power cap), and stays carry_offset
    # slower for the whole trial (a GPU still hot from its predecessor)
    carry: float = 0.0
    carry_tau_s: float = 0.5
    carry_offset: float = 0.0
    # the trial's process start, build and first call, before the warm-up begins: the
    # ramp and the carry-over decay during it too
    startup_s: float = 0.1


@dataclass(frozen=True)
class SimVariant:
    # the true steady step time, s
    step_s: float
    # a heavy variant slows the trial after it (Machine.carry)
    heavy: bool = False


@dataclass
class Outcome:
    """One simulated experiment, seen as perflab reports it."""

    # per comparison (variant i+1 against variant 0): the comparison's summary fields
    comparisons: list[dict[str, Any]]
    sentinel: dict[str, Any] | None
    unreliable: bool
    biased: bool
    carryover_flags: int
    rounds: int
    stop: str
    # per variant: the timed steps its configuration's trials ran
    timed_steps: dict[int, int] = field(default_factory=dict)


def preset(name: str) -> tuple[TrialConfig, ScheduleConfig]:
    """The trial and schedule settings of a shipped preset (conf/preset/NAME.yaml)."""
    text = resources.files("perflab.conf").joinpath("preset", f"{name}.yaml").read_text()
    merged = OmegaConf.merge(
        OmegaConf.structured({"trial": TrialConfig(), "schedule": ScheduleConfig()}),
        OmegaConf.create(text),
    )
    return OmegaConf.to_object(merged.trial), OmegaConf.to_object(merged.schedule)  # type: ignore[return-value]


class _Trial:
    """One simulated trial process: a clock, and steps drawn as the machine would run them."""

    def __init__(
        self,
        rng: np.random.Generator,
        variant: SimVariant,
        machine: Machine,
        offset: float,
        after_heavy: bool,
    ) -> None:
        self.rng, self.variant, self.machine = rng, variant, machine
        self.offset, self.after_heavy = offset, after_heavy
        self.now_s = machine.startup_s

    def clock(self) -> int:
        return int(self.now_s * 1e9)

    def steps(self, n: int) -> np.ndarray:
        """The next n step times, s."""
        m, step = self.machine, self.variant.step_s
        t = self.now_s + step * np.arange(n)
        slow = 1 + m.ramp * np.exp(-t / m.ramp_tau_s)
        if self.after_heavy:
            slow += m.carry_offset + m.carry * np.exp(-t / m.carry_tau_s)
        times = step * slow * np.exp(self.offset + m.sd_step * self.rng.standard_normal(n))
        self.now_s += float(times.sum())
        return times

    def stretch(self, steps: int, group: int, min_s: float, max_s: float) -> list[int]:
        """As perflab.measure.steps.run_block: at least ``steps`` and ``min_s``, at most ``max_s``
        (checked after every group), whole groups only; the samples' durations, ns."""
        start = self.now_s
        times = self.steps(-(-max(steps, 1) // group) * group)
        while min_s > times.sum() < max_s:
            more = math.ceil((min_s - float(times.sum())) / self.variant.step_s)
            times = np.concatenate([times, self.steps(-(-more // group) * group)])
        ends = np.cumsum(times)[group - 1 :: group]
        over = np.nonzero(ends >= max_s)[0]
        if len(over):  # max_s ran out first: the block ends with the group that crossed it
            times = times[: (int(over[0]) + 1) * group]
            self.now_s = start + float(ends[over[0]])
        return [int(x * 1e9) for x in times.reshape(-1, group).sum(axis=1)]


def run_trial(
    rng: np.random.Generator,
    variant: SimVariant,
    machine: Machine,
    trial: TrialConfig,
    offset: float,
    after_heavy: bool,
    timed_steps: int | None,
) -> tuple[float, int, steady.Warmup]:
    """A trial's cost (median step, ns), its timed steps and its warm-up."""
    sim = _Trial(rng, variant, machine, offset, after_heavy)
    warm = steady.warm_up(
        sim.stretch,
        sim.clock,
        min_steps=trial.warmup_steps,
        min_s=trial.warmup_s,
        max_s=trial.warmup_max_s,
        tolerance=trial.steady_tolerance,
        choose_group=lambda _: 1,
    )
    if timed_steps is None:
        samples = sim.stretch(trial.min_steps, 1, trial.min_s, trial.max_s)
        samples = samples[: trial.max_steps]
    else:
        samples = sim.stretch(timed_steps, 1, 0.0, trial.max_s)[:timed_steps]
    return float(np.median(samples)), len(samples), warm


def experiment(
    rng: np.random.Generator,
    variants: Sequence[SimVariant],
    machine: Machine,
    trial: TrialConfig,
    schedule: ScheduleConfig,
) -> Outcome:
    """perflab's experiment on simulated steps: variants[0] is the baseline of every other
    variant, and (with schedule.sentinel) a hidden copy of it runs as the A/A sentinel."""
    names = list(range(len(variants))) + ([-1] if schedule.sentinel else [])
    config = {n: max(n, 0) for n in names}  # the sentinel (-1) runs variant 0's config
    costs: dict[int, dict[int, float]] = {n: {} for n in names}
    lengths: dict[int, int] = {}
    order: list[carryover.TrialInOrder] = []
    state, position, elapsed, stop, rounds = 0.0, 0, 0.0, "max rounds", 0
    for round_ in range(schedule.max_rounds):
        round_start = elapsed
        for name in rng.permutation(names):
            name = int(name)
            state = machine.ar_phi * state + machine.sd_state * rng.standard_normal()
            offset = state + machine.sd_trial * rng.standard_normal()
            offset += math.log1p(machine.drift) * position
            if rng.random() < machine.outlier_p:
                offset += math.log1p(machine.outlier_size)
            after = order[-1].config if order else None
            after_heavy = after is not None and variants[int(after)].heavy
            cost, steps, warm = run_trial(
                rng,
                variants[config[name]],
                machine,
                trial,
                offset,
                after_heavy,
                lengths.get(config[name]),
            )
            lengths.setdefault(config[name], steps)
            costs[name][round_] = cost
            order.append(
                carryover.TrialInOrder(round_, str(name), str(config[name]), math.log(cost), after)
            )
            position += 1
            elapsed += machine.startup_s + warm.seconds + steps * cost / 1e9
        rounds = round_ + 1
        stop = _stop(costs, schedule, rounds, elapsed, elapsed - round_start)
        if stop:
            break
    return _analyse(costs, order, schedule, rounds, stop or "max rounds", lengths)


def _pairs(
    costs: dict[int, dict[int, float]],
) -> list[tuple[str, dict[int, float], dict[int, float]]]:
    return [(str(n), costs[0], c) for n, c in costs.items() if n != 0]


def _stop(
    costs: dict[int, dict[int, float]],
    schedule: ScheduleConfig,
    rounds: int,
    elapsed: float,
    round_s: float,
) -> str:
    """perflab.experiment.schedule's stopping rule on the simulated clock."""
    width, _ = stats.widest_half_width(_pairs(costs), schedule.confidence)
    if rounds >= schedule.min_rounds and width <= schedule.target_half_width:
        return "precision reached"
    if rounds >= schedule.min_rounds and elapsed + round_s > schedule.time_budget_s:
        return "time budget"
    return ""


def _analyse(
    costs: dict[int, dict[int, float]],
    order: list[carryover.TrialInOrder],
    schedule: ScheduleConfig,
    rounds: int,
    stop: str,
    lengths: dict[int, int],
) -> Outcome:
    level, delta = schedule.confidence, schedule.delta
    comparisons = [
        {**(analysis.compare(costs[0], costs[n], level, delta) or {"verdict": "NO DATA"})}
        for n in costs
        if n > 0
    ]
    sentinel = analysis.compare(costs[0], costs[-1], level, delta) if -1 in costs else None
    fit = carryover.fit(order, reference="0")
    flags = carryover.flagged(fit.carryovers(level)) if fit else []
    if fit is not None and flags:
        for n, c in zip((n for n in costs if n != 0), [*comparisons, sentinel], strict=False):
            if c is not None:
                analysis.adjust_for_carryover(c, fit.speedup("0", str(n), level), delta)
    analysis.adjust(comparisons, 1 - level, delta)
    unreliable, notes = analysis.sentinel_findings(sentinel, delta)
    return Outcome(
        comparisons, sentinel, bool(unreliable), bool(notes), len(flags), rounds, stop, lengths
    )


@dataclass(frozen=True)
class Tally:
    """Verdicts of many simulated experiments of one comparison with a known truth."""

    experiments: int
    verdicts: dict[str, int]
    # experiments whose interval held the true speedup
    covered: int
    # mean of log(estimate / truth), as a relative bias
    bias: float
    unreliable: int
    carryover_flags: int
    mean_rounds: float
    # median relative half-width of the intervals
    median_half_width: float

    def count(self, *verdicts: str) -> int:
        return sum(self.verdicts.get(v, 0) for v in verdicts)


def tally(
    true_speedup: float,
    machine: Machine,
    trial: TrialConfig,
    schedule: ScheduleConfig,
    experiments: int,
    seed: int,
    step_s: float = 0.01,
    heavy_baseline: bool = False,
) -> Tally:
    """Run ``experiments`` seeded experiments of a baseline against a variant whose true
    speedup is ``true_speedup`` and count what perflab said."""
    rng = np.random.default_rng(seed)
    variants = [SimVariant(step_s, heavy_baseline), SimVariant(step_s / true_speedup)]
    verdicts: dict[str, int] = {}
    covered = unreliable = flags = rounds = 0
    log_err, widths = 0.0, []
    for _ in range(experiments):
        out = experiment(rng, variants, machine, trial, schedule)
        c = out.comparisons[0]
        verdicts[c["verdict"]] = verdicts.get(c["verdict"], 0) + 1
        if "speedup" in c:
            covered += c["ci_low"] <= true_speedup <= c["ci_high"]
            log_err += math.log(c["speedup"] / true_speedup)
            widths.append(c["half_width"])
        unreliable += out.unreliable
        flags += out.carryover_flags
        rounds += out.rounds
    return Tally(
        experiments,
        dict(sorted(verdicts.items())),
        covered,
        math.expm1(log_err / experiments),
        unreliable,
        flags,
        rounds / experiments,
        float(np.median(widths)) if widths else math.nan,
    )


def with_fields(obj: Any, **changes: Any) -> Any:
    """A copy of a config dataclass with some fields changed (for what-if runs)."""
    return dataclasses.replace(obj, **changes)


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval for a rate observed as successes/trials.

    Its ends are beta quantiles in closed form, not scipy's
    binomtest(...).proportion_ci(method="exact"): that one finds the same ends by root
    search (brentq, xtol 2e-12) and strays from them by up to ~5e-13."""
    alpha = 1 - level
    low = 0.0 if successes == 0 else float(beta.ppf(alpha / 2, successes, trials - successes + 1))
    high = (
        1.0
        if successes == trials
        else float(beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    )
    return low, high
