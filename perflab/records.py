"""Trial records: one JSON file per trial, written atomically, read back strictly.

Raw samples are the truth; every summary is recomputed from them (:mod:`perflab.stats`).
Every field and its unit is documented in docs/records.md.

Schema history:
  1 (2026-11-22) first version.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perflab.errors import RecordError

SCHEMA_VERSION = 1
SUPPORTED_VERSIONS = (1,)
STATUSES = ("ok", "failed", "invalid", "timeout")


@dataclass
class Samples:
    # steps covered by each entry of step_ns (1 unless very short accelerator steps are
    # timed in groups)
    steps_per_sample: int
    # duration of each timed sample, ns
    step_ns: list[int]
    # per-phase duration of each timed step, ns (data, h2d, forward[, backward, optimizer])
    phases_ns: dict[str, list[int]]
    # duration of each warm-up step, ns
    warmup_step_ns: list[int]
    # the first step (first batch, compilation, autotuning), timed apart, ns
    first_call_ns: int
    # wall-clock length of the timed block, s
    timed_s: float
    # why the timed block ended: "min_reached", "max_steps" or "max_s"
    stop_reason: str


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
        for key, kind in (("samples", Samples), ("probe", Probe), ("error", ErrorInfo)):
            if data.get(key) is not None:
                data[key] = kind(**data[key])
        return cls(**data)


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


def load_record(path: Path) -> TrialRecord:
    """Read one record; raise RecordError naming the file for anything but a known version."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{path}: not a readable perflab record ({exc})") from exc
    if not isinstance(data, dict) or "schema_version" not in data:
        raise RecordError(f"{path}: not a perflab trial record (no schema_version)")
    version = data["schema_version"]
    if version not in SUPPORTED_VERSIONS:
        raise RecordError(
            f"{path}: schema_version={version!r} is not supported by this perflab "
            f"(reads {', '.join(map(str, SUPPORTED_VERSIONS))}); upgrade perflab to read it"
        )
    try:
        return TrialRecord.from_dict(data)
    except TypeError as exc:
        raise RecordError(f"{path}: malformed record for schema_version={version} ({exc})") from exc
