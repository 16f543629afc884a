"""The spin ground truth: CUDA sleep calibration on a fake clock, and the forward's length."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable

import pytest
import torch

from perflab.workloads import spin as models
from perflab.workloads.spin import SpinCalibration, calibrate_cuda_sleep, spin

CYCLES_PER_NS = 1.98  # an H100 SXM's boost clock
LAUNCH_NS = 3000.0  # a per-launch constant the fit must not fold into the slope


class FakeGpu:
    """A GPU clock: each sleep advances it by ``duration(cycles)`` ns; events read it."""

    def __init__(self, duration: Callable[[int], float]) -> None:
        self.duration = duration
        self.now_ns = 0.0
        self.launches: list[int] = []
        self.syncs = 0

    def sleep(self, cycles: int) -> None:
        self.launches.append(cycles)
        self.now_ns += self.duration(cycles)

    def synchronize(self) -> None:
        self.syncs += 1

    def event(self) -> FakeEvent:
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.at_ns: float | None = None

    def record(self) -> None:
        self.at_ns = self.gpu.now_ns

    def elapsed_time(self, end_event: FakeEvent) -> float:
        assert self.at_ns is not None and end_event.at_ns is not None
        return (end_event.at_ns - self.at_ns) / 1e6  # milliseconds, like torch.cuda.Event


def calibrate(gpu: FakeGpu, **kwargs: int | tuple[int, ...]) -> SpinCalibration:
    return calibrate_cuda_sleep(gpu.event, gpu.synchronize, gpu.sleep, **kwargs)


def test_calibration_fits_the_slope_and_drops_the_launch_constant():
    gpu = FakeGpu(lambda cycles: cycles / CYCLES_PER_NS + LAUNCH_NS)
    calibration = calibrate(gpu)
    assert calibration.cycles_per_ns == pytest.approx(CYCLES_PER_NS, rel=1e-9)
    # dividing one launch's cycles by its time would be biased by the constant
    cycles, elapsed_ns = calibration.measured[0]
    assert cycles / elapsed_ns < CYCLES_PER_NS * (1 - 1e-3)


def test_calibration_times_launches_of_about_the_targets():
    gpu = FakeGpu(lambda cycles: cycles / CYCLES_PER_NS + LAUNCH_NS)
    calibration = calibrate(gpu, targets_ns=(1_000_000, 2_000_000), repeats=3)
    assert len(calibration.measured) == 6
    assert len({cycles for cycles, _ in calibration.measured}) == 2
    for (_, short_ns), (_, long_ns) in zip(
        calibration.measured[:3], calibration.measured[3:], strict=True
    ):
        assert short_ns == pytest.approx(1e6, rel=0.01)
        assert long_ns == pytest.approx(2e6, rel=0.01)
    # a synchronize before and after each timed launch, so no earlier work is in the window
    assert gpu.syncs == 2 * (1 + len(calibration.measured))


def test_calibration_medians_ignore_one_preempted_launch():
    durations = iter([5e6, 1e6, 1e6, 9e6, 1e6, 2e6, 2e6, 2e6])  # warm-up, guess, then 2 x 3
    gpu = FakeGpu(lambda cycles: next(durations))
    calibration = calibrate(gpu, repeats=3)
    (short, _), (long, _) = calibration.measured[0], calibration.measured[3]
    assert calibration.cycles_per_ns == pytest.approx((long - short) / 1e6, rel=1e-9)


@pytest.mark.parametrize(
    ("duration", "match"),
    [
        pytest.param(lambda cycles: LAUNCH_NS, "ns per torch.cuda._sleep cycle", id="zero"),
        pytest.param(lambda cycles: 5e6 - cycles, "ns per torch.cuda._sleep cycle", id="negative"),
        pytest.param(lambda cycles: 0.0, "positive finite time", id="no-time"),
        pytest.param(lambda cycles: float("nan"), "positive finite time", id="nan"),
    ],
)
def test_calibration_refuses_a_nonsense_slope(duration, match):
    with pytest.raises(RuntimeError, match=match):
        calibrate(FakeGpu(duration))


@pytest.fixture
def fake_cuda(monkeypatch) -> list[int]:
    """No calibrations cached, a counting fake calibration, no device switching (the CPU
    build's torch.cuda.device cannot switch); returns the list each calibration appends to."""
    calls: list[int] = []

    def fake_calibrate() -> SpinCalibration:
        calls.append(1)
        return SpinCalibration(CYCLES_PER_NS, ((1, 1.0), (2, 2.0)))

    monkeypatch.setattr(models, "_CALIBRATIONS", {})
    monkeypatch.setattr(models, "calibrate_cuda_sleep", fake_calibrate)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    return calls


def test_calibration_is_measured_once_per_device(fake_cuda):
    first = models._device_calibration(0)
    assert models._device_calibration(0) is first
    models._device_calibration(1)
    assert len(fake_cuda) == 2


def test_device_spin_launches_the_calibrated_cycles(fake_cuda, monkeypatch):
    launched: list[int] = []
    monkeypatch.setattr(torch.cuda, "_sleep", launched.append)
    model = spin(2000)
    model._spin_on_device(0)
    model._spin_on_device(0)
    assert launched == [round(2_000_000 * CYCLES_PER_NS)] * 2
    assert model.calibration == SpinCalibration(CYCLES_PER_NS, ((1, 1.0), (2, 2.0)))


def test_cpu_forward_busy_waits_about_step_us():
    model = spin(2000)
    start = time.perf_counter_ns()
    out = model(torch.ones(1, 1))
    elapsed = time.perf_counter_ns() - start
    # at least the step; the upper bound only catches a wait that never ends on time
    assert 2_000_000 <= elapsed <= 20 * 2_000_000
    assert torch.equal(out, torch.ones(1, 1))
    assert model.calibration is None


def _event_time_us(model: torch.nn.Module, x: torch.Tensor) -> float:
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    # A million-cycle spin (~0.5 ms) queued ahead keeps the device busy while the host
    # launches the forward, so the start event fires as the forward's kernel can begin. On
    # an idle device the events also time the host's launch: on an H100 (2026-11-26) a lone
    # 2000 us forward read 2018-2063 us that way and 2002 us back to back.
    torch.cuda._sleep(1_000_000)
    start.record()
    model(x)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000


@pytest.mark.cuda  # skipped without a GPU (tests/conftest.py)
def test_cuda_forward_spins_step_us_on_the_device():
    x = torch.ones(1, device="cuda")
    base, slower = spin(2000).cuda(), spin(2100).cuda()
    base(x)  # the first forward on the device calibrates; both then run warm
    slower(x)
    assert base.calibration is not None and base.calibration is slower.calibration
    # interleaved, so a clock drift during the test reaches both lengths alike
    times = [(_event_time_us(base, x), _event_time_us(slower, x)) for _ in range(20)]
    base_us = statistics.median(t for t, _ in times)
    slower_us = statistics.median(t for _, t in times)
    assert base_us == pytest.approx(2000, rel=0.02)
    assert slower_us / base_us == pytest.approx(2100 / 2000, rel=0.005)
