"""Trial records: one JSON file per trial, written atomically, read back strictly.

Raw samples are the truth; every summary is recomputed from them (:mod:`perflab.stats`).
Every field and its unit is documented in docs/records.md.

Schema history:
  1 (2026-11-22) first version.
  2 (2026-11-23) samples: warm-up as samples with their step counts
     (``warmup_sample_ns``, ``warmup_sample_steps``, replacing ``warmup_step_ns``), why
     and when the warm-up stopped (``warmup_stop``, ``warmup_s``) and how the timed
     block's length was set (``length``, ``length_from_round``). Version 1 records are
     still read: their warm-up steps become one-step samples.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perflab.errors import ConfigError, RecordError

SCHEMA_VERSION = 2
SUPPORTED_VERSIONS = (1, 2)
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
    # wall-clock length of the timed block, s
    timed_s: float
    # why the timed block ended: "min_reached", "max_steps", "max_s" or "fixed_steps"
    stop_reason: str
    # steps in each warm-up sample (1, or steps_per_sample once the steps are grouped)
    warmup_sample_steps: list[int] = field(default_factory=list)
    # why the warm-up ended: "steady" (perflab.steady's rule), "cap" (trial.warmup_max_s
    # reached first), "minimum" (trial.steady_tolerance=0: the minimum only), "none"
    warmup_stop: str = "minimum"
    # wall-clock length of the warm-up, s
    warmup_s: float = 0.0
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
    # the config group options chosen, e.g. {"model": "convnet", "preset": "default"}
    choices: dict[str, str] = field(default_factory=dict)
    # why an "invalid" trial's numbers must not be used
    invalid_reason: str | None = None
    error: ErrorInfo | None = None
    warnings: list[str] = field(default_factory=list)
    samples: Samples | None = None
    memory: dict[str, Any] = field(default_factory=dict)
    # per knob: requested, observed, ok, detail (see perflab.knobs)
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)
    # settings that must not differ between compared variants
    conditions: dict[str, Any] = field(default_factory=dict)
    # GPU telemetry sampled during the timed block (perflab.telemetry); on CPU only
    # {"available": false, "reason": ...}
    telemetry: dict[str, Any] = field(default_factory=dict)
    probe: Probe | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    # load average (1, 5, 15 min) at the start and the end of the trial
    load_start: list[float] = field(default_factory=list)
    load_end: list[float] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialRecord:
        data = dict(data)
        if data.get("schema_version") == 1 and isinstance(data.get("samples"), dict):
            data["samples"] = _samples_from_v1(data["samples"])
        for key, kind in (("samples", Samples), ("probe", Probe), ("error", ErrorInfo)):
            if data.get(key) is not None:
                data[key] = kind(**data[key])
        return cls(**data)


def _samples_from_v1(samples: dict[str, Any]) -> dict[str, Any]:
    """Version 1 kept one duration per warm-up step; version 2 keeps samples and their
    step counts, which for those records are all 1."""
    out = dict(samples)
    warmup = out.pop("warmup_step_ns", [])
    out["warmup_sample_ns"] = warmup
    out["warmup_sample_steps"] = [1] * len(warmup) if isinstance(warmup, list) else []
    return out


def write_record(path: Path, record: TrialRecord) -> None:
    """Write atomically: a reader sees the old file, or the whole new one, never half."""
    write_json_atomic(path, record.to_dict())


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
    """Read one record; raise RecordError naming the file for anything but a known version."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{path}: not a readable perflab record ({exc})") from exc
    if not isinstance(data, dict) or "schema_version" not in data:
        raise RecordError(f"{path}: not a perflab trial record (no schema_version)")
    version = data["schema_version"]
    if type(version) is not int or version not in SUPPORTED_VERSIONS:
        raise RecordError(
            f"{path}: schema_version={version!r} is not supported by this perflab "
            f"(reads {', '.join(map(str, SUPPORTED_VERSIONS))}); upgrade perflab to read it"
        )
    try:
        record = TrialRecord.from_dict(data)
    except TypeError as exc:
        raise RecordError(f"{path}: malformed record for schema_version={version} ({exc})") from exc
    problem = _inconsistency(record)
    if problem:
        raise RecordError(f"{path}: malformed record for schema_version={version} ({problem})")
    return record


def _inconsistency(record: TrialRecord) -> str | None:
    """What makes a well-typed record unusable by the analysis, if anything."""
    if record.status not in STATUSES:
        return f"status {record.status!r} is none of {', '.join(STATUSES)}"
    if type(record.round) is not int or record.round < 0:
        return f"round {record.round!r} is not a round number"
    if record.status == "ok" and (record.samples is None or not record.samples.step_ns):
        return "an ok trial without timed samples"
    return None
