"""Where the device time of a profiled trial went, read from its Chrome trace.

Every kernel, copy and fill in a CUDA trace carries the External id of the CPU operator
that launched it (the profiler's correlation between a launch and its kernel). Each
device event is counted exactly once: under its launching operator in the operator
table, and under one family, so the family totals add up to the trace's kernel + copy +
fill time. Name rules decide a family only where the launcher says nothing about the
work (a compiled graph's wrapper, an Inductor launcher, no operator at all).

Host-side ranges (record_function annotations such as ``## Call CompiledFxGraph ##`` or
``Optimizer.step#SGD.step``, and their ``gpu_user_annotation`` mirrors on the device
timeline) are not work: they go to a host table of their own and never count as busy.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from perflab.formats.profile_json import Busy, KernelRow, OpRow, RangeRow
from perflab.profile.families import classify, union_us
from perflab.profile.trace_events import TraceEvent, trace_events

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# host annotations: record_function ranges, the profiler steps (ProfilerStep#N) among them
ANNOTATION_CATEGORY = "user_annotation"
# what the device side reads: device events, the operators that launched them, and the
# annotations (the profiler steps are its window)
READ_CATEGORIES = frozenset([*DEVICE_CATEGORIES, "cpu_op", ANNOTATION_CATEGORY])
# launchers whose name says what the kernel does; a wrapper (CompiledFunction, the
# autograd engine, a Python function) leaves the family to the kernel's name
UNINFORMATIVE = ("aten", "other")
# ProfilerStep#3 and ProfilerStep#4 are one row of the host table
_NUMBERED = re.compile(r"#\d+$")
# the first template argument of the kernel, when it is a bare identifier
_FIRST_TEMPLATE_ARGUMENT = re.compile(r"^[^<(]*<([A-Za-z_][A-Za-z0-9_]*)[,>]")


@dataclass(frozen=True)
class DeviceEvent:
    name: str
    category: str
    start_us: float
    duration_us: float
    # the CPU operator that launched it (None: launched outside any operator)
    launcher: str | None
    launch_id: int | None
    family: str


def short_kernel_name(name: str, limit: int = 80) -> str:
    """A kernel name a reader can take in: C++ templates and argument lists dropped
    (``void at::native::reduce_kernel<128, 4, ...>(...)`` becomes
    ``at::native::reduce_kernel``), anonymous namespaces elided, at most ``limit``
    characters. A first template argument that is a plain identifier is what names a
    generic launcher's kernel, so it stays (``cutlass::Kernel2<cutlass_80_simt_sgemm_...>``)."""
    out, depth = [], 0
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    short = "".join(out).replace("::::", "::").strip()
    short = re.sub(r"^(void|__global__)\s+", "", short).replace(" ", "")
    named = _FIRST_TEMPLATE_ARGUMENT.search(name)
    if named and short and not short.endswith(">"):
        short = f"{short}<{named.group(1)}>"
    short = short or name
    return short if len(short) <= limit else short[: limit - 3] + "..."


def family_of(kernel: str, category: str, launcher: str | None) -> str:
    """The launching operator's family when its name tells the kind of work; otherwise
    the kernel's own name; copies and fills are data movement whoever launched them."""
    if category in ("gpu_memcpy", "gpu_memset"):
        return "memcpy/memset"
    by_launcher = classify(launcher) if launcher is not None else "other"
    if by_launcher not in (*UNINFORMATIVE, "perflab phase"):
        return by_launcher
    by_name = classify(kernel)
    return by_name if by_name != "other" else by_launcher


def device_events(trace: dict[str, Any]) -> list[DeviceEvent]:
    """Every kernel, copy and fill of the trace with its launching operator."""
    return launched_events(trace_events(trace, READ_CATEGORIES))


def launched_events(events: list[TraceEvent]) -> list[DeviceEvent]:
    """Every kernel, copy and fill among the events with its launching operator."""
    launchers = {
        e.external_id: e.name
        for e in events
        if e.category == "cpu_op" and e.external_id is not None
    }
    out = []
    for e in events:
        if e.category not in DEVICE_CATEGORIES or e.phase != "X":
            continue
        launch_id = e.external_id
        launcher = launchers.get(launch_id) if launch_id is not None else None
        out.append(
            DeviceEvent(
                name=e.name,
                category=e.category,
                start_us=e.start_us,
                duration_us=e.duration_us,
                launcher=launcher,
                launch_id=launch_id,
                family=family_of(e.name, e.category, launcher),
            )
        )
    return out


def family_totals(events: list[DeviceEvent]) -> dict[str, float]:
    """Device time (us) per family, largest first; every event counted once."""
    totals: dict[str, float] = defaultdict(float)
    for e in events:
        totals[e.family] += e.duration_us
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def operator_table(events: list[DeviceEvent], top: int) -> list[OpRow]:
    """Device time per launching operator: the operators whose kernels took the time.
    Kernels launched outside any operator are listed under their own short name. The
    CPU columns are the operator table's (perflab.profile.capture fills them in)."""
    time: dict[str, float] = defaultdict(float)
    launches: dict[str, set[int]] = defaultdict(set)
    kernels: Counter[str] = Counter()
    families: dict[str, Counter[str]] = defaultdict(Counter)
    for e in events:
        key = e.launcher or short_kernel_name(e.name)
        time[key] += e.duration_us
        kernels[key] += 1
        families[key][e.family] += int(e.duration_us * 1000)
        if e.launch_id is not None:
            launches[key].add(e.launch_id)
    ranked = sorted(time, key=lambda k: -time[k])[:top]
    return [
        OpRow(
            name=k,
            family=families[k].most_common(1)[0][0],
            calls=len(launches[k]) or kernels[k],
            kernels=kernels[k],
            self_device_us=time[k],
            self_cpu_us=0.0,
            self_cpu_memory_bytes=0,
            input_shapes="",
        )
        for k in ranked
    ]


def kernel_table(events: list[DeviceEvent], top: int) -> list[KernelRow]:
    """Device time per kernel (short name) and launching operator: the same generic
    kernel (at::native::vectorized_elementwise_kernel) is a dtype conversion under
    aten::copy_ and arithmetic under aten::mul."""
    time: dict[tuple[str, str], float] = defaultdict(float)
    count: Counter[tuple[str, str]] = Counter()
    family: dict[tuple[str, str], str] = {}
    for e in events:
        key = (short_kernel_name(e.name), e.launcher or "-")
        time[key] += e.duration_us
        count[key] += 1
        family[key] = e.family  # one launcher and one name: one family
    ranked = sorted(time, key=lambda k: -time[k])[:top]
    return [
        KernelRow(
            name=name,
            family=family[(name, launcher)],
            count=count[(name, launcher)],
            device_us=time[(name, launcher)],
            launched_by=launcher,
        )
        for name, launcher in ranked
    ]


def host_table(trace: dict[str, Any], top: int) -> list[RangeRow]:
    """Host-side annotation ranges (record_function) by name: CPU wall time inside
    them, not device work. Numbered ones (ProfilerStep#N) are one row."""
    return annotation_table(trace_events(trace, [ANNOTATION_CATEGORY]), top)


def annotation_table(events: list[TraceEvent], top: int) -> list[RangeRow]:
    """host_table over parsed events."""
    time: dict[str, float] = defaultdict(float)
    count: Counter[str] = Counter()
    for e in events:
        if e.category == ANNOTATION_CATEGORY and e.phase == "X":
            key = _NUMBERED.sub("#*", e.name)
            time[key] += e.duration_us
            count[key] += 1
    ranked = sorted(time, key=lambda k: -time[k])[:top]
    return [RangeRow(name=k, count=count[k], cpu_us=time[k]) for k in ranked]


def step_windows(events: list[TraceEvent]) -> list[tuple[float, float]]:
    """The profiled steps' CPU-side ranges (ProfilerStep#N)."""
    return [
        (e.start_us, e.start_us + e.duration_us)
        for e in events
        if e.phase == "X" and e.name.startswith("ProfilerStep#")
    ]


def device_busy(events: list[DeviceEvent], windows: list[tuple[float, float]]) -> Busy:
    """How much of the profiled steps the device was busy with kernels, copies and
    fills (overlaps counted once), measured the way HolisticTraceAnalysis's temporal
    breakdown does: from the first device event to the last, so the host time before
    the first launch and after the last kernel does not count as device idle."""
    spans = [(e.start_us, e.start_us + e.duration_us) for e in events]
    durations = sorted(e.duration_us for e in events)
    if not spans:
        return Busy(
            basis="CUDA kernels, copies and fills (none recorded)",
            window_us=0.0,
            busy_us=0.0,
            idle_us=0.0,
            busy_share=None,
            intervals=0,
            median_interval_us=None,
        )
    if windows:
        lo, hi = min(s for s, _ in windows), max(e for _, e in windows)
        inside = [(s, e) for s, e in spans if e > lo and s < hi]
        spans = inside or spans
    window = (min(s for s, _ in spans), max(e for _, e in spans))
    busy_us = union_us(spans, window)
    window_us = window[1] - window[0]
    return Busy(
        basis="CUDA kernels, copies and fills, from the first to the last of them",
        window_us=window_us,
        busy_us=busy_us,
        idle_us=window_us - busy_us,
        busy_share=busy_us / window_us if window_us else None,
        intervals=len(spans),
        median_interval_us=durations[len(durations) // 2],
    )


@dataclass(frozen=True)
class DeviceSide:
    """What profile.json holds of a CUDA trace: families, operators, kernels, host
    annotations, busy/idle, and the trace's own device total to check them by."""

    # device time per family, us, largest first; every event counted once
    families_us: dict[str, float]
    # the trace's kernel, copy and fill time, us
    device_total_us: float
    # the costliest launching operators (their CPU columns left at 0)
    top_ops: list[OpRow]
    # the costliest kernels with their launching operators
    top_kernels: list[KernelRow]
    # host-side record_function ranges
    host_annotations: list[RangeRow]
    # device busy and idle time of the profiled steps
    busy: Busy


def attribute(trace: dict[str, Any], top: int) -> DeviceSide:
    """The device side of profile.json from a CUDA trace."""
    return device_side(trace_events(trace, READ_CATEGORIES), top)


def device_side(parsed: list[TraceEvent], top: int) -> DeviceSide:
    """attribute over parsed events (of READ_CATEGORIES or more: each reader here picks
    its own categories)."""
    events = launched_events(parsed)
    return DeviceSide(
        families_us=family_totals(events),
        device_total_us=sum(e.duration_us for e in events),
        top_ops=operator_table(events, top),
        top_kernels=kernel_table(events, top),
        host_annotations=annotation_table(parsed, top),
        busy=device_busy(events, step_windows(parsed)),
    )
