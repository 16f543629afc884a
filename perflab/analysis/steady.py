"""When is a trial warm? The warm-up rule, and level shifts inside a timed block.

Pure functions over step times (numpy and the trial settings), shared by the trial
process, which runs the warm-up, and by the simulations that measure how well the rule
works (perflab.analysis.simulation, benchmarks/validate_statistics.py).

**The warm-up rule** (docs/experiments.md, "Warm-up until steady"). After the minimum
warm-up (``trial.warmup_steps`` and ``trial.warmup_s``), warm-up goes on until the step
time is steady: the change between the medians of its last two windows, continued over
a span as long as the warm-up so far, is within ``trial.steady_tolerance`` (2 % by
default), or the change is within the two windows' own noise (two standard errors of the
difference of their medians); or until ``trial.warmup_max_s``. A window is a quarter of
the warm-up so far, at least 50 ms and 2 samples: two short windows of a long, slow ramp
(a GPU recovering from the power cap its previous trial hit) differ little, and the rule
must not stop while the steps are still far from their steady level. The window the rule
judged steady opens the timed block (``trial.keep_steady_window``, ``steady_window``):
on a step as long as this project's CPU convnet's, it is two of a trial's seven steps.

**Level shifts** inside a timed block are found with PELT on block medians of the log
step times (Killick, Fearnhead & Eckley, 2012); a trial with one is flagged "not steady".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from perflab.config.schema import TrialConfig

T = TypeVar("T")

# The smallest window spans at least 50 ms: clocks, power and temperature change with
# time, not with steps, and three 1 ms steps cannot show a ramp that 50 of them do...
MIN_WINDOW_NS = 50_000_000
# ...and at least 2 samples. Steps that long are few, costly (on this project's CPU the
# convnet step takes 90-180 ms, and each window more adds its steps to every trial), and
# noisy enough that the rule's noise term, not the window, decides.
MIN_WINDOW = 2
# Windows whose medians differ by less than this many standard errors are not told apart:
# the rule does not chase noise on a machine whose steps vary more than the tolerance.
NOISE_Z = 2.0
# sqrt(pi / 2): the standard error of the median of n normal samples is 1.2533 sd/sqrt(n)
MEDIAN_SE = math.sqrt(math.pi / 2)
# 1.4826 MAD estimates the standard deviation of normal data, robustly
MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class SteadyCheck:
    steady: bool
    # relative change of the latest window's median against the window before it
    change: float
    # the largest change still called steady: max(projected tolerance, the windows' noise)
    allowed: float


@dataclass(frozen=True)
class Bounds:
    """When a run of steps stops, checked after each sample: at ``max_steps`` (None: no
    cap of its own) or once ``max_s`` has passed, else once both ``min_steps`` and
    ``min_s`` are reached. The one rule of the timed block (perflab.measure.steps.
    run_block), the warm-up's stretches, their replay (Recorded) and the simulator's
    trials (perflab.analysis.simulation)."""

    min_steps: int
    max_steps: int | None
    min_s: float
    max_s: float

    def stop(self, steps: int, elapsed_ns: float) -> str | None:
        """Why the run stops after ``steps`` steps and ``elapsed_ns``; None: it goes on."""
        if self.max_steps is not None and steps >= self.max_steps:
            return "max_steps"
        if elapsed_ns >= self.max_s * 1e9:
            return "max_s"
        if steps >= self.min_steps and elapsed_ns >= self.min_s * 1e9:
            return "min_reached"
        return None

    def within(self, capacity: int, group: int) -> Bounds:
        """Capped at a timer's ``capacity`` (trial.max_steps) in whole groups of ``group``,
        as a trial caps each warm-up stretch."""
        bound = max(group, capacity - capacity % group)
        return Bounds(min(self.min_steps, bound), bound, self.min_s, self.max_s)


def timed_block(
    trial: TrialConfig, timed_steps: int | None, kept_steps: int, kept_s: float
) -> Bounds:
    """The timed block's bounds, less the kept warm-up window's steps and seconds: the
    step count fixed by an earlier trial of the configuration (trial.max_s still stops a
    trial that runs far slower than the one that fixed it), or trial.min_*/max_*."""
    if timed_steps is not None:
        steps = timed_steps - kept_steps
        return Bounds(steps, steps, 0.0, trial.max_s)
    return Bounds(
        max(1, trial.min_steps - kept_steps),
        trial.max_steps - kept_steps,
        max(0.0, trial.min_s - kept_s),
        trial.max_s,
    )


# Runs a stretch of warm-up within the bounds, one sample per ``group`` steps; returns
# the samples' durations in ns. The trial process runs real steps (perflab.measure.steps);
# the simulations draw them.
Stretch = Callable[[Bounds, int], list[int]]


@dataclass
class Warmup:
    """What a warm-up ran, and why it stopped."""

    # duration of each warm-up sample, ns, and the steps each covers
    sample_ns: list[int] = field(default_factory=list)
    sample_steps: list[int] = field(default_factory=list)
    seconds: float = 0.0
    # "steady" (the rule above), "cap" (trial.warmup_max_s first), "minimum" (tolerance 0: the rule
    # is off), "none" (no warm-up asked for)
    stop: str = "none"
    # steps per sample of the timed block: the fixed one, or chosen from the minimum
    steps_per_sample: int = 1

    def per_step_ns(self) -> list[float]:
        return [ns / n for ns, n in zip(self.sample_ns, self.sample_steps, strict=True)]

    def window(self) -> int:
        """Samples per window now: a quarter of those seen, at least MIN_WINDOW and at
        least MIN_WINDOW_NS of the latest samples."""
        n = len(self.sample_ns)
        recent = float(np.median(self.sample_ns[-MIN_WINDOW:])) if n else 1.0
        return max(MIN_WINDOW, n // 4, math.ceil(MIN_WINDOW_NS / max(recent, 1.0)))

    def check(self, tolerance: float) -> SteadyCheck | None:
        """The warm-up rule on the samples so far; None while there are too few for two
        windows."""
        n, w = len(self.sample_ns), self.window()
        if n < 2 * w:
            return None
        logs = np.log(np.asarray(self.per_step_ns()[n - 2 * w :], dtype=np.float64))
        m_before, m_latest = float(np.median(logs[:w])), float(np.median(logs[w:]))
        # step-to-step noise from successive differences, which a ramp hardly inflates
        spread = MAD_TO_SD * float(np.median(np.abs(np.diff(logs)))) / math.sqrt(2)
        noise = NOISE_Z * MEDIAN_SE * spread * math.sqrt(2 / w)
        change = m_latest - m_before
        # the change between the windows (their centres are w samples apart), continued
        # over a span as long as the warm-up so far (n samples), stays within tolerance
        allowed = max(math.log1p(tolerance) * w / n, noise)
        return SteadyCheck(abs(change) <= allowed, math.expm1(change), math.expm1(allowed))

    def samples_until_check(self) -> int:
        """How many more samples to run before the rule is asked again: what two windows
        still lack, or, once a check has failed, a fresh window's worth of new data."""
        w, n = self.window(), len(self.sample_ns)
        return 2 * w - n if n < 2 * w else w


def warm_up(
    stretch: Stretch,
    clock: Callable[[], int],
    trial: TrialConfig,
    *,
    choose_group: Callable[[list[float]], int],
    fixed_group: int | None = None,
) -> Warmup:
    """The minimum warm-up (trial.warmup_steps and warmup_s), then more until the rule
    says steady (within trial.steady_tolerance) or trial.warmup_max_s has passed.
    ``fixed_group``: the steps per sample fixed by an earlier trial; otherwise
    ``choose_group`` picks them from the minimum's step times."""
    min_steps, min_s, tolerance = trial.warmup_steps, trial.warmup_s, trial.steady_tolerance
    warm = Warmup(steps_per_sample=fixed_group or 1)
    if min_steps == 0 and min_s == 0 and tolerance == 0:
        return warm
    start, cap_ns = clock(), int(trial.warmup_max_s * 1e9)

    def run(bounds: Bounds, group: int) -> None:
        samples = stretch(bounds, group)
        warm.sample_ns.extend(samples)
        warm.sample_steps.extend([group] * len(samples))

    run(Bounds(max(min_steps, 1), None, min_s, trial.warmup_max_s), fixed_group or 1)
    if fixed_group is None:
        warm.steps_per_sample = choose_group(warm.per_step_ns())
    warm.stop = "minimum" if tolerance == 0 else ""
    while not warm.stop:
        result = warm.check(tolerance)
        left_s = (cap_ns - (clock() - start)) / 1e9
        if result is not None and result.steady:
            warm.stop = "steady"
        elif left_s <= 0:
            warm.stop = "cap"
        else:
            group = warm.steps_per_sample
            run(Bounds(warm.samples_until_check() * group, None, 0.0, left_s), group)
    warm.seconds = (clock() - start) / 1e9
    return warm


class OutOfSteps(Exception):
    """A recorded series ended before the warm-up or block served from it did."""


class Recorded:
    """Recorded step times (ns), served as if they ran now: a clock that advances by the
    steps handed out, warm-up stretches for warm_up, and timed blocks, taken as
    perflab.measure.steps.run_block takes them. For replaying the rule on real series
    (tests/test_steady.py, benchmarks/warmup_floor.py). ``max_steps``: the timer's
    capacity that caps each warm-up stretch in a trial (trial.max_steps), none if None."""

    def __init__(self, step_ns: Iterable[float], max_steps: int | None = None) -> None:
        self.steps, self.max_steps, self.now_ns = iter(step_ns), max_steps, 0.0

    def clock(self) -> int:
        """ns since the first step began. A trial's clock also counts the gaps between
        samples (readings), which records do not keep."""
        return int(self.now_ns)

    def stretch(self, bounds: Bounds, group: int) -> list[int]:
        """A warm-up stretch (Stretch), capped as perflab.measure.steps.warm_up caps it:
        at max_steps rounded down to whole groups."""
        return self.block(
            bounds if self.max_steps is None else bounds.within(self.max_steps, group), group
        )

    def block(self, bounds: Bounds, group: int) -> list[int]:
        """Whole groups, the bounds checked after each; the samples' durations, ns."""
        samples: list[int] = []
        steps, spent = 0, 0.0
        while True:
            sample = 0.0
            for _ in range(group):
                try:
                    sample += next(self.steps)
                except StopIteration:
                    raise OutOfSteps from None
            self.now_ns += sample
            samples.append(int(sample))
            steps, spent = steps + group, spent + sample
            if bounds.stop(steps, spent) is not None:
                return samples


def steady_window(warm: Warmup, min_steps: int, min_s: float, max_steps: int) -> int:
    """How many of the warm-up's last samples open the timed block
    (trial.keep_steady_window): the latest window, once the rule has judged it steady
    against the window before it, already stands at the level the block measures. Its
    latest samples are kept, of the block's own grouping, and never so many that they
    would meet the block's minimum (``min_steps`` and ``min_s``) on their own or leave
    no room under ``max_steps`` for one more sample: the block still runs, and a long
    warm-up's wide window does not reach back into its ramp. 0 when the warm-up stopped
    for another reason (the cap, the rule off)."""
    if warm.stop != "steady":
        return 0
    limit, min_ns, group = warm.window(), min_s * 1e9, warm.steps_per_sample
    kept = steps = ns = 0
    for sample_ns, sample_steps in zip(
        reversed(warm.sample_ns), reversed(warm.sample_steps), strict=True
    ):
        full = steps + sample_steps >= min_steps and ns + sample_ns >= min_ns
        no_room = steps + sample_steps + group > max_steps
        if kept == limit or sample_steps != group or full or no_room:
            break
        kept, steps, ns = kept + 1, steps + sample_steps, ns + sample_ns
    return kept


def kept_samples(warm: Warmup, trial: TrialConfig, timed_steps: int | None) -> int:
    """The warm-up samples that open a trial's timed block: none unless
    trial.keep_steady_window; under a later trial's fixed ``timed_steps``, or the
    trial's bounds."""
    if not trial.keep_steady_window:
        return 0
    if timed_steps is not None:
        return steady_window(warm, timed_steps, 0.0, timed_steps)
    return steady_window(warm, trial.min_steps, trial.min_s, trial.max_steps)


def last(values: list[T], n: int) -> list[T]:
    """The last n values; none for n = 0 (where values[-0:] would give them all)."""
    return values[len(values) - n :]


# --- level shifts inside a timed block --------------------------------------------------


def block_medians(values: Sequence[float], block: int = 10) -> list[float]:
    return [
        float(np.median(values[i : i + block])) for i in range(0, len(values) - block + 1, block)
    ]


def changepoints(
    series: Sequence[float], penalty: float | None = None, min_sigma: float = 0.005
) -> list[int]:
    """PELT for changes in mean under Gaussian noise; returns the indices where a new
    segment starts. Noise is estimated robustly from successive differences, so a step
    change does not inflate it. Default penalty 8 ln(n), stricter than BIC's 2 ln(n):
    timing noise is heavy-tailed, and a false "not steady" flag costs a user trust. On
    log step times the default min_sigma (0.5 %) means level shifts under ~1 % between
    halves of a trial are not reported."""
    x = np.asarray(series, dtype=np.float64)
    n = len(x)
    if n < 4:
        return []
    # Noise, robustly from successive differences; never below min_sigma, so that on a
    # very steady series a shift too small to matter is not flagged.
    sigma = max(MAD_TO_SD * float(np.median(np.abs(np.diff(x)))) / math.sqrt(2), min_sigma)
    z = (x - np.median(x)) / sigma
    beta = penalty if penalty is not None else 8 * math.log(n)
    s1 = np.concatenate([[0.0], np.cumsum(z)])
    s2 = np.concatenate([[0.0], np.cumsum(z * z)])

    def cost(a: int, b: int) -> float:  # sum of squared deviations of z[a:b]
        return float(s2[b] - s2[a] - (s1[b] - s1[a]) ** 2 / (b - a))

    best = [-beta] + [0.0] * n
    last = [0] * (n + 1)
    candidates = [0]
    for t in range(1, n + 1):
        costs = [best[s] + cost(s, t) + beta for s in candidates]
        i = int(np.argmin(costs))
        best[t], last[t] = costs[i], candidates[i]
        candidates = [s for s, c in zip(candidates, costs, strict=True) if c - beta <= best[t]]
        candidates.append(t)
    points, t = [], n
    while t > 0:
        t = last[t]
        if t > 0:
            points.append(t)
    return sorted(points)
