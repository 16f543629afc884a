"""GPU telemetry: the NVML sampler against a fake NVML, its summary and health flags, and
the graceful absence of NVML (faked: these hold on any machine; the real NVML on a GPU is
tests/test_cuda.py's)."""

from __future__ import annotations

import sys
import time
from types import SimpleNamespace

import pytest

from perflab.analysis.health import telemetry_flags
from perflab.formats.trial_parts import TrialTelemetry
from perflab.measure import telemetry
from perflab.measure.telemetry import NvmlSampler, Sample, reasons, summarize


class FakeNvml:
    """The handful of pynvml calls the sampler makes, with scripted readings."""

    def __init__(self, clock_mhz: int = 1980, mask: int = 0, broken_power: bool = False):
        self.clock_mhz, self.mask, self.broken_power = clock_mhz, mask, broken_power
        self.reads = 0

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        return 1980

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 700_000  # mW

    def nvmlDeviceGetUtilizationRates(self, handle):
        self.reads += 1
        return SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetPowerUsage(self, handle):
        if self.broken_power:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 650_000

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return self.clock_mhz

    def nvmlDeviceGetTemperature(self, handle, kind):
        return 71

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self.mask


def test_sampler_reads_during_the_block_and_summarises():
    nvml = FakeNvml()
    sampler = NvmlSampler(nvml, handle=0, name="NVIDIA H100", interval_s=0.01)
    sampler.start()
    time.sleep(0.08)
    summary = sampler.stop()
    assert summary.available and summary.device == "NVIDIA H100"
    # one reading at start, one at stop, and the thread's in between
    assert summary.samples == nvml.reads and summary.samples >= 4
    assert summary.util_pct_median == 97 and summary.clock_ratio_median == 1.0
    assert summary.power_w_median == 650 and summary.power_limit_w == 700
    assert summary.temperature_c_max == 71 and summary.throttle_share == {}
    assert telemetry_flags([summary]) == []


def test_an_unsupported_query_leaves_its_field_empty():
    sampler = NvmlSampler(FakeNvml(broken_power=True), handle=0, name="gpu", interval_s=1)
    assert sampler.read().power_w is None and sampler.read().sm_clock_mhz == 1980


def _samples(clocks: list[float], masks: list[int]) -> list[Sample]:
    return [
        Sample(i * 0.1, 90.0, c, 80.0, 300.0, m)
        for i, (c, m) in enumerate(zip(clocks, masks, strict=True))
    ]


def test_a_low_clock_and_thermal_slowdown_are_telemetry_flags():
    thermal = telemetry.THROTTLE_BITS["sw_thermal_slowdown"]
    s = summarize(_samples([1200] * 8, [thermal] * 3 + [0] * 5), "gpu", 1980, 700, 0.1)
    assert s.clock_ratio_median == pytest.approx(1200 / 1980, abs=1e-3)
    assert s.throttle_share == {"sw_thermal_slowdown": 0.375}
    flags = telemetry_flags([s])
    assert any("below 75% of its maximum in 1/1 trials (median 61%)" in f for f in flags)
    assert "GPU slowdown sw_thermal_slowdown in 1/1 trials, median 38% of samples" in flags


def test_flags_are_one_line_per_kind_over_a_variants_trials():
    cap = telemetry.THROTTLE_BITS["sw_power_cap"]
    trials = [
        summarize(_samples([1980] * 10, [cap] * k + [0] * (10 - k)), "gpu", 1980, 700, 0.1)
        for k in (8, 5, 6, 0, 4, 0)
    ]
    assert telemetry_flags(trials) == [
        "GPU slowdown sw_power_cap in 4/6 trials, median 55% of samples"
    ]


def test_an_idle_gpu_reason_is_not_a_slowdown():
    idle = telemetry.THROTTLE_BITS["gpu_idle"]
    s = summarize(_samples([1980] * 4, [idle] * 4), "gpu", 1980, None, 0.1)
    assert s.throttle_share == {"gpu_idle": 1.0} and telemetry_flags([s]) == []


def test_reason_names_from_a_mask():
    assert reasons(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]


def test_no_telemetry_on_cpu_and_none_without_nvml(monkeypatch):
    sampler, info = telemetry.start_sampler("cpu", 100)
    assert sampler is None
    assert info == TrialTelemetry(available=False, reason="no GPU telemetry on cpu")
    sampler, info = telemetry.start_sampler("cuda", 0)
    assert sampler is None and info.reason and "telemetry_interval_ms=0" in info.reason

    # Without a driver there is no NVML library: asked for CUDA telemetry anyway, the
    # sampler declines with NVML's reason instead of failing the trial. The library's
    # absence is faked, so that this holds on a GPU machine too (tests/test_cuda.py reads
    # the real NVML there).
    def no_library() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", SimpleNamespace(nvmlInit=no_library))
    sampler, info = telemetry.start_sampler("cuda", 100)
    assert sampler is None and info.available is False and info.reason
    assert telemetry_flags([info]) == []
