"""Simulated experiments with known truth, to measure perflab's error rates.

A simulated experiment runs perflab's whole method on made-up step times: rounds of
freshly shuffled variants plus the A/A sentinel, every trial warmed up under
perflab.analysis.steady's rule, the first trial of each configuration fixing the timed steps of
its later ones, the stopping rule of perflab.experiment.schedule, and the verdicts, Holm adjustment,
sentinel check and carry-over estimate of perflab.analysis.verdicts, called exactly as perflab
calls them. Only the step times are invented.

A step's time is its variant's true step time, perturbed by what makes real machines
hard (``Machine``): step-to-step noise, a per-process offset (placement, physical pages,
heap layout), a per-trial offset, a machine state that wanders from trial to trial
(AR(1)), a steady drift, outlier trials (a co-tenant woke up), a ramp at the start of
every trial (clocks rising, caches filling), decaying with time since the trial started,
and a carry-over into a trial that follows a heavy variant: a slowdown that decays the
same way (a GPU recovering from the power cap) and one that lasts the whole trial (a GPU
still hot).

Trials run as perflab runs them (schedule.isolation): each in a fresh process, or in
warm workers, one per variant, that serve schedule.trials_per_worker consecutive rounds
and are replaced together (a worker generation). A worker's offset is drawn once and
shared by all its trials, it pays the process start only once, the stopping rule is
judged only at generation ends, and the analysis takes generations as its units.
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

from perflab.analysis import carryover, stats, steady, verdicts
from perflab.analysis.sweep import ScheduleSettings
from perflab.config.devices import by_device
from perflab.config.schema import ScheduleConfig, TrialConfig
from perflab.formats.summary import Comparison, Sentinel


@dataclass(frozen=True)
class Machine:
    """How the simulated machine perturbs step times (log-scale standard deviations)."""

    # step-to-step noise inside a trial
    sd_step: float = 0.02
    # a per-trial offset: what changes from one trial to the next in the same process
    # (a layout pad shifting the temporaries, co-tenants, state); with a fresh process per
    # trial, also the placement and heap layout sd_worker does not model apart
    sd_trial: float = 0.012
    # a per-process offset, drawn once for a process's whole life: its placement,
    # physical pages and the heap layout of the model's tensors (a fixed heap layout moved
    # this project's convnet step by up to 15 %: ~0.05 on a layout-sensitive machine). A
    # warm worker brings it to all its trials; with a fresh process per trial it is just
    # more per-trial noise
    sd_worker: float = 0.0
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
    # the same for a later trial in a warm worker: the request's round trip and the record
    # (the ramp and carry-over start again with every trial: the worker sat idle while the
    # other variants ran)
    worker_startup_s: float = 0.02

    def process_sd(self) -> float:
        """The per-trial offset's spread with a fresh process per trial: the trial's and
        the process's parts together (sd_trial exactly when sd_worker is 0, so a machine
        without a per-process part draws the same numbers as it always has)."""
        return math.hypot(self.sd_trial, self.sd_worker)


@dataclass(frozen=True)
class SimVariant:
    # the true steady step time, s
    step_s: float
    # a heavy variant slows the trial after it (Machine.carry)
    heavy: bool = False


@dataclass
class Outcome:
    """One simulated experiment, seen as perflab reports it."""

    # per comparison (variant i+1 against variant 0), as summary.json holds it
    comparisons: list[Comparison]
    sentinel: Sentinel | None
    unreliable: bool
    biased: bool
    carryover_flags: int
    rounds: int
    stop: str
    # per variant: the timed steps its configuration's trials ran
    timed_steps: dict[int, int] = field(default_factory=dict)
    # rounds per independent unit of the analysis (a worker generation, or 1)
    rounds_per_unit: int = 1


def preset(name: str, cuda: bool = False) -> tuple[TrialConfig, ScheduleConfig]:
    """The trial and schedule settings of a shipped preset (conf/preset/NAME.yaml), with
    its ${perflab.by_device:...} sizes (e.g. schedule.trials_per_worker) resolved as perflab
    resolves them on a CPU, or with ``cuda`` on a GPU."""
    # perflab's own resolver, reading the root's cuda_defaults as it does in a real config
    OmegaConf.register_new_resolver("perflab.by_device", by_device, replace=True)
    text = resources.files("perflab.conf").joinpath("preset", f"{name}.yaml").read_text()
    merged = OmegaConf.merge(
        OmegaConf.structured({"trial": TrialConfig(), "schedule": ScheduleConfig()}),
        OmegaConf.create(text),
        {"cuda_defaults": cuda},
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
        startup_s: float,
    ) -> None:
        self.rng, self.variant, self.machine = rng, variant, machine
        self.offset, self.after_heavy = offset, after_heavy
        self.now_s = startup_s

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

    def stretch(self, bounds: steady.Bounds, group: int) -> list[int]:
        """As perflab.measure.steps.run_block runs a block within ``bounds`` (checked after
        every group), drawn at once: whole groups only; the samples' durations, ns."""
        start = self.now_s
        times = self.steps(-(-max(bounds.min_steps, 1) // group) * group)
        while bounds.min_s > times.sum() < bounds.max_s:
            more = math.ceil((bounds.min_s - float(times.sum())) / self.variant.step_s)
            times = np.concatenate([times, self.steps(-(-more // group) * group)])
        ends = np.cumsum(times)[group - 1 :: group]
        over = np.nonzero(ends >= bounds.max_s)[0]
        if len(over):  # max_s ran out first: the block ends with the group that crossed it
            times = times[: (int(over[0]) + 1) * group]
            self.now_s = start + float(ends[over[0]])
        if bounds.max_steps is not None:  # whole groups up to max_steps
            times = times[: max(group, bounds.max_steps - bounds.max_steps % group)]
        return [int(x * 1e9) for x in times.reshape(-1, group).sum(axis=1)]


def run_trial(
    rng: np.random.Generator,
    variant: SimVariant,
    machine: Machine,
    trial: TrialConfig,
    offset: float,
    after_heavy: bool,
    timed_steps: int | None,
    startup_s: float | None = None,
) -> tuple[float, int, steady.Warmup, int]:
    """A trial's cost (median step, ns), its timed steps, its warm-up and how many of
    the warm-up's samples opened the timed block; it starts
    ``startup_s`` into its clock (default: a fresh process's, machine.startup_s)."""
    start = machine.startup_s if startup_s is None else startup_s
    sim = _Trial(rng, variant, machine, offset, after_heavy, start)
    warm = steady.warm_up(
        sim.stretch,
        sim.clock,
        trial,
        choose_group=lambda _: 1,
    )
    kept = steady.last(warm.sample_ns, steady.kept_samples(warm, trial, timed_steps))
    kept_s = sum(kept) / 1e9
    samples = kept + sim.stretch(steady.timed_block(trial, timed_steps, len(kept), kept_s), 1)
    return float(np.median(samples)), len(samples), warm, len(kept)


@dataclass
class _Run:
    """The state of one simulated experiment as its trials run: the machine's wandering
    state, the live workers' offsets, the simulated clock and what was measured."""

    rng: np.random.Generator
    variants: Sequence[SimVariant]
    machine: Machine
    trial: TrialConfig
    # warm workers (schedule.isolation=worker), or a fresh process per trial
    workers: bool
    # per name (a variant's index, -1 the sentinel): the configuration it runs
    config: dict[int, int]
    costs: dict[int, dict[int, float]] = field(default_factory=dict)
    lengths: dict[int, int] = field(default_factory=dict)
    order: list[carryover.TrialInOrder] = field(default_factory=list)
    # per name: the offset its live worker brings to every trial (none: fresh processes)
    worker_offset: dict[int, float] = field(default_factory=dict)
    state: float = 0.0
    position: int = 0
    elapsed: float = 0.0

    def new_workers(self) -> None:
        """Every variant's (and the sentinel's) worker replaced: a new per-process offset
        each. Drawn with sd_worker 0 too, so that machines that differ only in sd_worker
        see the same draws for everything else."""
        if self.workers:
            sd = self.machine.sd_worker
            self.worker_offset = {n: sd * self.rng.standard_normal() for n in self.config}

    def one_trial(self, round_: int, name: int, fresh: bool) -> None:
        """One trial of ``name`` in round ``round_``; ``fresh``: the first of its process,
        which pays the process start, build and first call."""
        m = self.machine
        self.state = m.ar_phi * self.state + m.sd_state * self.rng.standard_normal()
        # a fresh process per trial draws its per-process part with every trial
        sd = m.sd_trial if self.workers else m.process_sd()
        offset = self.state + sd * self.rng.standard_normal()
        offset += self.worker_offset.get(name, 0.0)
        offset += math.log1p(m.drift) * self.position
        if self.rng.random() < m.outlier_p:
            offset += math.log1p(m.outlier_size)
        after = self.order[-1].config if self.order else None
        after_heavy = after is not None and self.variants[int(after)].heavy
        config = self.config[name]
        startup = m.startup_s if fresh else m.worker_startup_s
        cost, steps, warm, kept = run_trial(
            self.rng,
            self.variants[config],
            m,
            self.trial,
            offset,
            after_heavy,
            self.lengths.get(config),
            startup,
        )
        self.lengths.setdefault(config, steps)
        self.costs.setdefault(name, {})[round_] = cost
        self.order.append(
            carryover.TrialInOrder(round_, str(name), str(config), math.log(cost), after)
        )
        self.position += 1
        # the kept window's steps are in the warm-up's seconds already
        self.elapsed += startup + warm.seconds + (steps - kept) * cost / 1e9


def experiment(
    rng: np.random.Generator,
    variants: Sequence[SimVariant],
    machine: Machine,
    trial: TrialConfig,
    schedule: ScheduleConfig,
    analysis_rounds_per_unit: int | None = None,
) -> Outcome:
    """perflab's experiment on simulated steps: variants[0] is the baseline of every other
    variant, and (with schedule.sentinel) a hidden copy of it runs as the A/A sentinel.

    With schedule.isolation=worker, workers are replaced every trials_per_worker rounds
    and the stopping rule is judged only when a generation of workers ends (or at
    max_rounds). ``analysis_rounds_per_unit`` is a what-if for the final analysis only:
    1 with worker isolation analyses the same data as if the rounds were independent."""
    names = list(range(len(variants))) + ([-1] if schedule.sentinel else [])
    per_unit = ScheduleSettings.from_config(schedule).rounds_per_unit
    sim = _Run(
        rng,
        variants,
        machine,
        trial,
        workers=schedule.isolation == "worker",
        config={n: max(n, 0) for n in names},  # the sentinel (-1) runs variant 0's config
        costs={n: {} for n in names},
    )
    stop, rounds, unit_start = "", 0, 0.0
    for round_ in range(schedule.max_rounds):
        fresh = round_ % per_unit == 0
        if fresh:
            sim.new_workers()
            unit_start = sim.elapsed
        for name in rng.permutation(names):
            sim.one_trial(round_, int(name), fresh or not sim.workers)
        rounds = round_ + 1
        # the rule never stops before min_rounds: skipping it there changes nothing
        judged = rounds % per_unit == 0 or rounds == schedule.max_rounds
        if judged and rounds >= schedule.min_rounds:
            # the time budget is judged against the generation just run: the next one is
            # what the scheduler would commit to
            unit_s = sim.elapsed - unit_start
            stop = _stop(sim.costs, schedule, rounds, sim.elapsed, unit_s, per_unit)
            if stop:
                break
    return _analyse(
        sim.costs,
        sim.order,
        schedule,
        rounds,
        stop or "max rounds",
        sim.lengths,
        analysis_rounds_per_unit or per_unit,
    )


def _pairs(
    costs: dict[int, dict[int, float]],
) -> list[tuple[str, dict[int, float], dict[int, float], None]]:
    """(label, baseline costs, variant costs, sessions): a simulated run is one session."""
    return [(str(n), costs[0], c, None) for n, c in costs.items() if n != 0]


def _stop(
    costs: dict[int, dict[int, float]],
    schedule: ScheduleConfig,
    rounds: int,
    elapsed: float,
    unit_s: float,
    rounds_per_unit: int,
) -> str:
    """perflab.experiment.schedule's stopping rule on the simulated clock: the widest
    interval over units of ``rounds_per_unit`` rounds, and the time budget against the
    time the last unit took."""
    width, _ = stats.widest_half_width(_pairs(costs), schedule.confidence, rounds_per_unit)
    if rounds >= schedule.min_rounds and width <= schedule.target_half_width:
        return "precision reached"
    if rounds >= schedule.min_rounds and elapsed + unit_s > schedule.time_budget_s:
        return "time budget"
    return ""


def _analyse(
    costs: dict[int, dict[int, float]],
    order: list[carryover.TrialInOrder],
    schedule: ScheduleConfig,
    rounds: int,
    stop: str,
    lengths: dict[int, int],
    per_unit: int,
) -> Outcome:
    """The verdicts, sentinel check and carry-over adjustment of perflab.analysis.verdicts,
    with units of ``per_unit`` rounds, called as perflab.analysis.summarize calls them."""
    level, delta = schedule.confidence, schedule.delta

    def compare(base: int, var: int) -> Comparison:
        estimate = verdicts.compare(costs[base], costs[var], level, delta, per_unit)
        return Comparison(
            variant=str(var),
            baseline=str(base),
            cell={},
            metric=schedule.metric,
            delta=delta,
            health=[],
            numerics=None,
            estimate=estimate,
        )

    comparisons = [compare(0, n) for n in costs if n > 0]
    sentinel = verdicts.as_sentinel(compare(0, -1).estimate) if -1 in costs else None
    fit = carryover.fit(order, reference="0")
    flags = carryover.flagged(fit.carryovers(level)) if fit else []
    if fit is not None and flags:
        comparisons = [
            verdicts.adjust_for_carryover(c, fit.speedup("0", c.variant, level), delta)
            for c in comparisons
        ]
        if sentinel is not None:
            sentinel = verdicts.adjust_for_carryover(sentinel, fit.speedup("0", "-1", level), delta)
    comparisons = verdicts.adjust(comparisons, 1 - level, delta)
    unreliable, notes = verdicts.sentinel_findings(sentinel, delta)
    return Outcome(
        comparisons,
        sentinel,
        bool(unreliable),
        bool(notes),
        len(flags),
        rounds,
        stop,
        lengths,
        per_unit,
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
    analysis_rounds_per_unit: int | None = None,
) -> Tally:
    """Run ``experiments`` seeded experiments of a baseline against a variant whose true
    speedup is ``true_speedup`` and count what perflab said (with either isolation;
    ``analysis_rounds_per_unit``: experiment's what-if for the final analysis). The same
    seed gives the same step times whatever ``analysis_rounds_per_unit`` is."""
    rng = np.random.default_rng(seed)
    variants = [SimVariant(step_s, heavy_baseline), SimVariant(step_s / true_speedup)]
    verdicts: dict[str, int] = {}
    covered = unreliable = flags = rounds = 0
    log_err, widths = 0.0, []
    for _ in range(experiments):
        out = experiment(rng, variants, machine, trial, schedule, analysis_rounds_per_unit)
        c = out.comparisons[0]
        verdicts[c.verdict] = verdicts.get(c.verdict, 0) + 1
        if (e := c.estimate) is not None:
            covered += e.ci_low <= true_speedup <= e.ci_high
            log_err += math.log(e.speedup / true_speedup)
            widths.append(e.half_width)
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
