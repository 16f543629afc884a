"""A trial's memory: the peak (the allocator's on CUDA, the process's peak RSS on CPU),
memory at the end of each phase of one instrumented step, and a reading after every
timed sample with how it grew through the timed block (the leak flag's evidence)."""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from perflab.formats.trial_parts import PhaseReading, TrialMemory

_STATUS = "/proc/self/status"
# Linux's memory counters of the process, in pages: size resident shared text lib data dt
_STATM = "/proc/self/statm"
_STATM_READ = 64  # bytes: seven counters fit well inside
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


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


def with_peak(memory: TrialMemory, device: str, rss_at_start: int | None) -> TrialMemory:
    """``memory`` with the trial's peak figures read now, in bytes; ``peak_bytes`` is the
    headline number: the allocator's peak on CUDA, the process's peak RSS on CPU."""
    peak_rss = peak_rss_bytes()
    if device != "cuda":
        return replace(
            memory,
            peak_rss_bytes=peak_rss,
            rss_at_start_bytes=rss_at_start,
            kind="process_rss",
            peak_bytes=peak_rss,
        )
    import torch

    return replace(
        memory,
        peak_rss_bytes=peak_rss,
        rss_at_start_bytes=rss_at_start,
        kind="cuda_allocator",
        peak_bytes=torch.cuda.max_memory_allocated(),
        peak_reserved_bytes=torch.cuda.max_memory_reserved(),
    )


class PhaseMemory:
    """The ``mark`` of one instrumented step: memory at the end of every phase.

    On CUDA the caching allocator's counters are host-side state, updated when an
    allocation is requested, so reading them needs no synchronisation: allocated and
    reserved bytes at the phase's end, and the allocated peak within the phase (the peak
    is reset after each reading). On CPU the process RSS at the phase's end.
    """

    def __init__(self, phases: tuple[str, ...], device: str) -> None:
        self._phases, self._device = phases, device
        self.rows: list[PhaseReading] = []
        if device == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats()

    def __call__(self) -> None:
        phase = self._phases[len(self.rows) % len(self._phases)]
        if self._device != "cuda":
            self.rows.append(PhaseReading(phase=phase, rss_bytes=current_rss_bytes()))
            return
        import torch

        self.rows.append(
            PhaseReading(
                phase=phase,
                allocated_bytes=torch.cuda.memory_allocated(),
                reserved_bytes=torch.cuda.memory_reserved(),
                peak_allocated_bytes=torch.cuda.max_memory_allocated(),
            )
        )
        torch.cuda.reset_peak_memory_stats()


class SampleMemory:
    """Memory after every timed sample, for the leak flag (perflab.analysis.variants).

    ``read`` runs inside the timed loop once per sample, so it only takes the reading and
    keeps it raw; ``in_bytes`` parses them after the block. On CPU the reading is one
    ``pread`` of /proc/self/statm through a descriptor opened up front: 1.3-1.7 us per
    reading on this project's 2-core CPU with torch loaded (best of 5 x 100k calls), and
    3.4-5.4 us more per step in run_block's loop with both cores busy (load 3); opening
    and reading the file costs 12 us, /proc/self/status 23 us. On CUDA it is the caching
    allocator's allocated bytes (host-side state, no synchronisation) from
    ``memory_stats_as_nested_dict``: ``memory_allocated`` flattens and sorts that
    ~130-entry dict in Python first, ~100 us per call on the same CPU (timed on a
    stand-in dict of that shape), which the nested lookup skips; what is left has not
    been timed on a GPU host yet. Without /proc (macOS) there are no readings.
    """

    def __init__(self, device: str) -> None:
        self._device = device
        self._raw: list[Any] = []
        self._fd: int | None = None
        # a closure, as HostTimer.mark: one call and one append inside the loop
        self.read: Callable[[], None] = self._reader()

    def _reader(self) -> Callable[[], None]:
        append = self._raw.append
        if self._device == "cuda":
            import torch

            stats = torch.cuda.memory_stats_as_nested_dict
            return lambda: append(stats()["allocated_bytes"]["all"]["current"])
        try:
            self._fd = fd = os.open(_STATM, os.O_RDONLY)
        except OSError:
            return lambda: None
        pread = os.pread
        return lambda: append(pread(fd, _STATM_READ, 0))

    def __enter__(self) -> SampleMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def in_bytes(self) -> list[int]:
        """The readings: resident set size on CPU, allocated bytes on CUDA."""
        if self._device == "cuda":
            return [int(r) for r in self._raw]
        return [int(r.split()[1]) * _PAGE_BYTES for r in self._raw]
