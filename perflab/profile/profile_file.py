"""profile.json, the record of a profiled pass: its schema version and its tolerant
loading (an unreadable or foreign file reads as no profile, never a crash).

The report reads a profile's values by key, so a file that has the schema version but
lacks a table, or holds a string where a number goes (a hand-edited or hostile file; a
hostile pass once fed perflab-report one with only "trace"), is checked here first: it
must have every value the report and the diagnosis read, of the right kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from perflab.errors import RecordError
from perflab.formats.json_file import read_json

PROFILE_SCHEMA_VERSION = 1
TOP_OPS = 15


def load_profile(path: Path) -> dict[str, Any] | None:
    """The profile at ``path``; None when there is none or it cannot be used."""
    try:
        return read_profile(path)
    except RecordError:
        return None


def read_profile(path: Path) -> dict[str, Any]:
    """The profile at ``path``; RecordError naming the file and what is wrong with it."""
    try:
        data = read_json(path)  # not JSON, or nested deeper than any profile: ValueError
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: not a readable profile.json ({exc})") from exc
    if not isinstance(data, dict) or data.get("schema_version") != PROFILE_SCHEMA_VERSION:
        raise RecordError(f"{path}: not a profile.json of schema_version {PROFILE_SCHEMA_VERSION}")
    problem = _problem(data)
    if problem:
        raise RecordError(f"{path}: {problem}")
    return data


def _number(value: Any) -> bool:
    return type(value) in (int, float)


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _whole(value: Any) -> bool:
    return type(value) is int and value >= 0


# what each table's rows must hold (the report formats every one of these)
_OP = {"name": _text, "family": _text, "calls": _whole, "input_shapes": _text}
_KERNEL = {
    "name": _text,
    "family": _text,
    "launched_by": _text,
    "count": _whole,
    "device_us": _number,
}
_RANGE = {"name": _text, "count": _whole, "cpu_us": _number}
_OVERHEAD = {"unprofiled_step_s": _number, "profiled_step_s": _number, "ratio": _number}


def _problem(data: dict[str, Any]) -> str | None:
    """The first value the report cannot use, as "field: why"; None when all are fine."""
    if not _text(data.get("time_basis")) or data.get("device") not in ("cpu", "cuda"):
        return "time_basis or device: missing or not text"
    if not isinstance(data.get("overhead"), dict) or _row_problem(data["overhead"], _OVERHEAD):
        return "overhead: missing, or not its three numbers"
    families = data.get("families_us")
    if not isinstance(families, dict) or not all(_number(v) for v in families.values()):
        return "families_us: not a mapping of family to microseconds"
    steps = data.get("profiled_steps", 1)  # absent from profiles written before 2026-11-23
    if type(steps) is not int or steps < 1:
        return f"profiled_steps={steps!r}: not a step count >= 1"
    time_key = "self_device_us" if data["device"] == "cuda" else "self_cpu_us"
    tables: tuple[tuple[str, Mapping[str, Callable[[Any], bool]], bool], ...] = (
        ("top_ops", {**_OP, time_key: _number}, True),
        ("top_kernels", _KERNEL, False),
        ("host_annotations", _RANGE, False),
    )
    for name, fields, required in tables:
        rows = data.get(name)
        if rows is None and not required:
            continue
        if not isinstance(rows, list):
            return f"{name}: not a list"
        bad = next((i for i, row in enumerate(rows) if _row_problem(row, fields)), None)
        if bad is not None:
            return f"{name}[{bad}]: {_row_problem(rows[bad], fields)}"
    return None


def _row_problem(row: Any, fields: Mapping[str, Callable[[Any], bool]]) -> str | None:
    if not isinstance(row, dict):
        return "not an object"
    wrong = next((k for k, ok in fields.items() if not ok(row.get(k))), None)
    return None if wrong is None else f"{wrong}={row.get(wrong)!r} missing or of the wrong kind"
