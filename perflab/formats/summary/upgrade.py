"""summary.json of schema version 1 (no schema_version field: perflab before 2026-11-23's
model, perflab.formats.summary) in version 2's form, for perflab.formats.summary to read.

Version 1 is the dict perflab's analysis returned, which grew from commit to commit; a
file of any of its forms is read. What its perflab did not compute is filled in as what
it was: no experiment notes, no carry-over rows, no edited records listed, and the t
interval as the one that gave the verdict (the only interval before "interval" was
written). Numbers it never recorded (warm-up, trial length, telemetry, outlier steps)
become None. ``delta_requested`` (the user's band, when perflab still widened it to the
noise floor) is dropped: ``delta`` is the band the file's verdicts used.

Pure functions on JSON objects; a value of the wrong type is left as it is, for the
decoder to refuse with its field's name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# an upgrade of a JSON object to the given schema version
Upgrade = Callable[[dict[str, Any], int], dict[str, Any]]


def summary_from_version_1(data: dict[str, Any], version: int) -> dict[str, Any]:
    """A sweep's summary.json object, as schema ``version`` writes it."""
    out = {k: v for k, v in data.items() if k not in ("schema_version", "delta_requested")}
    for key in ("health", "edited_records", "carryover"):
        out.setdefault(key, [])
    out["comparisons"] = _each(out.get("comparisons"), _estimate)
    if isinstance(out.get("sentinel"), dict):
        out["sentinel"] = _estimate(out["sentinel"])
    out["variants"] = _each(out.get("variants"), _variant)
    return {"schema_version": version, **out}


def merged_from_version_1(data: dict[str, Any], version: int) -> dict[str, Any]:
    """A grouped sweep's merged summary.json object, as schema ``version`` writes it."""
    out = {k: v for k, v in data.items() if k != "schema_version"}
    for key in ("health", "sentinels", "skipped", "edited_records"):
        out.setdefault(key, [])
    out["comparisons"] = _each(out.get("comparisons"), _estimate)
    out["sentinels"] = _each(out.get("sentinels"), _estimate)
    return {"schema_version": version, **out}


def _each(items: Any, upgrade: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """``upgrade`` applied to each object of a list."""
    if not isinstance(items, list):
        return items
    return [upgrade(x) if isinstance(x, dict) else x for x in items]


def _estimate(entry: dict[str, Any]) -> dict[str, Any]:
    """A comparison or sentinel: the t interval as the verdict's (NO DATA has none)."""
    if "speedup" not in entry:
        return entry
    t = {k: entry.get(k) for k in ("speedup", "ci_low", "ci_high")}
    return {"interval": "t", "t": t, **entry}


def _variant(entry: dict[str, Any]) -> dict[str, Any]:
    """A variant with ok trials: what its perflab did not record, None."""
    if "step_ns" not in entry:
        return entry
    never = ("memory_kind", "telemetry", "warmup", "trial_length")
    out = {**dict.fromkeys(never), "memory_by_phase": [], **entry}
    if isinstance(out["step_ns"], dict):
        out["step_ns"] = {"outlier_steps": None, **out["step_ns"]}
    return out
