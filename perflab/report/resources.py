"""The report's "Memory and device" section: memory at the end of each step phase and,
on CUDA, the GPU telemetry sampled during the timed trials."""

from __future__ import annotations

from typing import Any

from perflab.config.plan import SENTINEL
from perflab.report.tables import Report
from perflab.report.text import esc, table

MIB = 2**20


def _mib(value: Any) -> str:
    return "-" if value is None else f"{value / MIB:,.1f}"


def _phase_cells(entry: dict[str, Any], phases: list[str]) -> list[str]:
    """Per phase: allocated (peak within the phase) on CUDA, RSS on CPU, in MiB."""
    by_phase = {row["phase"]: row for row in entry.get("memory_by_phase") or []}
    cells = []
    for phase in phases:
        row = by_phase.get(phase)
        if row is None:
            cells.append("-")
        elif "allocated_bytes" in row:
            cells.append(f"{_mib(row['allocated_bytes'])} ({_mib(row['peak_allocated_bytes'])})")
        else:
            cells.append(_mib(row.get("rss_bytes")))
    return cells


def _telemetry_cell(t: dict[str, Any]) -> str:
    if not t.get("available"):
        return "-"
    parts = []
    if t.get("util_pct_median") is not None:
        parts.append(f"util {t['util_pct_median']:.0f} %")
    if t.get("clock_ratio_median") is not None:
        parts.append(f"SM clock {t['clock_ratio_median']:.0%} of max")
    if t.get("temperature_c_max") is not None:
        parts.append(f"<= {t['temperature_c_max']:.0f} C")
    if t.get("power_w_median") is not None:
        parts.append(f"{t['power_w_median']:.0f} W")
    return ", ".join(parts) or "sampled, no readings"


def resources_section(report: Report) -> list[str]:
    # the A/A sentinel runs the baseline's settings: its memory is the baseline's
    entries = [v for v in report.summary["variants"] if v.get("step_ns") and v["name"] != SENTINEL]
    if not entries:
        return []
    phases = list(dict.fromkeys(r["phase"] for v in entries for r in v.get("memory_by_phase", [])))
    cuda = any(v.get("memory_kind") == "cuda_allocator" for v in entries)
    telemetry = next(
        (v["telemetry"] for v in entries if (v.get("telemetry") or {}).get("available")), None
    )
    rows = [
        [esc(v["label"]), _mib(v.get("peak_memory_bytes")), *_phase_cells(v, phases)]
        + ([_telemetry_cell(v.get("telemetry") or {})] if telemetry else [])
        for v in entries
    ]
    header = ["variant", "peak MiB", *[f"after {p}" for p in phases]]
    header += ["GPU telemetry"] if telemetry else []
    what = (
        "CUDA caching allocator: allocated MiB at the end of each phase (peak within the "
        "phase in brackets)"
        if cuda
        else "process RSS in MiB at the end of each phase"
    )
    note = (
        f"GPU telemetry from NVML during the timed blocks ({esc(telemetry['device'])}): "
        "medians over the trials; a low clock or a slowdown reason is raised as a health flag."
        if telemetry
        else "GPU telemetry: none ("
        + esc((entries[0].get("telemetry") or {}).get("reason", "not recorded"))
        + ")."
    )
    return [
        "## Memory and device",
        "",
        f"Peak over the timed trials; by phase from one instrumented step after a timed "
        f"block ({what}). {note}",
        "",
        *table(header, rows),
        "",
    ]
