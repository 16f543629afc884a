"""Peak memory of a trial: the allocator's peak on CUDA, the process's peak RSS on CPU."""

from __future__ import annotations

import resource
import sys
from typing import Any

_STATUS = "/proc/self/status"


def _status_kib(key: str) -> int | None:
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak(device: str) -> None:
    """Start a fresh peak. On Linux, writing 5 to clear_refs resets the peak RSS (VmHWM);
    without it a fork-server child would report its parent's peak."""
    if device == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def current_rss_bytes() -> int | None:
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


def peak_rss_bytes() -> int:
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    # ru_maxrss is KiB on Linux, bytes on macOS; it cannot be reset.
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024


def peak_memory(device: str, rss_at_start: int | None) -> dict[str, Any]:
    """The trial's memory figures, in bytes; 'peak_bytes' is the headline number."""
    result: dict[str, Any] = {
        "peak_rss_bytes": peak_rss_bytes(),
        "rss_at_start_bytes": rss_at_start,
    }
    if device == "cuda":
        import torch

        result["kind"] = "cuda_allocator"
        result["peak_bytes"] = torch.cuda.max_memory_allocated()
        result["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    else:
        result["kind"] = "process_rss"
        result["peak_bytes"] = result["peak_rss_bytes"]
    return result


class PhaseMemory:
    """The ``mark`` of one instrumented step: memory at the end of every phase.

    On CUDA the caching allocator's counters are host-side state, updated when an
    allocation is requested, so reading them needs no synchronisation: allocated and
    reserved bytes at the phase's end, and the allocated peak within the phase (the peak
    is reset after each reading). On CPU the process RSS at the phase's end.
    """

    def __init__(self, phases: tuple[str, ...], device: str) -> None:
        self._phases, self._device = phases, device
        self.rows: list[dict[str, Any]] = []
        if device == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats()

    def __call__(self) -> None:
        phase = self._phases[len(self.rows) % len(self._phases)]
        if self._device != "cuda":
            self.rows.append({"phase": phase, "rss_bytes": current_rss_bytes()})
            return
        import torch

        self.rows.append(
            {
                "phase": phase,
                "allocated_bytes": torch.cuda.memory_allocated(),
                "reserved_bytes": torch.cuda.memory_reserved(),
                "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
            }
        )
        torch.cuda.reset_peak_memory_stats()
