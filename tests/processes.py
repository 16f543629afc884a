"""The processes a perflab run leaves, read from /proc (Linux): for the fault tests and
benchmarks/fault_matrix.py, which check that nothing outlives a killed sweep."""

from __future__ import annotations

import time
from pathlib import Path


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, their children, ...)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def alive(pids: set[int], wait_s: float) -> set[int]:
    """Those of ``pids`` still running (zombies aside) after up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        left = set()
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                left.add(pid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)
