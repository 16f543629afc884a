"""Timer logic with injected clocks and fake events: deterministic, no real time involved."""

from __future__ import annotations

import itertools

import pytest

from perflab.analysis.steady import Bounds
from perflab.measure.steps import run_block
from perflab.measure.timing import EventTimer, HostTimer, split_marks, steps_per_event_window


class FakeClock:
    """A clock that advances by a fixed amount per reading, or by what a step adds."""

    def __init__(self, tick: int = 0) -> None:
        self.now = 0
        self.tick = tick

    def __call__(self) -> int:
        self.now += self.tick
        return self.now


def test_host_timer_records_one_reading_per_mark():
    clock = FakeClock(tick=10)
    timer = HostTimer(clock)
    for _ in range(3):
        timer.mark()
    host, device = timer.collect()
    assert host == [10, 20, 30] and device == host
    assert timer.collect() == ([], [])


def test_split_marks_gives_phases_that_sum_to_the_step():
    # start, then 3 phases per step (data, h2d, forward) for 2 steps
    marks = [0, 5, 6, 20, 27, 28, 40]
    times = split_marks(marks, marks, ("data", "h2d", "forward"))
    assert times.step_ns == [20, 20]
    assert times.phases_ns == {"data": [5, 7], "h2d": [1, 1], "forward": [14, 12]}
    for i, total in enumerate(times.step_ns):
        assert sum(p[i] for p in times.phases_ns.values()) == total


def test_split_marks_reads_data_wait_from_host_and_the_rest_from_device():
    host = [0, 50, 51, 52]
    device = [0, 3, 4, 30]  # the device was busy before the batch arrived
    times = split_marks(host, device, ("data", "h2d", "forward"))
    assert times.phases_ns["data"] == [50]
    assert times.phases_ns["forward"] == [26]
    assert times.step_ns == [30]


def test_split_marks_with_grouped_steps_has_no_phases():
    marks = [0, 100, 210]
    times = split_marks(marks, marks, ("step",), steps_per_sample=4)
    assert times.step_ns == [100, 110] and times.phases_ns == {} and times.steps_per_sample == 4


def test_split_marks_rejects_marks_that_do_not_fit_the_phases():
    with pytest.raises(ValueError):
        split_marks([0, 1, 2], [0, 1, 2], ("data", "h2d", "forward"))


def test_gapped_marks_leave_the_time_between_samples_out():
    # each step opens with its own mark; 20 -> 100 is the untimed gap between the two
    marks = [0, 5, 6, 20, 100, 107, 108, 120]
    times = split_marks(marks, marks, ("data", "h2d", "forward"), gapped=True)
    assert times.step_ns == [20, 20]
    assert times.phases_ns == {"data": [5, 7], "h2d": [1, 1], "forward": [14, 12]}
    grouped = split_marks([0, 100, 150, 260], [0, 100, 150, 260], ("step",), 4, gapped=True)
    assert grouped.step_ns == [100, 110]
    with pytest.raises(ValueError):
        split_marks(marks[:-1], marks[:-1], ("data", "h2d", "forward"), gapped=True)


class FakeEvent:
    """Stands in for torch.cuda.Event: record() stamps a fake device clock."""

    device_clock = itertools.count(0, 250_000)  # 0.25 ms apart

    def record(self) -> None:
        self.at = next(FakeEvent.device_clock)

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) / 1e6  # milliseconds, like CUDA events


def test_event_timer_converts_event_pairs_to_ns_and_syncs_once():
    syncs = []
    timer = EventTimer(4, FakeEvent, lambda: syncs.append(1), clock=FakeClock(tick=1))
    for _ in range(3):
        timer.mark()
    host, device = timer.collect()
    assert device == [0, 250_000, 500_000]
    assert host == [1, 2, 3]
    assert len(syncs) == 1


@pytest.mark.parametrize(
    ("step_ns", "window_us", "expected"),
    [(1_000_000, 500, 1), (100_000, 500, 5), (30_000, 500, 17), (0, 500, 1), (5_000, 0, 1)],
)
def test_steps_per_event_window(step_ns, window_us, expected):
    assert steps_per_event_window(step_ns, window_us) == expected


def _stepper(clock: FakeClock, step_ns: int):
    def step(source, mark):
        next(source)
        clock.now += step_ns
        mark()

    return step


def test_run_block_stops_when_min_steps_and_min_seconds_are_reached():
    clock = FakeClock()
    timer = HostTimer(clock)
    block = run_block(
        _stepper(clock, 100_000_000),
        iter(range(100)),
        timer,
        Bounds(3, 50, 0.5, 10),
        clock=clock,
    )
    assert block.steps == 5 and block.stop_reason == "min_reached"
    host, _ = timer.collect()
    assert len(host) == 6  # start mark + one per step


def test_run_block_stops_at_max_steps_and_max_seconds():
    clock = FakeClock()
    timer = HostTimer(clock)
    by_steps = run_block(
        _stepper(clock, 1_000),
        iter(range(100)),
        timer,
        Bounds(3, 7, 5.0, 10),
        clock=clock,
    )
    assert (by_steps.steps, by_steps.stop_reason) == (7, "max_steps")
    by_time = run_block(
        _stepper(clock, 1_000_000_000),
        iter(range(100)),
        timer,
        Bounds(30, 50, 0, 3.0),
        clock=clock,
    )
    assert (by_time.steps, by_time.stop_reason) == (3, "max_s")


def test_run_block_in_groups_marks_once_per_group():
    clock = FakeClock()
    timer = HostTimer(clock)

    def step(source, mark):
        next(source)
        mark()  # must be a no-op when grouping
        clock.now += 10

    block = run_block(
        step,
        iter(range(100)),
        timer,
        Bounds(8, 50, 0, 10),
        group=4,
        phase_marks=False,
        clock=clock,
    )
    host, device = timer.collect()
    assert block.steps == 8
    assert split_marks(host, device, ("step",), 4).step_ns == [40, 40]
