"""GPU telemetry sampled through NVML while a trial's timed block runs.

A GPU that throttles (power cap, heat) or idles at a low clock during a trial measures a
different machine than the trial next to it; the samples let the analysis flag that
instead of reading it as an effect. NVML is read from a background thread every
``trial.telemetry_interval_ms``: each reading is a few driver calls on the host, no CUDA
work, so the timed stream is not touched. Without CUDA, without the NVML library or
without the ``pynvml`` module (nvidia-ml-py) nothing is sampled and the record says why.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

from perflab.formats.records import THROTTLE_BITS
from perflab.formats.trial_parts import TrialTelemetry

log = logging.getLogger(__name__)


_NVML_CLOCK_SM = 1  # pynvml.NVML_CLOCK_SM
_NVML_TEMPERATURE_GPU = 0  # pynvml.NVML_TEMPERATURE_GPU


@dataclass(frozen=True)
class Sample:
    seconds: float  # since the sampler started
    util_pct: float | None
    sm_clock_mhz: float | None
    temperature_c: float | None
    power_w: float | None
    throttle_mask: int | None


def reasons(mask: int) -> list[str]:
    """The names of the bits set in an NVML clock-event-reason mask."""
    return [name for name, bit in THROTTLE_BITS.items() if mask & bit]


def _read(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception:  # noqa: BLE001 - an unsupported query leaves one field empty
        return None


class NvmlSampler:
    """Samples one GPU from a daemon thread between start() and stop()."""

    def __init__(self, nvml: Any, handle: Any, name: str, interval_s: float) -> None:
        self._nvml, self._handle, self._name = nvml, handle, name
        self._interval_s = interval_s
        self._samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="perflab-nvml", daemon=True)
        self._t0 = 0.0
        self._max_clock = _read(nvml.nvmlDeviceGetMaxClockInfo, handle, _NVML_CLOCK_SM)
        self._power_limit_mw = _read(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._samples.append(self.read())
        self._thread.start()

    def stop(self) -> TrialTelemetry:
        self._stop.set()
        self._thread.join()
        self._samples.append(self.read())
        power_limit = None if self._power_limit_mw is None else self._power_limit_mw / 1e3
        return summarize(self._samples, self._name, self._max_clock, power_limit, self._interval_s)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._samples.append(self.read())

    def read(self) -> Sample:
        nvml, h = self._nvml, self._handle
        util = _read(nvml.nvmlDeviceGetUtilizationRates, h)
        power_mw = _read(nvml.nvmlDeviceGetPowerUsage, h)
        # renamed from ...ClocksThrottleReasons in newer drivers; same bits
        event_reasons = (
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return Sample(
            seconds=round(time.monotonic() - self._t0, 4),
            util_pct=None if util is None else float(util.gpu),
            sm_clock_mhz=_read(nvml.nvmlDeviceGetClockInfo, h, _NVML_CLOCK_SM),
            temperature_c=_read(nvml.nvmlDeviceGetTemperature, h, _NVML_TEMPERATURE_GPU),
            power_w=None if power_mw is None else power_mw / 1e3,
            throttle_mask=_read(event_reasons, h),
        )


def summarize(
    samples: list[Sample],
    device_name: str,
    max_sm_clock_mhz: float | None,
    power_limit_w: float | None,
    interval_s: float,
) -> TrialTelemetry:
    """Medians and extremes of the samples, and the share of samples per throttle reason."""

    def column(attr: str) -> list[float]:
        return [float(v) for s in samples if (v := getattr(s, attr)) is not None]

    def median(attr: str) -> float | None:
        values = column(attr)
        return statistics.median(values) if values else None

    clocks = column("sm_clock_mhz")
    masks = [s.throttle_mask for s in samples if s.throttle_mask is not None]
    seen: dict[str, float] = {}
    for name in THROTTLE_BITS:
        hits = sum(1 for m in masks if m & THROTTLE_BITS[name])
        if hits:
            seen[name] = round(hits / len(masks), 3)
    ratio = None
    if clocks and max_sm_clock_mhz:
        ratio = round(statistics.median(clocks) / max_sm_clock_mhz, 3)
    temps = column("temperature_c")
    return TrialTelemetry(
        available=True,
        source="nvml",
        device=device_name,
        interval_ms=round(interval_s * 1e3, 1),
        samples=len(samples),
        util_pct_median=median("util_pct"),
        sm_clock_mhz_median=median("sm_clock_mhz"),
        sm_clock_mhz_min=min(clocks) if clocks else None,
        max_sm_clock_mhz=max_sm_clock_mhz,
        clock_ratio_median=ratio,
        temperature_c_max=max(temps) if temps else None,
        power_w_median=median("power_w"),
        power_limit_w=power_limit_w,
        throttle_share=seen,
    )


def start_sampler(device: str, interval_ms: float) -> tuple[NvmlSampler | None, TrialTelemetry]:
    """A started sampler for the current CUDA device and an empty reading (its stop()
    gives the readings), or None and the reason there is none."""
    if device != "cuda":
        return None, TrialTelemetry.unavailable(f"no GPU telemetry on {device}")
    if interval_ms <= 0:
        return None, TrialTelemetry.unavailable("trial.telemetry_interval_ms=0")
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None, TrialTelemetry.unavailable("pynvml not importable: pip install nvidia-ml-py")
    try:
        import torch

        pynvml.nvmlInit()
        index = _nvml_index(torch)
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = torch.cuda.get_device_name()
    except Exception as exc:  # noqa: BLE001 - NVML missing or refusing: measure without it
        log.warning("no GPU telemetry: %s", exc)
        return None, TrialTelemetry.unavailable(f"NVML: {exc}")
    sampler = NvmlSampler(pynvml, handle, name, interval_ms / 1e3)
    sampler.start()
    return sampler, TrialTelemetry()


def _nvml_index(torch: Any) -> int:
    """NVML numbers GPUs physically, CUDA after CUDA_VISIBLE_DEVICES; torch maps one to
    the other (a private helper, hence the fallback to the CUDA index)."""
    device = torch.cuda.current_device()
    mapper = getattr(torch.cuda, "_get_nvml_device_index", None)
    return int(mapper(device)) if mapper is not None else int(device)
