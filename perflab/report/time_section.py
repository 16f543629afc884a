"""The report's "Where the time went" section: how the trials were isolated (warm
workers or a fresh process each), what each part of a trial cost, and where the spread
of each variant's trials comes from (step, trial, worker)."""

from __future__ import annotations

import math

from perflab.analysis.variants import COST_PARTS
from perflab.formats.summary import Isolation
from perflab.formats.summary.variant import Variance
from perflab.report.markdown_text import esc, table
from perflab.report.tables import Report

# the parts of a trial, as summary.json names them (TrialRecord.cost_s), and as shown
LABELS = {"first_call": "first call", "warmup": "warm-up"}
PARTS = {part: LABELS.get(part, part) for part in COST_PARTS}


def rounds(n: int) -> str:
    """A count of rounds in words: "1 round", "2 rounds"."""
    return "1 round" if n == 1 else f"{n} rounds"


def isolation_text(iso: Isolation | None) -> str:
    """One sentence on how the trials were run, for the section and the method."""
    if iso is None or iso.mode == "process":
        return "each trial in a fresh process"
    workers = f", {iso.workers} workers in all" if iso.workers is not None else ""
    return (
        f"each variant's trials in a warm worker process that built the workload once and "
        f"served {rounds(iso.trials_per_worker)} before a fresh one replaced it{workers}; "
        f"the intervals count worker generations, not rounds"
    )


def time_section(report: Report) -> list[str]:
    """Nothing for a summary from before the trials wrote their costs down."""
    iso = report.summary.isolation
    if iso is None:
        return []
    lines = [
        "## Where the time went",
        "",
        f"Isolation: {isolation_text(iso)} (schedule.isolation={esc(iso.mode)}; "
        f"docs/design.md#warm-workers).",
        "",
    ]
    total = sum(iso.cost_s.values())
    if iso.trials and total > 0:
        rows = [
            [name, f"{seconds:.1f}", f"{seconds / total:.0%}", f"{seconds / iso.trials:.3f}"]
            for key, name in PARTS.items()
            if (seconds := iso.cost_s.get(key)) is not None
        ]
        lines += [
            f"{iso.trials} trials, {total:.1f} s inside them of "
            f"{report.summary.elapsed_s:.1f} s measuring (the rest: the scheduler, records, "
            "settling):",
            "",
            *table(["part", "seconds", "share", "s per trial"], rows),
            "",
        ]
    lines += _spread_table(report)
    return lines


def _spread_table(report: Report) -> list[str]:
    """Per variant: the per-trial cost's spread, split (as standard deviations of the
    log, so in relative terms)."""
    rows = []
    for v in report.summary.variants:
        m = v.measured
        if m is None:
            continue
        split = _split(m.variance)
        if split is None:
            continue
        costs = m.cost_s or {}
        rows.append(
            [
                esc(v.label),
                *split,
                "-" if m.workers is None else str(m.workers),
                f"{sum(costs.values()):.2f}" if costs else "-",
            ]
        )
    if not rows:
        return []
    return [
        "Spread of the per-trial mean log step time, as a relative standard deviation: "
        "steps (shrinks with longer trials), trials (with more rounds), workers (with "
        "more workers):",
        "",
        *table(["variant", "steps", "trials", "workers", "workers run", "s per trial"], rows),
        "",
    ]


def _split(v: Variance) -> list[str] | None:
    if v.within is None or v.between is None or math.isnan(v.within):
        return None
    worker = v.worker
    trial = v.between - (worker or 0.0)
    return [
        _sd(v.within),
        _sd(max(trial, 0.0)),
        "-" if worker is None else _sd(worker),
    ]


def _sd(variance: float) -> str:
    return f"{math.sqrt(variance):.1%}"
