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
