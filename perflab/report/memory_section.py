"""The report's "Memory and device" section: memory at the end of each step phase and,
on CUDA, the GPU telemetry sampled during the timed trials."""

from __future__ import annotations

from perflab.config.plan import SENTINEL
from perflab.formats.summary.variant import Measured, Telemetry
from perflab.formats.trial_parts import PhaseReading
from perflab.report.markdown_text import esc, tables_within
from perflab.report.tables import Report

MIB = 2**20


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / MIB:,.1f}"


def _phase_cells(entry: Measured, phases: list[str]) -> list[str]:
    """Per phase: allocated (peak within the phase) on CUDA, RSS on CPU, in MiB (the
    rows are the trial record's memory.phases)."""
    by_phase = {row.phase: row for row in entry.memory_by_phase}
    return [_phase_cell(by_phase.get(phase)) for phase in phases]


def _phase_cell(row: PhaseReading | None) -> str:
    """One phase's reading: the allocator's counters on CUDA, the RSS on CPU."""
    if row is None:
        return "-"
    if row.allocated_bytes is not None:
        return f"{_mib(row.allocated_bytes)} ({_mib(row.peak_allocated_bytes)})"
    return _mib(row.rss_bytes)


def _telemetry_cell(t: Telemetry | None) -> str:
    if t is None or not t.available:
        return "-"
    parts = []
    if t.util_pct_median is not None:
        parts.append(f"util {t.util_pct_median:.0f} %")
    if t.clock_ratio_median is not None:
        parts.append(f"SM clock {t.clock_ratio_median:.0%} of max")
    if t.temperature_c_max is not None:
        parts.append(f"<= {t.temperature_c_max:.0f} C")
    if t.power_w_median is not None:
        parts.append(f"{t.power_w_median:.0f} W")
    return ", ".join(parts) or "sampled, no readings"


def resources_section(report: Report) -> list[str]:
    # the A/A sentinel runs the baseline's settings: its memory is the baseline's
    entries = [
        (v.label, v.measured)
        for v in report.summary.variants
        if v.measured is not None and v.name != SENTINEL
    ]
    if not entries:
        return []
    phases = list(dict.fromkeys(r.phase for _, m in entries for r in m.memory_by_phase))
    cuda = any(m.memory_kind == "cuda_allocator" for _, m in entries)
    telemetry = next(
        (m.telemetry for _, m in entries if m.telemetry and m.telemetry.available), None
    )
    rows = [
        [esc(label), _mib(m.peak_memory_bytes), *_phase_cells(m, phases)] for label, m in entries
    ]
    header = ["variant", "peak MiB", *[f"after {esc(p)}" for p in phases]]
    # a sentence per variant: as a table's last column it made the table run off the page
    readings = (
        ["", "GPU telemetry:", ""]
        + [f"- {esc(label)}: {_telemetry_cell(m.telemetry)}" for label, m in entries]
        if telemetry
        else []
    )
    what = (
        "CUDA caching allocator: allocated MiB at the end of each phase (peak within the "
        "phase in brackets)"
        if cuda
        else "process RSS in MiB at the end of each phase"
    )
    first = entries[0][1].telemetry
    note = (
        f"GPU telemetry from NVML during the timed blocks ({esc(telemetry.device)}): "
        "medians over the trials; a low clock or a slowdown reason is raised as a health flag."
        if telemetry
        else "GPU telemetry: none ("
        + esc(first.reason if first and first.reason is not None else "not recorded")
        + ")."
    )
    return [
        "## Memory and device",
        "",
        f"Peak over the timed trials; by phase from one instrumented step after a timed "
        f"block ({what}). {note}",
        "",
        *tables_within(header, rows),
        *readings,
        "",
    ]
