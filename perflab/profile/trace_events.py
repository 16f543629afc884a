"""The events of a torch.profiler Chrome trace, parsed once at the file boundary.

The trace's events are JSON objects keyed by the Chrome trace format's names (``ph``,
``cat``, ``ts``, ``dur``, ``args``). This module is the one place that reads those keys:
the readers (perflab.profile.operators, perflab.profile.attribution) see a TraceEvent's
attributes. A trace holds up to a million events, and a reader needs only some of them
(no reader uses flow events or the device-side annotation mirrors; the device side skips
the memory records), so a reader names its categories and the rest are skipped on one
look at ``cat``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, NamedTuple

# the events whose External id correlates a launch: the operator (cpu_op) and the
# kernel, copy or fill it launched
LAUNCH_CATEGORIES = frozenset(["cpu_op", "kernel", "gpu_memcpy", "gpu_memset"])
# torch writes its [memory] records (allocations and frees) as instant events of this
# category
MEMORY_CATEGORY = "cpu_instant_event"


# A NamedTuple rather than the frozen dataclass perflab's other values are: it is as
# typed and as immutable, and a trace has up to a million events, where a frozen
# dataclass's __init__ (one object.__setattr__ a field) took four times as long.
class TraceEvent(NamedTuple):
    """One event of the trace: a range (phase ``X``: an operator, annotation, runtime
    call, kernel, copy or fill) or an instant (phase ``i``: a ``[memory]`` record).
    Times are the trace's microseconds."""

    name: str
    category: str
    phase: str
    start_us: float
    duration_us: float
    # (pid, tid) as the trace writes them: the thread or stream the event ran on
    thread: tuple[object, object]
    # the launch correlation of an operator, kernel, copy or fill (LAUNCH_CATEGORIES);
    # None on other events and on a launch the profiler did not correlate
    external_id: int | None
    # an operator's input shapes as the trace nests them (record_shapes)
    input_dims: Sequence[Any]
    # an instant's allocation (negative: a free) and its c10::DeviceType; 0 on ranges
    bytes: int
    device_type: int


def trace_events(trace: dict[str, Any], categories: Collection[str]) -> list[TraceEvent]:
    """The trace's events of the given categories, in the trace's order."""
    return [_parsed(e) for e in trace.get("traceEvents", []) if e.get("cat") in categories]


def _parsed(e: dict[str, Any]) -> TraceEvent:
    category = e["cat"]
    phase = e.get("ph", "")
    args = e.get("args") or {}
    launch = args.get("External id") if category in LAUNCH_CATEGORIES else None
    instant = phase == "i"
    # positional, in the order of TraceEvent's fields: keywords took a fifth of the parse
    return TraceEvent(
        str(e.get("name", "")),
        category,
        phase,
        float(e["ts"]),
        float(e.get("dur", 0.0)),
        (e.get("pid"), e.get("tid")),
        int(launch) if launch is not None else None,
        args.get("Input Dims", ()),
        int(args.get("Bytes", 0)) if instant else 0,
        int(args.get("Device Type", 0)) if instant else 0,
    )
