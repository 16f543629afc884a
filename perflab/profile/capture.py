"""The profiling pass: one separate, untimed trial per variant under torch.profiler.

Profiling costs time (every op is recorded), so it never shares a process with a timed
trial and its numbers never enter the statistics. The trial builds the variant exactly
like a timed one, runs its first call, then steps under a profiler schedule (wait,
warm-up, active), with a record_function range around every phase of the step. It
writes a compressed Chrome/Perfetto trace and profile.json (perflab.formats.profile_json)
with the operator table (read from that trace: perflab.profile.operators) and the time
per kernel family.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perflab.config.schema import ProfilingConfig
from perflab.formats.atomic import replaced_whole
from perflab.formats.profile_json import (
    TOP_OPS,
    Busy,
    MemorySnapshot,
    OpRow,
    Overhead,
    Profile,
    RangeRow,
    TraceFile,
)
from perflab.formats.sweepdir import TRACE_DIR, TRACE_FILE
from perflab.profile.attribution import DeviceSide
from perflab.profile.families import family_times

PHASE_PREFIX = "perflab/"


class PhaseMarks:
    """The ``mark`` the step closure calls at the end of each phase: it closes that
    phase's record_function range and opens the next, so the trace shows the data, h2d,
    forward, backward and optimizer phases of every step."""

    def __init__(self, phases: tuple[str, ...]) -> None:
        import torch

        self._record = torch.profiler.record_function
        self._phases = phases
        self._i = 0
        self._open: Any = None

    def begin_step(self) -> None:
        self._i = 0
        self._enter()

    def __call__(self) -> None:
        self._open.__exit__(None, None, None)
        self._i += 1
        if self._i < len(self._phases):
            self._enter()

    def _enter(self) -> None:
        self._open = self._record(PHASE_PREFIX + self._phases[self._i])
        self._open.__enter__()


def profile_steps(
    step: Callable[[Iterator[Any], Callable[[], None]], None],
    source: Iterator[Any],
    phases: tuple[str, ...],
    device: str,
    settings: ProfilingConfig,
) -> tuple[Any, float]:
    """Run wait + warmup + active steps under the profiler (``settings``: the schedule
    and what to record); return the profiler and the mean wall time of the active
    (recorded) steps, in seconds."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler import schedule as make_schedule

    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    marks = PhaseMarks(phases)
    recorded: list[float] = []
    first_active = settings.wait + settings.warmup
    with (
        _quiet_stderr(),
        profile(
            activities=activities,
            schedule=make_schedule(
                wait=settings.wait, warmup=settings.warmup, active=settings.active, repeat=1
            ),
            record_shapes=settings.shapes,
            profile_memory=settings.memory,
            with_stack=settings.stacks,
        ) as prof,
    ):
        for i in range(first_active + settings.active):
            start = time.perf_counter()
            marks.begin_step()
            step(source, marks)
            if device == "cuda":
                torch.cuda.synchronize()
            if i >= first_active:
                recorded.append(time.perf_counter() - start)
            prof.step()
    return prof, sum(recorded) / len(recorded)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The profiler's C++ side prints a "USDT ... profiler_start/stop" line to stderr at
    every start and stop (docs/design.md#profiling); in a trial process nothing else writes there
    meanwhile, so the lines are dropped instead of cluttering the sweep's output."""
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


# free space below which a failed trace export is taken for a full disk
FULL_DISK_BYTES = 2**20


@dataclass(frozen=True)
class ExportedTrace:
    """The profiler's Chrome/Perfetto trace, parsed for the tables and as JSON text for
    the file: writing the exporter's own text back costs nothing, serialising the parsed
    trace again 0.3-0.6 s for the convnet (benchmarks/RESULTS.md)."""

    events: dict[str, Any]
    text: bytes


# HTA reads the rank from here; a single-process trial is rank 0
DISTRIBUTED_INFO = {"rank": 0, "world_size": 1}


def export_trace(prof: Any, profile_dir: Path) -> ExportedTrace:
    """The profiler's trace (exported through a scratch file in profile_dir/trace/, which
    is removed), with ``distributedInfo`` added where the exporter left it out."""
    directory = profile_dir / TRACE_DIR
    directory.mkdir(parents=True, exist_ok=True)
    raw = directory / "export.json"
    try:
        prof.export_chrome_trace(str(raw))
        text = raw.read_bytes()
        trace: dict[str, Any] = json.loads(text)
    except (OSError, ValueError) as exc:
        # the exporter does not report a full disk: it leaves no file (FileNotFoundError
        # here) or a truncated one; say what it was, so the sweep stops as for a full disk
        if shutil.disk_usage(directory).free < FULL_DISK_BYTES:
            raise OSError(errno.ENOSPC, f"no space left to export the trace ({exc})") from exc
        raise
    finally:
        raw.unlink(missing_ok=True)
    if "distributedInfo" not in trace:
        text = _with_first_key("distributedInfo", DISTRIBUTED_INFO, text)
        trace["distributedInfo"] = dict(DISTRIBUTED_INFO)
    return ExportedTrace(trace, text)


def _with_first_key(key: str, value: Any, text: bytes) -> bytes:
    """A JSON object's text with one more key in front of the others (if it has any)."""
    entry = json.dumps({key: value})[1:-1].encode()
    rest = text[text.index(b"{") + 1 :]
    return b"{" + entry + (b"" if rest.lstrip().startswith(b"}") else b",") + rest


def write_trace(exported: ExportedTrace, profile_dir: Path, max_bytes: int) -> TraceFile:
    """Write the trace's text gzipped into profile_dir/trace/ and keep it only within the
    size bound; its ``trace`` is its path relative to profile_dir."""
    directory = profile_dir / TRACE_DIR
    directory.mkdir(parents=True, exist_ok=True)
    packed = gzip.compress(exported.text, compresslevel=6)
    if len(packed) > max_bytes:
        directory.rmdir()
        return TraceFile(
            trace=None,
            trace_bytes=len(packed),
            trace_note=f"trace of {len(packed)} bytes exceeds the {max_bytes}-byte "
            "bound; lower profile.active or turn off shapes/stacks",
        )
    with replaced_whole(directory / TRACE_FILE) as tmp:
        tmp.write_bytes(packed)
    return TraceFile(trace=f"{TRACE_DIR}/{TRACE_FILE}", trace_bytes=len(packed))


# what the times of families_us and top_ops are, on each side
CPU_TIME_BASIS = "self CPU time"
DEVICE_TIME_BASIS = "device time of the kernels, copies and fills each operator launched"


def profile_of(
    *,
    variant: dict[str, Any],
    device: str,
    rows: list[OpRow],
    trace_file: TraceFile,
    overhead: Overhead,
    profiled_steps: int,
    busy: Busy | None = None,
    host_annotations: list[RangeRow] | None = None,
    memory_snapshot: MemorySnapshot | None = None,
    device_side: DeviceSide | None = None,
) -> Profile:
    """profile.json's content. On CPU the families, operators and busy time come from the
    operator table (``rows``, ``busy``); on CUDA ``device_side``
    (perflab.profile.attribution.attribute over the trace) supplies them, with the
    kernels and the host ranges."""
    work = [r for r in rows if r.family != "perflab phase" and not r.annotation]
    on_cpu = Profile(
        variant=variant,
        device=device,
        profiled_steps=profiled_steps,
        time_basis=CPU_TIME_BASIS,
        families_us=family_times(rows, device=False),
        top_ops=sorted(work, key=lambda r: -r.self_cpu_us)[:TOP_OPS],
        host_annotations=host_annotations,
        busy=busy,
        top_memory=sorted(
            (r for r in rows if r.self_cpu_memory_bytes > 0),
            key=lambda r: -r.self_cpu_memory_bytes,
        )[:TOP_OPS],
        phases_us={
            r.name[len(PHASE_PREFIX) :]: r.self_cpu_us + 0.0
            for r in rows
            if r.family == "perflab phase"
        },
        trace_file=trace_file,
        overhead=overhead,
        memory_snapshot=memory_snapshot,
    )
    if device_side is None:
        return on_cpu
    return replace(
        on_cpu,
        time_basis=DEVICE_TIME_BASIS,
        families_us=device_side.families_us,
        device_total_us=device_side.device_total_us,
        top_ops=[_with_cpu_columns(op, rows) for op in device_side.top_ops],
        top_kernels=device_side.top_kernels,
        host_annotations=device_side.host_annotations,
        busy=device_side.busy,
    )


def _with_cpu_columns(op: OpRow, rows: list[OpRow]) -> OpRow:
    """A device operator row with the operator table's CPU columns (summed over input
    shapes; the shapes of its costliest call)."""
    same = sorted((r for r in rows if r.name == op.name), key=lambda r: -r.self_device_us)
    return replace(
        op,
        self_cpu_us=sum(r.self_cpu_us for r in same),
        self_cpu_memory_bytes=sum(r.self_cpu_memory_bytes for r in same),
        input_shapes=same[0].input_shapes if same else "",
    )
