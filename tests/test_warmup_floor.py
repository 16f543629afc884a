"""benchmarks/warmup_floor.py replays perflab's warm-up rule over recorded steps
(steady.Recorded): on a flat series every floor lands on the settled level, on a slow
ramp a short floor lands above it, later trials keep the length the first fixed, and
records of both schemas become one series of steps. No timing."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from benchmark_scripts import load

from perflab.analysis import steady
from perflab.analysis.simulation import preset

warmup_floor = load("warmup_floor")

TRIAL = preset("default")[0]
STEP_NS = 10e6


def series(ramp: float, tau_s: float, seconds: float = 3.0, seed: int = 0) -> list[float]:
    """10 ms steps, 0.5 % noise, slowed by ramp * exp(-t / tau) at time t."""
    rng, steps, now = np.random.default_rng(seed), [], 0.0
    while now < seconds * 1e9:
        ns = (
            STEP_NS
            * (1 + ramp * math.exp(-now / 1e9 / tau_s))
            * math.exp(0.005 * rng.standard_normal())
        )
        steps.append(ns)
        now += ns
    return steps


def excess(steps: list[float], floor: float, settled_after_s: float = 2.0) -> float:
    trial = replace(TRIAL, warmup_s=floor)
    return warmup_floor.replay(steps, "cpu", trial, settled_after_s).excess


def test_a_flat_series_is_at_its_settled_level_whatever_the_floor() -> None:
    steps = series(ramp=0.0, tau_s=1.0)
    for floor in warmup_floor.FLOORS_S:
        assert abs(excess(steps, floor)) < 0.005


def test_a_short_floor_lands_on_a_slow_ramp() -> None:
    steps = series(ramp=0.3, tau_s=1.0, seconds=6.0)
    # after 0.1 s the rule's two short windows of the ramp differ too little to go on;
    # after 0.5 s the windows are long enough to see it, and the block is at the level
    assert excess(steps, 0.1, 4.0) > 0.1
    assert abs(excess(steps, 0.5, 4.0)) < 0.01


def test_a_recording_too_short_for_the_replay_is_said_so() -> None:
    half_a_second = series(ramp=0.0, tau_s=1.0, seconds=0.5)
    with pytest.raises(steady.OutOfSteps):  # no settled level after 2 s
        excess(half_a_second, 0.1)
    with pytest.raises(steady.OutOfSteps):  # a 1 s warm-up runs out of steps
        excess(half_a_second, 1.0, settled_after_s=0.3)


def test_later_trials_keep_the_length_the_first_trial_fixed() -> None:
    steps = series(ramp=0.0, tau_s=1.0)
    trial = replace(TRIAL, warmup_s=0.1)
    first = warmup_floor.replay(steps, "cpu", trial, 2.0)
    assert first.length.timed_steps >= 19  # trial.min_s = 0.2 s of ~10 ms steps
    fixed = warmup_floor.Length(timed_steps=7, steps_per_sample=1)
    assert warmup_floor.replay(steps, "cpu", trial, 2.0, fixed).length == fixed


def test_both_schemas_become_one_series_of_steps() -> None:
    schema_1 = {"warmup_step_ns": [30, 20], "step_ns": [10, 12], "steps_per_sample": 1}
    assert warmup_floor.per_step(schema_1) == ([30, 20, 10, 12], 1)
    # grouped samples are spread over their steps; the kept window is not counted twice
    schema_5 = {
        "warmup_sample_ns": [30, 40, 40],
        "warmup_sample_steps": [1, 2, 2],
        "step_ns": [40, 44],
        "steps_per_sample": 2,
        "warmup_kept": 1,
    }
    assert warmup_floor.per_step(schema_5) == ([30, 20, 20, 20, 20, 22, 22], 2)
