"""benchmarks/host_floor.py, the in-process A/A bound: a block's figure is the median of
its steps, the copies alternate until the minutes are spent, and it builds perflab's own
workload (device=cpu). Its clock is a fake one that each fake step advances, so the
figures are exact; only the build test runs a real step."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from benchmark_scripts import load

host_floor = load("host_floor")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_copy(clock: FakeClock, durations_s: Iterator[float]) -> Any:
    """A Copy whose every step advances the fake clock by the next duration."""

    def step(source: Any, mark: Callable[[], None]) -> None:
        clock.now += next(durations_s)

    prep = SimpleNamespace(workload=SimpleNamespace(batches=iter(())))
    return host_floor.Copy(prep, step)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(host_floor.time, "perf_counter", fake)
    return fake


def forever(seconds: float) -> Iterator[float]:
    while True:
        yield seconds


def test_a_block_is_the_median_of_its_steps(clock: FakeClock) -> None:
    copy = fake_copy(clock, iter([0.001, 0.005, 0.002]))
    assert host_floor.block_median_s(copy, 3) == pytest.approx(0.002)


def test_copies_alternate_until_the_minutes_are_spent(clock: FakeClock) -> None:
    a = fake_copy(clock, forever(0.010))
    b = fake_copy(clock, forever(0.0125))
    d, minutes = host_floor.measure(a, b, steps=3, minutes=0.01)
    # a pair of 3-step blocks takes 67.5 ms: 9 pairs end before 0.6 s, the 9th at 0.6075
    assert len(d) == 9
    assert minutes == pytest.approx(9 * 0.0675 / 60)
    assert all(x == pytest.approx(math.log(0.8)) for x in d)


def test_it_builds_perflabs_own_workload() -> None:
    """device=cpu: the real convnet step at batch 2, built and called through perflab."""
    cfg = host_floor._config(["model=convnet", "batch_size=2"])
    assert cfg.device == "cpu"
    copy = host_floor._build(cfg)
    assert host_floor.block_median_s(copy, 1) > 0
