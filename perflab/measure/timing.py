"""Device-aware timers, and the split of their marks into per-step phase times.

A timer's ``mark()`` is called at every phase boundary inside the timed loop, so it must
cost next to nothing: on CPU it appends one ``perf_counter_ns`` reading (~0.1 us here);
on an accelerator it records a pre-allocated event on the current stream and reads the
host clock, and synchronises only once, when the block is collected. Events do not
exist on CPU (``torch.Event(...).record()`` fails there), and the host clock is exact
there because CPU work is synchronous.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

Clock = Callable[[], int]

NS_PER_MS = 1_000_000


class Timer(Protocol):
    def mark(self) -> None: ...

    def collect(self) -> tuple[list[int], list[int]]:
        """Return (host_ns, device_ns) for every mark since the last collect, and reset."""
        ...

    def sync(self) -> None: ...


class HostTimer:
    """CPU timer: every mark is one reading of the host clock."""

    mark: Callable[[], None]

    def __init__(self, clock: Clock = time.perf_counter_ns) -> None:
        self._marks: list[int] = []
        append = self._marks.append

        # A closure instead of a method keeps a mark at one call plus one append.
        def mark() -> None:
            append(clock())

        self.mark = mark

    def sync(self) -> None:
        """Nothing to wait for: CPU work is done when the call returns."""

    def collect(self) -> tuple[list[int], list[int]]:
        marks = list(self._marks)
        self._marks.clear()
        return marks, marks


class EventTimer:
    """Accelerator timer: events on the current stream plus a host reading per mark.

    Events are created up front (``capacity`` of them) so the timed loop never allocates
    one; the caller bounds the number of marks per block by the capacity.
    """

    def __init__(
        self,
        capacity: int,
        event_factory: Callable[[], Any],
        synchronize: Callable[[], None],
        clock: Clock = time.perf_counter_ns,
    ) -> None:
        self.capacity = capacity
        self._events = [event_factory() for _ in range(capacity)]
        self._synchronize = synchronize
        self._clock = clock
        self._host: list[int] = []

    def mark(self) -> None:
        self._events[len(self._host)].record()
        self._host.append(self._clock())

    def sync(self) -> None:
        self._synchronize()

    def collect(self) -> tuple[list[int], list[int]]:
        self._synchronize()
        host = list(self._host)
        events = self._events[: len(host)]
        device = [0]
        for start, end in zip(events, events[1:], strict=False):
            # elapsed_time is in milliseconds (float, ~0.5 us resolution)
            device.append(device[-1] + round(start.elapsed_time(end) * NS_PER_MS))
        self._host.clear()
        return host, device


def make_timer(device: str, capacity: int) -> Timer:
    if device == "cuda":
        import torch

        return EventTimer(
            capacity,
            lambda: torch.cuda.Event(enable_timing=True),
            torch.cuda.synchronize,
        )
    return HostTimer()


@dataclass
class StepTimes:
    # duration of each sample in ns; a sample covers steps_per_sample steps
    step_ns: list[int]
    # per-phase durations in ns, one per step; empty when steps_per_sample > 1
    phases_ns: dict[str, list[int]]
    steps_per_sample: int


def split_marks(
    host: Sequence[int],
    device: Sequence[int],
    phases: Sequence[str],
    steps_per_sample: int = 1,
    gapped: bool = False,
) -> StepTimes:
    """Turn the marks of one block into step and phase durations.

    With one step per sample the layout is: one mark at the block start, then one mark at
    the end of each phase of each step. The first phase ("data", the host blocked on the
    loader) is read from the host clock; every other phase, and the step total, from the
    device clock (identical to the host clock on CPU). With several steps per sample there
    is one mark per group of steps and no phase split. ``gapped`` (run_block with an
    ``after_sample``): every sample has its own opening mark, so a sample's marks are
    not shared with the one before and the time between them is no sample's.
    """
    width = 1 if steps_per_sample > 1 else len(phases)  # marks closing one sample
    stride = width + 1 if gapped else width  # marks from one sample's opening to the next
    shared = 0 if gapped else 1  # the block's first mark, when samples share boundaries
    if (len(device) - shared) % stride:
        raise ValueError(f"{len(device)} marks do not fit {width} per sample")
    bases = range(0, len(device) - shared, stride)
    totals = [device[b + width] - device[b] for b in bases]
    if steps_per_sample > 1:
        return StepTimes(totals, {}, steps_per_sample)
    phase_ns: dict[str, list[int]] = {name: [] for name in phases}
    # a name that comes again in a step (a user's step marking each micro-batch's forward)
    # adds its time to the step's entry instead of starting another
    again = [name in phases[:p] for p, name in enumerate(phases)]
    for b in bases:
        phase_ns[phases[0]].append(host[b + 1] - host[b])
        for p in range(1, width):
            durations = phase_ns[phases[p]]
            if again[p]:
                durations[-1] += device[b + p + 1] - device[b + p]
            else:
                durations.append(device[b + p + 1] - device[b + p])
    return StepTimes(totals, phase_ns, 1)


def steps_per_event_window(estimated_step_ns: float, min_window_us: float) -> int:
    """How many steps one event pair should span so event overhead stays negligible."""
    if estimated_step_ns <= 0:
        return 1
    window_ns = min_window_us * 1000
    return max(1, int(-(-window_ns // estimated_step_ns)))
