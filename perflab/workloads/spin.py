"""The ground-truth workload: a step that takes a known time, on the host or the device.

Each forward waits exactly ``step_us`` where the step is timed. On CPU perflab times with
the host clock, so the host busy-waits. On CUDA perflab times with CUDA events, which see
only GPU work: a host wait would leave the GPU idle and go unmeasured (or be measured
through whatever launch gaps it causes). There the forward launches
``torch.cuda._sleep``, a kernel that spins for a number of SM clock cycles; the cycles
per nanosecond are measured with CUDA events the first time a forward runs on each device
in the trial's process (``calibrate_cuda_sleep``), inside the first call, which perflab
times apart.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

logger = logging.getLogger(__name__)


@torch.compiler.disable
def _busy_wait_ns(duration_ns: int) -> None:
    # A busy wait, not a sleep: sleeping hands the core away and wakes up late by a
    # scheduler-dependent amount; spinning on the clock ends within ~0.1 us of the target.
    deadline = time.perf_counter_ns() + duration_ns
    while time.perf_counter_ns() < deadline:
        pass


@dataclass(frozen=True)
class SpinCalibration:
    """How many cycles of ``torch.cuda._sleep`` make one nanosecond on one device, and why."""

    # the fitted slope: sleep-kernel cycles per nanosecond of CUDA-event time
    cycles_per_ns: float
    # every timed launch the slope was fitted to: (cycles requested, elapsed ns)
    measured: tuple[tuple[int, float], ...]


class TimingEvent(Protocol):
    """The part of ``torch.cuda.Event`` calibration uses, so tests can pass a fake clock."""

    def record(self) -> None: ...

    # milliseconds from this event to end_event, as torch.cuda.Event reports them
    def elapsed_time(self, end_event: Any) -> float: ...


def _cuda_timing_event() -> TimingEvent:
    return torch.cuda.Event(enable_timing=True)


# Only sizes the first timed launch. 1.5 GHz is mid-range for data-centre GPUs (A100 boosts to
# 1.41, H100 SXM to 1.98); a wrong guess changes launch lengths, not the fitted slope.
_FIRST_GUESS_CYCLES_PER_NS = 1.5
# The first launch loads the kernel, and a few ms give an idle GPU time to raise its clock.
_WARM_UP_NS = 10_000_000


def _time_launch_ns(
    cycles: int,
    make_event: Callable[[], TimingEvent],
    synchronize: Callable[[], None],
    sleep: Callable[[int], None],
) -> float:
    # Synchronize first so the start event is not queued behind earlier work.
    synchronize()
    start, end = make_event(), make_event()
    start.record()
    sleep(cycles)
    end.record()
    synchronize()
    return start.elapsed_time(end) * 1e6


def _fit_cycles_per_ns(measured: tuple[tuple[int, float], ...]) -> float:
    """Least-squares slope of elapsed ns on cycles, through each length's median time.

    Fitting a line, not dividing one launch's cycles by its time, drops the per-launch
    constant (launch latency, event resolution); medians keep one pre-empted launch from
    tilting it.
    """
    by_cycles: dict[int, list[float]] = {}
    for cycles, elapsed_ns in measured:
        by_cycles.setdefault(cycles, []).append(elapsed_ns)
    xs = list(by_cycles)
    ys = [statistics.median(by_cycles[c]) for c in xs]
    if len(xs) < 2:
        raise RuntimeError(f"spin calibration needs two launch lengths; measured {measured}")
    x_mean, y_mean = statistics.fmean(xs), statistics.fmean(ys)
    covariance = sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True))
    ns_per_cycle = covariance / sum((x - x_mean) ** 2 for x in xs)
    if not (math.isfinite(ns_per_cycle) and ns_per_cycle > 0):
        raise RuntimeError(
            f"spin calibration measured {ns_per_cycle} ns per torch.cuda._sleep cycle "
            f"(from (cycles, ns) = {measured}); a positive finite slope is required: "
            "the GPU clock or CUDA event timing is not usable"
        )
    return 1 / ns_per_cycle


def calibrate_cuda_sleep(
    make_event: Callable[[], TimingEvent] = _cuda_timing_event,
    synchronize: Callable[[], None] = torch.cuda.synchronize,
    sleep: Callable[[int], None] = torch.cuda._sleep,
    targets_ns: tuple[int, ...] = (1_000_000, 2_000_000),
    repeats: int = 5,
) -> SpinCalibration:
    """Measure cycles of ``torch.cuda._sleep`` per ns on the current device with CUDA events.

    The kernel spins for SM clock cycles, so its length in time depends on the clock; one
    rough launch sizes launches of about ``targets_ns`` each, timed ``repeats`` times, and
    the slope of a line through them is the rate. The defaults use torch.cuda; tests pass
    a fake clock.
    """
    sleep(round(_FIRST_GUESS_CYCLES_PER_NS * _WARM_UP_NS))
    guess_cycles = round(_FIRST_GUESS_CYCLES_PER_NS * targets_ns[0])
    guess_ns = _time_launch_ns(guess_cycles, make_event, synchronize, sleep)
    if not (math.isfinite(guess_ns) and guess_ns > 0):
        raise RuntimeError(
            f"spin calibration timed {guess_cycles} torch.cuda._sleep cycles at {guess_ns} ns; "
            "a positive finite time is required: CUDA event timing is not usable"
        )
    rough_cycles_per_ns = guess_cycles / guess_ns
    measured = tuple(
        (cycles, _time_launch_ns(cycles, make_event, synchronize, sleep))
        for cycles in (round(rough_cycles_per_ns * ns) for ns in targets_ns)
        for _ in range(repeats)
    )
    return SpinCalibration(_fit_cycles_per_ns(measured), measured)


# Per device index, for the life of the process: every trial in a process shares the
# device's clock, and calibrating costs ~25 ms of GPU time (warm-up, guess, 5 x 1 ms, 5 x 2 ms).
_CALIBRATIONS: dict[int, SpinCalibration] = {}


def _device_calibration(index: int) -> SpinCalibration:
    if index not in _CALIBRATIONS:
        with torch.cuda.device(index):
            _CALIBRATIONS[index] = calibrate_cuda_sleep()
        logger.info(
            "spin: cuda:%d runs %.4f torch.cuda._sleep cycles per ns",
            index,
            _CALIBRATIONS[index].cycles_per_ns,
        )
    return _CALIBRATIONS[index]


class _Spin(nn.Module):
    def __init__(self, step_us: int) -> None:
        super().__init__()
        self.step_ns = step_us * 1000
        # One parameter so train mode has something to differentiate and optimise.
        self.scale = nn.Parameter(torch.ones(1))
        # The calibration the last CUDA forward used; None until then (and always on CPU).
        self.calibration: SpinCalibration | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:
            self._spin_on_device(x.get_device())
        else:
            _busy_wait_ns(self.step_ns)
        return x * self.scale

    @torch.compiler.disable
    def _spin_on_device(self, index: int) -> None:
        # Disabled for torch.compile like the host wait: the spin is a fixed cost, not model
        # code, and setting self.calibration here keeps that side effect out of dynamo's trace.
        self.calibration = _device_calibration(index)
        with torch.cuda.device(index):  # _sleep launches on the current device's current stream
            torch.cuda._sleep(round(self.step_ns * self.calibration.cycles_per_ns))


def spin(step_us: int) -> nn.Module:
    """Ground-truth workload: its forward takes exactly ``step_us`` plus a constant.

    On CPU the host busy-waits; on CUDA a calibrated kernel spins on the GPU (see above).
    """
    return _Spin(step_us)


# --- two implementations of one function, with a known cost ratio ------------------------
# model=function's ground truth (experiments/function_ratio.yaml): both return 2x, bit for
# bit (x + x and x * 2 round alike), one after waiting wait_us, the other after twice that,
# where perflab times x's device, so the faster's step is 2x shorter less the step's own
# constant: (2 * wait_us + c) / (wait_us + c).


def _wait(x: torch.Tensor, duration_ns: int) -> None:
    if x.is_cuda:
        _sleep_on_device(x.get_device(), duration_ns)
    else:
        _busy_wait_ns(duration_ns)


@torch.compiler.disable
def _sleep_on_device(index: int, duration_ns: int) -> None:
    calibration = _device_calibration(index)  # the first call's, timed apart
    with torch.cuda.device(index):
        torch.cuda._sleep(round(duration_ns * calibration.cycles_per_ns))


def double_fast(x: torch.Tensor, wait_us: int = 1000) -> torch.Tensor:
    """2x after waiting ``wait_us``."""
    _wait(x, wait_us * 1000)
    return x + x


def double_slow(x: torch.Tensor, wait_us: int = 1000) -> torch.Tensor:
    """2x after waiting twice ``wait_us``: the same result, twice the cost."""
    _wait(x, wait_us * 1000)
    _wait(x, wait_us * 1000)
    return x * 2
