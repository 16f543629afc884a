"""profile.json as typed dataclasses: what one variant's profiling trial recorded
(perflab.profile.capture builds it, perflab.measure.profiling_pass writes it), read back by
the report and the diagnosis with every value checked against its field's type.

The dataclasses' fields are profile.json's keys in the order they are written; the
encoding (keys written only when they apply, the trace's keys inline) is
perflab.formats.dataclass_json's. A file that cannot be used (not JSON, another schema,
a value missing or of the wrong kind: a hand-edited or hostile file once held only
"trace") is refused with ProfileError, naming the file and the field; the report then
skips it and says so, as it does an unreadable record.

Schema history:
  1 (2026-11-22) the dict the profiling pass wrote, which grew from commit to commit:
     ``profiled_steps``, then ``busy`` and ``memory_snapshot`` (2026-11-22); on
     2026-11-23 ``host_annotations``, and on CUDA ``device_total_us``, ``top_kernels``
     and the operator rows' ``kernels`` (the rows' ``annotation`` on CPU). The keys came
     in the order each piece was added, so the CPU and the CUDA files differed in order.
     Still read, every form of it: what an older form lacks is optional here, and its
     overhead ratio, NaN where there was no unprofiled step, reads as null.
  2 (2026-11-26) version 1's last keys and values, in one order on both devices (these
     dataclasses' fields); an overhead ratio without an unprofiled step is null.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.errors import RecordError
from perflab.formats.dataclass_json import (
    SchemaError,
    decode,
    encode,
    inline,
    read_version,
    written_when,
)
from perflab.formats.json_file import read_json
from perflab.formats.records import write_json_atomic

PROFILE_SCHEMA_VERSION = 2
SUPPORTED_PROFILE_VERSIONS = (1, 2)
# rows kept in each table of the file
TOP_OPS = 15
# the devices a profiling trial runs on
DEVICES = ("cpu", "cuda")


class ProfileError(RecordError):
    """A profile.json that cannot be used: not JSON, another schema_version, or a field
    missing, unknown or of the wrong kind (named in the message)."""


@dataclass(frozen=True, kw_only=True)
class OpRow:
    """One operator (on CPU: one operator and input shapes) of the operator table
    (perflab.profile.operators), or on CUDA one launching operator of the kernels
    (perflab.profile.attribution)."""

    # the operator's name (a kernel launched outside any operator: its short name)
    name: str
    # its kernel family (perflab.profile.families)
    family: str
    # calls in the profiled steps
    calls: int
    # self CPU time, us (on CUDA summed over the operator's input shapes)
    self_cpu_us: float
    # self device time, us: on CUDA the kernels, copies and fills it launched
    self_device_us: float
    # CPU memory allocated less freed in its own code, bytes (negative: it freed more)
    self_cpu_memory_bytes: int
    # input shapes as torch.profiler writes them ("" when not recorded)
    input_shapes: str
    # a record_function range (ProfilerStep#N, ## Call CompiledFxGraph ##): host time
    # around work, never work itself; None on CUDA rows and in the oldest files
    annotation: bool | None = written_when()
    # CUDA: kernels, copies and fills it launched
    kernels: int | None = written_when()


@dataclass(frozen=True, kw_only=True)
class KernelRow:
    """One CUDA kernel (short name) under one launching operator."""

    # the kernel's short name (perflab.profile.attribution.short_kernel_name)
    name: str
    # its kernel family
    family: str
    # launches in the profiled steps
    count: int
    # device time, us
    device_us: float
    # the operator that launched it ("-": none)
    launched_by: str


@dataclass(frozen=True, kw_only=True)
class RangeRow:
    """One host-side record_function range, by name (ProfilerStep#N are one row)."""

    # the range's name
    name: str
    # how many times it was entered
    count: int
    # CPU wall time inside it, inclusive, us
    cpu_us: float


@dataclass(frozen=True, kw_only=True)
class Busy:
    """How much of the profiled steps the device (on CPU: the outermost ATen operators)
    was busy, overlaps counted once."""

    # what counts as busy, in words
    basis: str
    # the window measured, us
    window_us: float
    # busy time in it, us
    busy_us: float
    # the rest, us
    idle_us: float
    # busy_us / window_us (None: an empty window)
    busy_share: float | None
    # busy intervals counted
    intervals: int
    # their median length, us (None: none)
    median_interval_us: float | None


@dataclass(frozen=True, kw_only=True)
class Overhead:
    """What profiling cost a step: the profiler's own work, not the model's."""

    # the median of three unprofiled steps run just before, s
    unprofiled_step_s: float
    # the mean of the profiled steps, s
    profiled_step_s: float
    # profiled / unprofiled (None: no unprofiled time to divide by)
    ratio: float | None


@dataclass(frozen=True, kw_only=True)
class TraceFile:
    """The Chrome/Perfetto trace beside profile.json, or why it was not kept."""

    # its path relative to the profile directory (None: not kept)
    trace: str | None
    # its size, gzip-compressed
    trace_bytes: int
    # why it was not kept (over profiling.max_trace_mb)
    trace_note: str | None = written_when()


@dataclass(frozen=True, kw_only=True)
class MemorySnapshot:
    """The CUDA memory snapshot of the profiled steps, or why there is none."""

    # its file name in the profile directory (None: not written)
    file: str | None
    # how to open it, or why it was not written
    note: str


@dataclass(frozen=True, kw_only=True)
class Profile:
    """A variant's profile.json: where the time of its profiled steps went."""

    # the file's schema version (history above)
    schema_version: int = PROFILE_SCHEMA_VERSION
    # the variant's choices and settings, as its trial request held them
    variant: dict[str, Any]
    # "cpu" or "cuda"
    device: str
    # steps recorded (profiling.active): per-step times divide by it (None: a file
    # written before perflab recorded it)
    profiled_steps: int | None = written_when()
    # what the times of families_us and top_ops are, in words
    time_basis: str
    # time per kernel family over the profiled steps, us, largest first
    families_us: dict[str, float]
    # CUDA: the trace's kernel, copy and fill time, us (families_us adds up to it)
    device_total_us: float | None = written_when()
    # the costliest operators (at most TOP_OPS)
    top_ops: list[OpRow]
    # CUDA: the costliest kernels with their launching operators
    top_kernels: list[KernelRow] | None = written_when()
    # host-side record_function ranges, longest first
    host_annotations: list[RangeRow] | None = written_when()
    # busy and idle time of the profiled steps
    busy: Busy | None = written_when()
    # the operators that kept the most CPU memory
    top_memory: list[OpRow]
    # CPU time of each step phase's range (perflab/forward, ...), us
    phases_us: dict[str, float]
    # the trace file
    trace_file: TraceFile = inline("trace_bytes")
    # what profiling cost a step
    overhead: Overhead
    # the memory snapshot (None: a file written before snapshots existed)
    memory_snapshot: MemorySnapshot | None = written_when()

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    def to_dict(self) -> dict[str, Any]:
        """profile.json's object, key for key."""
        return encode(self)

    @classmethod
    def from_dict(cls, data: Any) -> Profile:
        """A profile of any supported schema_version; SchemaError names a bad field."""
        profile = decode(cls, _current(data))
        problem = _problem(profile)
        if problem:
            raise SchemaError(problem)
        return profile


# --- files ------------------------------------------------------------------------------


def write_profile(path: Path, profile: Profile) -> None:
    """Write profile.json atomically (perflab.formats.records.write_json_atomic)."""
    write_json_atomic(path, profile.to_dict())


def read_profile(path: Path) -> Profile:
    """The profile at ``path``; ProfileError naming the file and what is wrong with it."""
    try:
        data = read_json(path)  # not JSON, or nested deeper than any profile: ValueError
    except (OSError, ValueError) as exc:
        raise ProfileError(f"{path}: not a readable profile.json ({exc})") from exc
    try:
        return Profile.from_dict(data)
    except SchemaError as exc:
        raise ProfileError(f"{path}: {exc}") from exc


def load_profile(path: Path) -> Profile | None:
    """The profile at ``path``; None when there is none or it cannot be used."""
    try:
        return read_profile(path)
    except ProfileError:
        return None


# --- checks beyond the types ------------------------------------------------------------


def _current(data: Any) -> Any:
    """The object in the current version's form: a version 1 object's NaN ratio made
    null, a newer or unknown schema_version refused."""
    if not isinstance(data, dict):
        raise SchemaError(f"not a perflab profile (a JSON {type(data).__name__})")
    version = read_version(data, PROFILE_SCHEMA_VERSION, SUPPORTED_PROFILE_VERSIONS, None)
    overhead = data.get("overhead")
    if version == 1 and isinstance(overhead, dict) and _nan(overhead.get("ratio")):
        return {**data, "overhead": {**overhead, "ratio": None}}
    return data


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _problem(profile: Profile) -> str | None:
    """The first value the report cannot use although its type fits, as "field: why"."""
    if profile.device not in DEVICES:
        return f"device={profile.device!r}: not one of {', '.join(DEVICES)}"
    steps = profile.profiled_steps
    if steps is not None and steps < 1:
        return f"profiled_steps={steps!r}: not a step count >= 1"
    counts = (
        ("top_ops", "calls", [r.calls for r in profile.top_ops]),
        ("top_kernels", "count", [r.count for r in profile.top_kernels or []]),
        ("host_annotations", "count", [r.count for r in profile.host_annotations or []]),
    )
    for table, field, values in counts:
        bad = next((i for i, n in enumerate(values) if n < 0), None)
        if bad is not None:
            return f"{table}[{bad}].{field}={values[bad]}: not a count >= 0"
    return None
