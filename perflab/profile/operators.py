"""The operator table of a profiled trial, read from its Chrome trace.

torch's ``key_averages()`` builds the same table by first turning every recorded event
into a Python ``FunctionEvent`` (``_parse_kineto_results``): on the convnet at batch 64
on a 2-core CPU that took 6.3 of a profiling trial's 17.5 s, more than the profiled steps
themselves. The trace perflab writes anyway holds everything the table needs, and one
pass over its events in plain Python took 0.7 s (benchmarks/profile_cost.py). The rules are
key_averages' own, so the numbers are the same (tests/test_operators.py compares the
two on one profile):

- a host event's parent is the innermost event of the same thread whose range holds it
  (sorted by start, then longest first); its self time is its duration less its
  children's durations;
- a ``[memory]`` event belongs to every host event whose range holds it, on any thread;
  an event's self memory is its total less its children's totals, and memory events
  that no host event holds form a ``[memory]`` row of their own;
- a kernel, copy or fill counts toward the self device time of the operator whose
  External id it carries (the one that launched it);
- numbered profiler steps are one row (``ProfilerStep*``), and the profiler's own
  bookkeeping operators are left out.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from perflab.formats.profile_json import Busy, OpRow
from perflab.profile.families import busy_summary, classify
from perflab.profile.trace_events import MEMORY_CATEGORY, TraceEvent, trace_events

# host-side events: operators, record_function ranges, Python functions (with_stack)
# and the CUDA runtime and driver calls operators make (their time is not the
# operator's own, as in key_averages)
HOST_CATEGORIES = frozenset(
    ["cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver"]
)
DEVICE_CATEGORIES = frozenset(["kernel", "gpu_memcpy", "gpu_memset"])
# what torch.autograd.profiler_util._filter_name leaves out of the table
BOOKKEEPING = frozenset(
    [
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    ]
)
MEMORY_EVENT = "[memory]"
# c10::DeviceType values whose allocations key_averages counts as CPU memory: CPU,
# MKLDNN, IDEEP
CPU_MEMORY_DEVICES = frozenset([0, 2, 5])
# what the table reads: host events, the kernels they launched, and memory records
READ_CATEGORIES = HOST_CATEGORIES | DEVICE_CATEGORIES | {MEMORY_CATEGORY}


@dataclass
class _Span:
    """One host event, in integer nanoseconds of the trace's clock."""

    name: str
    shapes: str
    thread: tuple[object, object]
    start: int
    end: int
    annotation: bool
    external_id: int | None
    parent: _Span | None = None
    children: list[_Span] = field(default_factory=list, repr=False)
    memory: int = 0
    device_us: float = 0.0


def _ns(us: float) -> int:
    return round(us * 1000)


def _spans(events: list[TraceEvent]) -> list[_Span]:
    spans = []
    for e in events:
        if e.phase != "X" or e.category not in HOST_CATEGORIES or e.name in BOOKKEEPING:
            continue
        start = _ns(e.start_us)
        spans.append(
            _Span(
                name="ProfilerStep*" if e.name.startswith("ProfilerStep#") else e.name,
                shapes=_shapes(e.input_dims),
                thread=e.thread,
                start=start,
                end=start + _ns(e.duration_us),
                annotation=e.category == "user_annotation",
                # of host events, only an operator's id correlates its launches
                external_id=e.external_id if e.category == "cpu_op" else None,
            )
        )
    return spans


def _shapes(dims: Sequence[Any]) -> str:
    """The input shapes as key_averages writes them: a list of tensors (the trace's
    nested list) has no shape there."""
    flat = [
        [] if isinstance(dim, list) and any(isinstance(d, list) for d in dim) else dim
        for dim in dims
    ]
    return str(flat)[:200]


def _nest(spans: list[_Span]) -> None:
    """Each span's parent: the innermost span of its thread that holds it."""
    by_thread: dict[tuple[object, object], list[_Span]] = defaultdict(list)
    for span in spans:
        by_thread[span.thread].append(span)
    for thread_spans in by_thread.values():
        thread_spans.sort(key=lambda s: (s.start, -s.end))
        open_spans: list[_Span] = []
        for span in thread_spans:
            while open_spans:
                parent = open_spans[-1]
                if span.start >= parent.end or span.end > parent.end:
                    open_spans.pop()
                    continue
                span.parent = parent
                parent.children.append(span)
                break
            open_spans.append(span)


def _merge_redispatches(spans: list[_Span]) -> list[_Span]:
    """key_averages' EventList._remove_dup_nodes: an operator that is the only child of
    an operator of the same name (aten::mean calling aten::mean.dim) is one call; the
    parent takes its children and its kernels."""
    while True:
        gone = set()
        for span in spans:
            parent = span.parent
            if parent is not None and parent.name == span.name and len(parent.children) == 1:
                parent.children = span.children
                for child in span.children:
                    child.parent = parent
                parent.device_us = span.device_us
                gone.add(id(span))
        if not gone:
            return spans
        spans = [s for s in spans if id(s) not in gone]


def _memory(events: list[TraceEvent], spans: list[_Span]) -> tuple[int, int]:
    """Give every span the CPU memory allocated (and, negative, freed) inside its
    range; return the count and the bytes of the memory events no span holds."""
    records = sorted(
        (_ns(e.start_us), _cpu_bytes(e))
        for e in events
        if e.phase == "i" and e.name == MEMORY_EVENT
    )
    if not records:
        return 0, 0
    times = [t for t, _ in records]
    running = list(itertools.accumulate((b for _, b in records), initial=0))
    held = [0] * (len(records) + 1)  # +1/-1 marks: how many spans hold record i
    for span in spans:
        lo = bisect.bisect_left(times, span.start)
        hi = bisect.bisect_right(times, span.end)
        span.memory = running[hi] - running[lo]
        held[lo] += 1
        held[hi] -= 1
    depth, alone, alone_bytes = 0, 0, 0
    for i, (_, nbytes) in enumerate(records):
        depth += held[i]
        if depth == 0:
            alone += 1
            alone_bytes += nbytes
    return alone, alone_bytes


def _cpu_bytes(record: TraceEvent) -> int:
    return record.bytes if record.device_type in CPU_MEMORY_DEVICES else 0


def _device_time(events: list[TraceEvent], spans: list[_Span]) -> None:
    by_id = {s.external_id: s for s in spans if s.external_id is not None}
    for e in events:
        if e.phase != "X" or e.category not in DEVICE_CATEGORIES or e.external_id is None:
            continue
        launcher = by_id.get(e.external_id)
        if launcher is not None:
            launcher.device_us += e.duration_us


@dataclass
class OperatorTable:
    rows: list[OpRow]
    # CPU busy time in outermost ATen operators over the profiled steps
    busy: Busy


def read(trace: dict[str, Any]) -> OperatorTable:
    """The operator table (key_averages grouped by input shape) and the CPU busy time
    of a trace."""
    return table_of(trace_events(trace, READ_CATEGORIES))


def table_of(events: list[TraceEvent]) -> OperatorTable:
    """read over parsed events (of READ_CATEGORIES, a superset of what
    perflab.profile.attribution reads: one parse can serve both)."""
    spans = _spans(events)
    _nest(spans)
    alone, alone_bytes = _memory(events, spans)
    _device_time(events, spans)
    spans = _merge_redispatches(spans)
    rows = _rows(spans)
    if alone:
        rows.append(_alone_memory_row(alone, alone_bytes))
    return OperatorTable(rows, _busy(spans))


def _alone_memory_row(count: int, nbytes: int) -> OpRow:
    """The ``[memory]`` row: allocations that no host event holds."""
    return OpRow(
        name=MEMORY_EVENT,
        family=classify(MEMORY_EVENT),
        calls=count,
        self_cpu_us=0.0,
        self_device_us=0.0,
        self_cpu_memory_bytes=nbytes,
        input_shapes="[]",
        annotation=False,
    )


def _rows(spans: list[_Span]) -> list[OpRow]:
    grouped: dict[tuple[str, str, bool], list[_Span]] = defaultdict(list)
    for s in spans:
        grouped[(s.name, s.shapes, s.annotation)].append(s)
    rows = []
    for (name, shapes, annotation), members in grouped.items():
        rows.append(
            OpRow(
                name=name,
                family=classify(name),
                calls=len(members),
                self_cpu_us=sum(_self_ns(s) for s in members) / 1000,
                self_device_us=sum(s.device_us for s in members),
                self_cpu_memory_bytes=sum(
                    s.memory - sum(c.memory for c in s.children) for s in members
                ),
                input_shapes=shapes,
                annotation=annotation or name.startswith("ProfilerStep"),
            )
        )
    return rows


def _self_ns(span: _Span) -> int:
    return span.end - span.start - sum(c.end - c.start for c in span.children)


def _busy(spans: list[_Span]) -> Busy:
    """On CPU: the share of the profiled steps spent inside outermost ATen operators
    (the rest is Python and the framework). On CUDA perflab.profile.attribution measures
    device busy time from the kernels instead."""

    def nested(s: _Span) -> bool:
        parent = s.parent
        while parent is not None:
            if parent.name.startswith("aten::"):
                return True
            parent = parent.parent
        return False

    windows = [(s.start / 1000, s.end / 1000) for s in spans if s.name == "ProfilerStep*"]
    outermost = [
        (s.start / 1000, s.end / 1000)
        for s in spans
        if s.name.startswith("aten::") and not nested(s)
    ]
    return busy_summary(
        outermost, windows, "outermost ATen operators on the CPU (the rest is Python and framework)"
    )
