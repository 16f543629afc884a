"""The warm-up rule and the level-shift detector (perflab.analysis.steady), on made-up step series
and on step series recorded on an NVIDIA H100 (tests/fixtures/h100). No torch, no timing."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from perflab.analysis import steady
from perflab.config.schema import TrialConfig

H100 = Path(__file__).resolve().parent / "fixtures" / "h100"


def warm(
    series: Iterator[int],
    group: tuple[Callable[[list[float]], int], int | None] = (lambda _: 1, None),
    **rule: float,
) -> steady.Warmup:
    """The warm-up rule over a series; ``group``: (choose_group, fixed_group)."""
    replay = steady.Recorded(series)
    settings = {"min_steps": 5, "min_s": 0.5, "max_s": 5.0, "tolerance": 0.02, **rule}
    trial = TrialConfig(
        warmup_steps=int(settings["min_steps"]),
        warmup_s=settings["min_s"],
        warmup_max_s=settings["max_s"],
        steady_tolerance=settings["tolerance"],
    )
    return steady.warm_up(
        replay.stretch, replay.clock, trial, choose_group=group[0], fixed_group=group[1]
    )


def noisy(level_ns: float, sd: float, seed: int = 0) -> Iterator[int]:
    rng = random.Random(seed)
    while True:
        yield int(level_ns * math.exp(rng.gauss(0, sd)))


def ramp(level_ns: float, extra: float, tau_s: float, sd: float, seed: int = 0) -> Iterator[int]:
    """Steps that start ``extra`` slower and approach ``level_ns`` with time constant tau."""
    rng, t = random.Random(seed), 0.0
    while True:
        step = level_ns * (1 + extra * math.exp(-t / tau_s)) * math.exp(rng.gauss(0, sd))
        t += step / 1e9
        yield int(step)


def test_steady_steps_end_the_warm_up_at_its_minimum():
    w = warm(noisy(10e6, 0.01))
    assert w.stop == "steady" and 0.5 <= w.seconds < 0.7
    assert sum(w.sample_steps) == len(w.sample_ns) >= 50


def test_noisy_cpu_steps_are_not_chased_beyond_their_noise():
    # 90 ms steps with 5 % noise (this project's CPU): the windows' own noise is far above
    # the tolerance, so the rule stops as soon as it has two windows
    w = warm(noisy(90e6, 0.05), min_steps=2, min_s=0.1)
    assert w.stop == "steady" and sum(w.sample_steps) <= 9


@pytest.mark.parametrize("tau_s", [0.2, 0.5, 1.0])
def test_a_ramp_is_followed_until_little_of_it_is_left(tau_s):
    # 30 % slower at first, GPU-like 0.5 % noise: stop only when the remaining slowdown is
    # small, however slow the ramp (within the cap)
    level = 10e6
    w = warm(ramp(level, 0.3, tau_s, 0.005))
    left = 0.3 * math.exp(-w.seconds / tau_s)
    assert w.stop in ("steady", "cap") and left < 0.01, (w.stop, w.seconds, left)
    assert w.seconds > 2 * tau_s


def test_steps_that_keep_slowing_down_reach_the_cap():
    creep = (int(10e6 * (1 + 0.001 * i)) for i in range(10**6))
    w = warm(creep, max_s=2.0)
    assert w.stop == "cap" and 2.0 <= w.seconds < 2.1


def test_tolerance_zero_keeps_only_the_minimum():
    w = warm(ramp(10e6, 0.3, 1.0, 0.005), tolerance=0.0)
    assert w.stop == "minimum" and 0.5 <= w.seconds < 0.7


def test_a_fixed_group_times_the_warm_up_in_samples_of_that_many_steps():
    # choose_group is not asked: the group is fixed
    w = warm(noisy(100e3, 0.01), (lambda _: 99, 5), min_steps=2, min_s=0.1, max_s=2.0)
    assert w.steps_per_sample == 5 and set(w.sample_steps) == {5}
    assert w.per_step_ns()[0] == pytest.approx(100e3, rel=0.05)


def test_the_group_is_chosen_from_the_minimum_warm_up_when_not_fixed():
    seen: list[int] = []

    def choose(per_step: list[float]) -> int:
        seen.append(len(per_step))
        return 5

    w = warm(noisy(100e3, 0.01), (choose, None), min_steps=2, min_s=0.0, max_s=2.0)
    assert w.steps_per_sample == 5 and seen and w.sample_steps[0] == 1
    assert w.sample_steps[-1] == 5  # what comes after the minimum is grouped


def _h100_series(sweep: str, variant: str, round_: int) -> list[int]:
    path = H100 / sweep / variant / "trials" / f"r{round_:03d}.json"
    samples = json.loads(path.read_text())["samples"]
    return samples["warmup_step_ns"] + samples["step_ns"]


def test_h100_fp32_steps_are_steady_at_the_minimum():
    # the GPU-bound transformer step in fp32 (56.9 ms): steady after the minimum warm-up
    for round_ in range(8):
        w = warm(iter(_h100_series("amp_gpu_warmup0.5s", "1", round_)))
        assert w.stop == "steady" and len(w.sample_ns) <= 12


def test_h100_bf16_steps_that_rose_through_the_trial_are_never_called_steady():
    # round 0 of the bf16 variant: steps went from 8.8 ms to ~20 ms through the warm-up and
    # the timed block (the block read 16.4 ms; steady bf16 steps are 8.9 ms). Replayed, the
    # rule never calls the series steady: perflab would have warmed up further.
    series = _h100_series("amp_gpu_warmup0.5s", "0", 0)
    with pytest.raises(steady.OutOfSteps):
        warm(iter(series), max_s=60.0)


def test_a_recorded_block_keeps_run_blocks_bounds() -> None:
    # whole groups, the bounds checked after each: both minimums, or a maximum first
    def block(min_steps: int, max_steps: int, min_s: float, max_s: float) -> list[int]:
        return steady.Recorded([10e6] * 100).block(
            steady.Bounds(min_steps, max_steps, min_s, max_s), 2
        )

    assert block(3, 50, 0.0, 10.0) == [20_000_000] * 2  # 3 steps: two groups of two
    assert block(1, 50, 0.1, 10.0) == [20_000_000] * 5  # 0.1 s: five groups
    assert len(block(1, 6, 1.0, 10.0)) == 3  # max_steps before min_s
    assert len(block(50, 100, 0.0, 0.05)) == 3  # max_s before min_steps


def test_a_recorded_stretch_is_capped_at_the_timers_capacity_in_whole_groups() -> None:
    # perflab.measure.steps.warm_up: max(group, max_steps - max_steps % group)
    assert (
        len(
            steady.Recorded([10e6] * 100, max_steps=7).stretch(
                steady.Bounds(50, None, 0.0, 10.0), 2
            )
        )
        == 3
    )


# --- level shifts inside a timed block --------------------------------------------------


def test_changepoints_find_a_level_shift_and_not_noise():
    rng = random.Random(1)
    flat = [rng.gauss(0, 0.02) for _ in range(60)]
    shifted = flat[:30] + [x + 0.2 for x in flat[30:]]
    assert steady.changepoints(flat) == []
    assert steady.changepoints(shifted) == [30]


def test_changepoint_false_flags_on_stationary_noise_are_rare():
    flagged = sum(
        bool(steady.changepoints([random.Random(s).gauss(0, 1) for _ in range(40)]))
        for s in range(100)
    )
    assert flagged <= 5


# --- the steady window that opens the timed block (trial.keep_steady_window) -------------


def test_the_steady_window_opens_the_block_with_its_latest_samples():
    w = warm(noisy(100e6, 0.01))  # 100 ms steps: two-sample windows
    assert w.stop == "steady" and w.window() == 2
    # the block needs 3 steps: both samples of the window are kept, one step is left
    assert steady.steady_window(w, min_steps=3, min_s=0.0, max_steps=5000) == 2
    # it never meets the block's minimum on its own: the block still runs a sample
    assert steady.steady_window(w, min_steps=2, min_s=0.0, max_steps=5000) == 1
    assert steady.steady_window(w, min_steps=1, min_s=0.0, max_steps=5000) == 0
    # 0.15 s are met by the window's two 100 ms samples: one is kept
    assert steady.steady_window(w, min_steps=1, min_s=0.15, max_steps=5000) == 1


def test_only_a_window_judged_steady_is_kept():
    capped = warm((int(10e6 * (1 + 0.001 * i)) for i in range(10**6)), max_s=2.0)
    assert capped.stop == "cap" and steady.steady_window(capped, 100, 1.0, 5000) == 0
    rule_off = warm(noisy(100e6, 0.01), tolerance=0.0)
    assert rule_off.stop == "minimum" and steady.steady_window(rule_off, 100, 1.0, 5000) == 0


def test_a_long_warm_up_keeps_no_more_than_the_block_needs():
    # a 1 ms step ramping for a while: the window (a quarter of the warm-up) is wide,
    # and only its latest samples, short of the block's minimum, are kept
    w = warm(ramp(1e6, 0.3, 0.3, 0.002), min_s=0.1)
    assert w.stop == "steady" and w.window() > 20
    assert steady.steady_window(w, min_steps=5, min_s=0.0, max_steps=5000) == 4
    assert steady.steady_window(w, min_steps=1, min_s=0.010, max_steps=5000) == 9


def test_the_kept_window_leaves_room_under_max_steps():
    # 10 us steps: the 50 ms window holds 5000 samples; under trial.max_steps=100 the
    # block must still have room for a sample of its own
    w = warm(noisy(10e3, 0.001), min_s=0.2)
    assert w.stop == "steady" and w.window() >= 5000
    assert steady.steady_window(w, min_steps=1000, min_s=0.0, max_steps=100) == 99


def test_samples_of_another_grouping_are_not_kept():
    # the minimum ran one step per sample, the rest in groups of 4: a window reaching back
    # into the one-step samples keeps only the grouped ones
    w = warm(noisy(1e6, 0.001), (lambda _: 4, None), min_steps=2, min_s=0.0)
    assert w.steps_per_sample == 4 and w.stop == "steady"
    grouped = len(w.sample_steps) - w.sample_steps.index(4)
    kept = steady.steady_window(w, min_steps=10_000, min_s=0.0, max_steps=5000)
    assert 0 < kept <= min(grouped, w.window())
    assert all(n == 4 for n in w.sample_steps[len(w.sample_steps) - kept :])
