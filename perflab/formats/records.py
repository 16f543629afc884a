"""Trial records: one JSON file per trial, written atomically, read back strictly.

Raw samples are the truth; every summary is recomputed from them (:mod:`perflab.analysis.stats`).
Every field and its unit is documented in docs/records.md.

Schema history:
  1 (2026-11-22) first version.
  2 (2026-11-23) samples: warm-up as samples with their step counts
     (``warmup_sample_ns``, ``warmup_sample_steps``, replacing ``warmup_step_ns``), why
     and when the warm-up stopped (``warmup_stop``, ``warmup_s``) and how the timed
     block's length was set (``length``, ``length_from_round``). Version 1 records are
     still read: their warm-up steps become one-step samples.
  3 (2026-11-23) ``checksum``: "sha256:" and the hex digest of the record's canonical JSON
     without it (record_checksum), so that a value changed by hand after the trial wrote
     it is noticed. Versions 1 and 2 have none and are read as before.
  4 (2026-11-23) ``worker``: the process the trial ran in (isolation "worker" or
     "process", the worker's number in its variant, the trial's index in that worker, its
     pid) and ``cost_s``: what the trial cost, in seconds, by part (start, build,
     first_call, warmup, timed, checks). Earlier records have neither: each ran in a fresh
     process, and its costs were not written down.
  5 (2026-11-24) ``samples.warmup_kept``: how many of the warm-up's last samples open the
     timed block (trial.keep_steady_window); ``timed_s`` counts their time and
     ``warmup_s`` no longer does. Earlier records kept none (0).
  6 (2026-11-26) ``session``: which session of a resumed sweep ran the trial (0 the
     first, then one more per entry of experiment.json's ``resumed``), so that a round is
     paired only within one session (perflab.analysis.sessions). Earlier records have
     None: their session is told from their start time (sessions.of_record).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from perflab.errors import ConfigError, RecordError
from perflab.formats.atomic import temporary_beside
from perflab.formats.dataclass_json import SchemaError, decode, encode
from perflab.formats.json_file import read_json
from perflab.formats.sweepdir import broken_link
from perflab.formats.trial_parts import (
    CostParts,
    KnobEvidence,
    TrialMemory,
    TrialTelemetry,
    TrialWorker,
)

SCHEMA_VERSION = 6
SUPPORTED_VERSIONS = (1, 2, 3, 4, 5, 6)
# the first version whose records carry a checksum
CHECKSUM_SINCE = 3
STATUSES = ("ok", "failed", "invalid", "timeout")

# perflab refuses to start measuring with less free space than this where it writes. A
# record of a trial that reaches trial.max_steps (5000 steps, up to 6 numbers each) is
# ~0.3 MB and a profiler trace is kept up to profiling.max_trace_mb (20 MB): below 50 MB a
# default sweep (3 variants x 30 rounds, a trace per variant) could run out of space half
# way. It is a floor that catches a full disk before measuring, not a guarantee.
MIN_FREE_BYTES = 50 * 2**20


@dataclass
class Samples:
    # steps covered by each entry of step_ns (1 unless very short accelerator steps are
    # timed in groups)
    steps_per_sample: int
    # duration of each timed sample, ns
    step_ns: list[int]
    # per-phase duration of each timed step, ns (data, h2d, forward[, backward, optimizer])
    phases_ns: dict[str, list[int]]
    # duration of each warm-up sample, ns; sample i covers warmup_sample_steps[i] steps
    warmup_sample_ns: list[int]
    # the first step (first batch, compilation, autotuning), timed apart, ns
    first_call_ns: int
    # wall-clock length of the timed block, s, plus the kept warm-up samples' durations
    timed_s: float
    # why the timed block ended: "min_reached", "max_steps", "max_s" or "fixed_steps"
    stop_reason: str
    # steps in each warm-up sample (1, or steps_per_sample once the steps are grouped)
    warmup_sample_steps: list[int] = field(default_factory=list)
    # why the warm-up ended: "steady" (perflab.analysis.steady's rule), "cap" (trial.warmup_max_s
    # reached first), "minimum" (trial.steady_tolerance=0: the minimum only), "none"
    warmup_stop: str = "minimum"
    # wall-clock length of the warm-up, s, less the window kept for the timed block
    warmup_s: float = 0.0
    # how many of the warm-up's last samples open step_ns (trial.keep_steady_window): the
    # window its steady rule judged steady; they are in warmup_sample_ns too, and their
    # time counts in timed_s, not warmup_s
    warmup_kept: int = 0
    # how the timed block's length was set: "bounds" (trial.min_*/max_*: a single run),
    # "calibrating" (the bounds; in a sweep this first trial of its configuration fixes
    # the length of the later ones), "fixed" (the steps and steps_per_sample of the
    # calibrating trial of round length_from_round)
    length: str = "bounds"
    length_from_round: int | None = None

    @property
    def timed_steps(self) -> int:
        return len(self.step_ns) * self.steps_per_sample


@dataclass
class Probe:
    # per-sample count of the probe batch (equal to batch_size)
    batch_size: int
    # loss on the probe batch (float)
    loss: float
    # shape and dtype of the model output
    output_shape: list[int]
    output_dtype: str
    # L2 norm of the whole output, computed in float64
    output_norm: float
    # up to 4096 output elements, evenly strided over the flattened output, as floats
    output_sample: list[float]
    # L2 norm of all gradients after one backward on the probe batch (train mode only)
    grad_norm: float | None


@dataclass
class ErrorInfo:
    type: str
    message: str
    traceback: str


@dataclass
class TrialRecord:
    status: str
    # the config as the user composed it (resolved interpolations), a plain dict
    config: dict[str, Any]
    # what the config became on this machine: device, amp dtype, compile mode, ...
    settings: dict[str, Any]
    started_at: str
    finished_at: str
    # identifies the trial within its job: round number (0 for a single run)
    round: int = 0
    # the session of the sweep that ran it: 0, then one more per resumed session that
    # ran trials (experiment.json's "resumed"); None in records before schema 6
    session: int | None = None
    # the config group options chosen, e.g. {"model": "convnet", "preset": "default"}
    choices: dict[str, str] = field(default_factory=dict)
    # why an "invalid" trial's numbers must not be used
    invalid_reason: str | None = None
    error: ErrorInfo | None = None
    warnings: list[str] = field(default_factory=list)
    samples: Samples | None = None
    memory: TrialMemory = field(default_factory=TrialMemory)
    # per knob: what the trial observed of it (perflab.measure.knobs)
    evidence: dict[str, KnobEvidence] = field(default_factory=dict)
    # settings that must not differ between compared variants
    conditions: dict[str, Any] = field(default_factory=dict)
    # GPU telemetry sampled during the timed block (perflab.measure.telemetry); on CPU only
    # available false and the reason
    telemetry: TrialTelemetry = field(default_factory=TrialTelemetry)
    probe: Probe | None = None
    # versions, hardware and the command line (perflab.measure.environment): facts of the
    # machine, open-ended, compared and shown key by key
    environment: dict[str, Any] = field(default_factory=dict)
    # load average (1, 5, 15 min) at the start and the end of the trial
    load_start: list[float] = field(default_factory=list)
    load_end: list[float] = field(default_factory=list)
    # the process it ran in; empty in records before schema 4 (a fresh process each)
    worker: TrialWorker = field(default_factory=TrialWorker)
    # seconds spent by part; build and first_call are 0 for a trial that reused its
    # worker's workload
    cost_s: CostParts = field(default_factory=CostParts)
    schema_version: int = SCHEMA_VERSION
    # set by load_record, never written: the file's checksum does not match its content,
    # so a value was changed after the trial wrote it (the values passed validation)
    edited: bool = field(default=False, init=False, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The record as its JSON object: each typed part as the trial wrote it before the
        parts had types (perflab.formats.trial_parts), key for key."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "edited"}
        for name in ("samples", "probe", "error"):
            if data[name] is not None:
                data[name] = asdict(data[name])
        for name in _PARTS:
            data[name] = encode(data[name])
        data["evidence"] = {knob: encode(e) for knob, e in self.evidence.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialRecord:
        """The record of a JSON object read from a file: TypeError or SchemaError for one
        that does not fit the schema."""
        data = dict(data)
        if data.get("schema_version") == 1 and isinstance(data.get("samples"), dict):
            data["samples"] = _samples_from_v1(data["samples"])
        for key, kind in (("samples", Samples), ("probe", Probe), ("error", ErrorInfo)):
            if data.get(key) is not None:
                data[key] = kind(**data[key])
        for key, part in _PARTS.items():
            data[key] = decode(part, data.get(key, {}), key)
        evidence = data.get("evidence", {})
        if not isinstance(evidence, dict):
            raise SchemaError(f"evidence={evidence!r:.60}: not a mapping")
        data["evidence"] = {
            k: decode(KnobEvidence, e, f"evidence.{k}") for k, e in evidence.items()
        }
        return cls(**data)


# the typed parts of a record (perflab.formats.trial_parts), by field
_PARTS: dict[str, type[Any]] = {
    "memory": TrialMemory,
    "telemetry": TrialTelemetry,
    "worker": TrialWorker,
    "cost_s": CostParts,
}


def _samples_from_v1(samples: dict[str, Any]) -> dict[str, Any]:
    """Version 1 kept one duration per warm-up step; version 2 keeps samples and their
    step counts, which for those records are all 1."""
    out = dict(samples)
    warmup = out.pop("warmup_step_ns", [])
    out["warmup_sample_ns"] = warmup
    out["warmup_sample_steps"] = [1] * len(warmup) if isinstance(warmup, list) else []
    return out


def write_record(path: Path, record: TrialRecord, parents: bool = True) -> None:
    """Write atomically: a reader sees the old file, or the whole new one, never half;
    with the checksum of its content. ``parents``: as for write_json_atomic."""
    data = record.to_dict()
    data["checksum"] = record_checksum(data)
    write_json_atomic(path, data, parents)


def record_checksum(data: dict[str, Any]) -> str:
    """The checksum of a record about to be written: that of ``data`` as a reader will
    see it (dumping and loading turns what JSON changes, tuples and integer keys, into
    what a reader gets, so writer and reader hash one text)."""
    return _digest(json.loads(json.dumps(data, allow_nan=True)))


def _digest(as_read: dict[str, Any]) -> str:
    """The checksum of a record as read: "sha256:" and the hex digest of it (its checksum
    field aside) as JSON with sorted keys and write_json_atomic's separators. NaN and
    infinities, written with allow_nan, are read back as the same floats and written the
    same way again."""
    body = {k: v for k, v in as_read.items() if k != "checksum"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def write_json_atomic(path: Path, data: Any, parents: bool = True) -> None:
    """``parents=False`` creates the file's own directory only (a trial's trials/), never
    the ones above it: in a sweep, a job directory that is gone means the sweep directory
    was deleted mid-run, and recreating it would leave a fraction of the experiment there
    (FileNotFoundError instead; perflab.experiment.schedule.run_one stops the sweep)."""
    path.parent.mkdir(parents=parents, exist_ok=True)
    fd, tmp = temporary_beside(path)  # the mode open() would give, not mkstemp's 0600
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, separators=(",", ":"), allow_nan=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable too: on POSIX it lives in the directory, which a crash of
    the machine could otherwise lose after the file's own fsync."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; the rename is atomic anyway
    finally:
        os.close(fd)


def check_writable(directory: Path, field_name: str) -> None:
    """Fail fast, before anything is measured, when results could not be written into
    ``directory`` (created later if missing): raise ConfigError naming the field when it
    lies under a file, cannot be written (tried with a real file: permission bits do not
    stop root, a read-only mount does), or its disk has less than MIN_FREE_BYTES free."""
    allowed = f"a writable directory with at least {MIN_FREE_BYTES // 2**20} MB free"
    broken = broken_link(Path(directory).absolute())  # a link to nowhere "exists" too
    if broken:
        raise ConfigError(field_name, str(directory), allowed, broken)
    existing = Path(directory).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(field_name, str(directory), allowed, f"{existing} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".perflab-write-check.", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(
            field_name, str(directory), allowed, f"cannot write in {existing} ({exc.strerror})"
        ) from exc
    free = shutil.disk_usage(existing).free
    if free < MIN_FREE_BYTES:
        raise ConfigError(
            field_name, str(directory), allowed, f"only {free / 2**20:.1f} MB free on its disk"
        )


def load_record(path: Path) -> TrialRecord:
    """Read one record; raise RecordError naming the file for anything but a known version
    whose every value the analysis uses makes sense (see _inconsistency). A version 3
    record whose checksum does not match is returned marked ``edited``."""
    data = _read_json(path)
    version = data["schema_version"]
    checksum = data.pop("checksum", None) if version >= CHECKSUM_SINCE else None
    try:
        record = TrialRecord.from_dict(data)
    except SchemaError as exc:  # a typed part's value, named by its path
        raise RecordError(f"{path}: {exc}") from exc
    except TypeError as exc:
        raise RecordError(f"{path}: malformed record for schema_version={version} ({exc})") from exc
    problem = _inconsistency(record)
    if problem:
        raise RecordError(f"{path}: {problem}")
    record.edited = version >= CHECKSUM_SINCE and checksum != _digest(data)
    return record


def _read_json(path: Path) -> dict[str, Any]:
    """The file's JSON object, of a schema_version this perflab reads."""
    try:
        data = read_json(path)  # not JSON, or nested deeper than any record: ValueError
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: not a readable perflab record ({exc})") from exc
    if not isinstance(data, dict) or "schema_version" not in data:
        raise RecordError(f"{path}: not a perflab trial record (no schema_version)")
    version = data["schema_version"]
    if type(version) is not int or version not in SUPPORTED_VERSIONS:
        raise RecordError(
            f"{path}: schema_version={version!r} is not supported by this perflab "
            f"(reads {', '.join(map(str, SUPPORTED_VERSIONS))}); upgrade perflab to read it"
        )
    return data


# --- validation: what the analysis computes with must make sense -----------------------
# Records are the truth the statistics are computed from, so a value no trial produces (a
# negative or NaN duration, zero steps per sample, a string) is neither averaged in nor
# left to crash the report: the record is refused, naming the field and the value.

# top-level fields that must be JSON objects, and lists (the analysis reads into them)
# (the typed parts are checked as they are read: perflab.formats.trial_parts)
_MAPPINGS = ("config", "settings", "choices", "conditions", "environment")
_LISTS = ("warnings", "load_start", "load_end")
_NS = "not a duration in ns (an integer >= 0)"


def _is_number(value: Any) -> bool:
    """An int or a float, NaN included; a bool is an int to Python, not to perflab."""
    return type(value) in (int, float)


def _is_whole(value: Any) -> bool:
    """Durations (ns), byte counts and dimensions: integers >= 0."""
    return type(value) is int and value >= 0


def _is_positive(value: Any) -> bool:
    return type(value) is int and value > 0


def _is_seconds(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value) and value >= 0


def _bad(name: str, value: Any, problem: str) -> str:
    """The problem as "field=value: problem", the value as Python shows it (so that "5"
    and 5 differ), cut to a readable length."""
    shown = repr(value)
    return f"{name}={shown if len(shown) <= 60 else shown[:57] + '...'}: {problem}"


def _bad_entry(name: str, values: Any, ok: Callable[[Any], bool], problem: str) -> str | None:
    """The first entry of the list ``values`` that ``ok`` refuses, if any."""
    if not isinstance(values, list):
        return _bad(name, values, "not a list")
    if all(ok(v) for v in values):  # the common case, without building anything
        return None
    i = next(i for i, v in enumerate(values) if not ok(v))
    return _bad(f"{name}[{i}]", values[i], problem)


def _inconsistency(record: TrialRecord) -> str | None:
    """What makes a well-typed record unusable by the analysis, if anything: the first
    value that breaks its field's rule (docs/records.md), as "field=value: problem"."""
    checks = (_top_level_problem, _ok_trial_problem, _samples_problem, _probe_problem)
    return next((p for check in checks if (p := check(record)) is not None), None)


def _top_level_problem(record: TrialRecord) -> str | None:
    if record.status not in STATUSES:
        return _bad("status", record.status, f"not one of {', '.join(STATUSES)}")
    if type(record.round) is not int or record.round < 0:
        return _bad("round", record.round, "not a round number (an integer >= 0)")
    if record.session is not None and not _is_whole(record.session):
        return _bad("session", record.session, "not a session number (an integer >= 0)")
    for name in _MAPPINGS + _LISTS:
        kind = dict if name in _MAPPINGS else list
        if not isinstance(getattr(record, name), kind):
            what = "a mapping" if kind is dict else "a list"
            return _bad(name, getattr(record, name), f"not {what}")
    for part, seconds in record.cost_s.spent().items():
        if not _is_seconds(seconds):
            return _bad(f"cost_s.{part}", seconds, "not a finite number of seconds >= 0")
    peak = record.memory.peak_bytes
    if peak is not None and not _is_whole(peak):
        return _bad("memory.peak_bytes", peak, "not a byte count (an integer >= 0)")
    readings = record.memory.sample_bytes  # the leak flag's (perflab.analysis.variants)
    if readings is not None:
        return _bad_entry("memory.sample_bytes", readings, _is_whole, "not a byte count")
    return None


def _ok_trial_problem(record: TrialRecord) -> str | None:
    """An ok trial is one the analysis measures with: timed samples, and the batch size
    that turns them into throughput."""
    if record.status != "ok":
        return None
    if record.samples is None:
        return _bad("samples", None, "an ok trial without timed samples")
    if record.samples.step_ns == []:
        return _bad("samples.step_ns", [], "an ok trial without timed samples")
    batch = record.settings.get("batch_size")
    if not _is_positive(batch):
        return _bad("settings.batch_size", batch, "not a batch size (an integer >= 1)")
    return None


def _samples_problem(record: TrialRecord) -> str | None:
    s = record.samples
    if s is None:
        return None
    scalars = (
        ("steps_per_sample", s.steps_per_sample, _is_positive, "not a step count >= 1"),
        ("first_call_ns", s.first_call_ns, _is_whole, _NS),
        ("timed_s", s.timed_s, _is_seconds, "not a finite number of seconds >= 0"),
        ("warmup_kept", s.warmup_kept, _is_whole, "not a sample count >= 0"),
    )
    for name, value, ok, problem in scalars:
        if not ok(value):
            return _bad(f"samples.{name}", value, problem)
    if not isinstance(s.phases_ns, dict):
        return _bad("samples.phases_ns", s.phases_ns, "not a mapping of phase to durations")
    lists = [
        ("step_ns", s.step_ns, _is_positive, "not a positive duration in ns"),
        ("warmup_sample_ns", s.warmup_sample_ns, _is_whole, _NS),
        ("warmup_sample_steps", s.warmup_sample_steps, _is_positive, "not a step count >= 1"),
        *((f"phases_ns.{k}", v, _is_whole, _NS) for k, v in s.phases_ns.items()),
    ]
    problems = (_bad_entry(f"samples.{n}", v, ok, problem) for n, v, ok, problem in lists)
    found = next((p for p in problems if p is not None), None)
    if found is None and s.warmup_kept > min(len(s.warmup_sample_ns), len(s.step_ns)):
        # the kept window is the warm-up's last samples and the timed block's first
        return _bad("samples.warmup_kept", s.warmup_kept, "more than the samples it counts")
    return found


def _probe_problem(record: TrialRecord) -> str | None:
    """The numbers the numerics check computes with. NaN and infinities are results, not
    errors: a model that diverges under a knob is what the check is there to catch."""
    p = record.probe
    if p is None:
        return None
    numbers = {"loss": p.loss, "output_norm": p.output_norm, "grad_norm": p.grad_norm}
    for name, value in numbers.items():
        if not _is_number(value) and not (name == "grad_norm" and value is None):
            return _bad(f"probe.{name}", value, "not a number")
    shape = _bad_entry("probe.output_shape", p.output_shape, _is_whole, "not a dimension")
    return shape or _bad_entry("probe.output_sample", p.output_sample, _is_number, "not a number")


# nvmlClocksEventReasons bits (NVML API reference, "Clock Event Reasons"); the values are
# stable across driver versions. The first three are benign: an idle GPU, or clocks the
# administrator or the display chose.
THROTTLE_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "display_clock_setting": 0x100,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}
