"""An optional, bounded wait before each trial until the GPU's clock and power settle.

Interleaved trials carry over: a trial that follows a high-power one (a 700 W training
step, say) may start power-capped, hot and at a lowered SM clock, so it measures a
different machine than the trial before it. ``schedule.settle_s`` waits, before each
trial, until NVML's power, SM clock and temperature readings stop moving, and never
longer than that bound; 0 turns it off. Without NVML (CPU runs, no driver, no pynvml)
there is nothing to watch and the wait is a plain pause of the whole bound.

perflab has not yet measured what this wait changes on a real GPU: the tolerances below
are reasoned defaults, not values fitted to measurements.

The scheduler process that calls this never imports torch, so neither does this module;
pynvml is imported lazily, only when a wait is asked for.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# 20 readings a second: NVML updates power about every 20-100 ms, and a poll is a few
# driver calls on the host, cheap next to a trial.
SETTLE_INTERVAL_S = 0.05
# readings that must all agree; 10 at the default interval is half a second of calm
SETTLE_WINDOW = 10
# max/min - 1 of power over the window; NVML's power reading itself jitters by a few %
POWER_TOLERANCE = 0.05
# max/min - 1 of the SM clock; a boosting GPU steps by ~15 MHz bins, ~1 % at 1.5 GHz
CLOCK_TOLERANCE = 0.02
# a GPU still cooling by more than this over the window has not reached its steady state
TEMPERATURE_DROP_C = 1.0

_NVML_CLOCK_SM = 1  # pynvml.NVML_CLOCK_SM
_NVML_TEMPERATURE_GPU = 0  # pynvml.NVML_TEMPERATURE_GPU

# The NVML module initialised in this process (nvmlInit is process-wide); an injected
# fake is a different object and is initialised on its own.
_initialised: Any = None


@dataclass(frozen=True)
class _Reading:
    # None where the GPU does not report that reading
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    temperature_c: float | None = None


def settle(
    max_s: float,
    device: str,
    *,
    nvml: Any | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    interval_s: float = SETTLE_INTERVAL_S,
) -> dict[str, Any]:
    """Wait at most ``max_s`` seconds for the GPU to settle; say how long and why.

    ``nvml``, ``clock`` and ``sleep`` are injectable so the rule can be tested without
    a GPU and without sleeping. No NVML error escapes: a missing NVML turns the wait into
    a pause, a failure while polling ends it unsettled, with the reason in the result.
    """
    if max_s <= 0:
        return {"waited_s": 0.0, "how": "off"}
    if interval_s <= 0:
        raise ValueError(f"interval_s={interval_s}: must be > 0 (a zero interval busy-waits)")
    start = clock()
    watched, reason = _open(device, nvml)
    if watched is None:
        # The user asked for a pause between trials; honour it even with nothing to watch.
        sleep(max_s)
        return {"waited_s": round(clock() - start, 3), "how": "pause", "reason": reason}
    return _poll(*watched, start, start + max_s, clock, sleep, interval_s)


def nvml_target() -> int | str:
    """The NVML index or UUID of the GPU the trials will use.

    NVML numbers GPUs physically, CUDA after CUDA_VISIBLE_DEVICES; trials use that
    variable's first entry. A MIG or otherwise unrecognised entry falls back to index 0.
    """
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if first.startswith("GPU-"):
        return first
    try:
        return int(first)
    except ValueError:
        return 0


def _open(device: str, nvml: Any | None) -> tuple[tuple[Any, Any] | None, str]:
    """(nvml module, device handle), or None and why NVML cannot be watched."""
    if device not in ("cuda", "auto"):
        return None, f"no NVML on device={device}"
    if nvml is None:
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            return None, "pynvml not importable: pip install nvidia-ml-py"
        nvml = pynvml
    try:
        _init(nvml)
        target = nvml_target()
        if isinstance(target, str):
            handle = nvml.nvmlDeviceGetHandleByUUID(target)
        else:
            handle = nvml.nvmlDeviceGetHandleByIndex(target)
    except Exception as exc:  # noqa: BLE001 - no library, no driver, no such GPU: pause
        return None, f"NVML: {exc}"
    return (nvml, handle), ""


def _init(nvml: Any) -> None:
    global _initialised
    if nvml is not _initialised:
        nvml.nvmlInit()
        _initialised = nvml


def _poll(
    nvml: Any,
    handle: Any,
    start: float,
    deadline: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    interval_s: float,
) -> dict[str, Any]:
    calls, first = _probe(nvml, handle)
    if not calls:
        sleep(max(0.0, deadline - clock()))
        reason = "NVML reports none of power, SM clock, temperature on this GPU"
        return {"waited_s": round(clock() - start, 3), "how": "pause", "reason": reason}
    window: deque[_Reading] = deque([first], maxlen=SETTLE_WINDOW)
    settled, reason = False, ""
    while True:
        if len(window) == SETTLE_WINDOW and _steady(window):
            settled = True
            break
        remaining = deadline - clock()
        if remaining <= 0:
            break
        sleep(min(interval_s, remaining))
        try:
            window.append(_read(calls, handle))
        except Exception as exc:  # noqa: BLE001 - a driver hiccup must not end the sweep
            reason = f"NVML failed while polling: {exc}"
            break
    return _result(window, settled, reason, clock() - start)


def _probe(nvml: Any, handle: Any) -> tuple[dict[str, Callable[[Any], float]], _Reading]:
    """The readings this GPU answers, and the first reading. A call that raises here is
    taken as unsupported and left out; one that raises later is an NVML failure."""
    candidates: dict[str, Callable[[Any], float]] = {
        "power_w": lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1e3,  # mW -> W
        "sm_clock_mhz": lambda h: float(nvml.nvmlDeviceGetClockInfo(h, _NVML_CLOCK_SM)),
        "temperature_c": lambda h: float(nvml.nvmlDeviceGetTemperature(h, _NVML_TEMPERATURE_GPU)),
    }
    calls, values = {}, {}
    for name, call in candidates.items():
        try:
            values[name] = call(handle)
        except Exception as exc:  # noqa: BLE001 - NVML_ERROR_NOT_SUPPORTED and the like
            log.debug("settle: %s not read: %s", name, exc)
            continue
        calls[name] = call
    return calls, _Reading(**values)


def _read(calls: dict[str, Callable[[Any], float]], handle: Any) -> _Reading:
    return _Reading(**{name: call(handle) for name, call in calls.items()})


def _steady(window: deque[_Reading]) -> bool:
    """The settle rule over a full window; a reading the GPU lacks is None and ignored."""
    power = [r.power_w for r in window if r.power_w is not None]
    sm_clock = [r.sm_clock_mhz for r in window if r.sm_clock_mhz is not None]
    temp = [r.temperature_c for r in window if r.temperature_c is not None]
    return (
        (not power or _spread(power) <= POWER_TOLERANCE)
        and (not sm_clock or _spread(sm_clock) <= CLOCK_TOLERANCE)
        and (not temp or temp[0] - temp[-1] <= TEMPERATURE_DROP_C)
    )


def _spread(values: list[float]) -> float:
    """max/min - 1; an all-zero series is flat, a zero next to a non-zero is not."""
    low, high = min(values), max(values)
    if low > 0:
        return high / low - 1
    return 0.0 if high == low else float("inf")


def _result(window: deque[_Reading], settled: bool, reason: str, waited_s: float) -> dict[str, Any]:
    last = window[-1]
    result: dict[str, Any] = {
        "waited_s": round(waited_s, 3),
        "how": "nvml",
        "settled": settled,
        "power_w": None if last.power_w is None else round(last.power_w, 1),
        "sm_clock_mhz": None if last.sm_clock_mhz is None else round(last.sm_clock_mhz),
        "temperature_c": None if last.temperature_c is None else round(last.temperature_c),
    }
    if reason:
        result["reason"] = reason
    elif not settled:
        log.info("GPU did not settle within %.1f s; the trial starts anyway", waited_s)
    return result
