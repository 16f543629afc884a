"""Tidy pandas DataFrames behind every table of the report, for notebooks too.

from perflab.report import load
report = load("multirun/2026-11-22/10-00-00-000000")
report.comparisons   # one row per comparison
report.variants      # one row per variant
report.numerics      # one row per comparison: the variant's outputs against its baseline's
report.summary       # summary.json as perflab.formats.summary.Summary (typed attributes)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from perflab.analysis.numerics import compare_probes
from perflab.analysis.summarize import Experiment, analyze, load_trials
from perflab.config.plan import Plan, Variant, assignments
from perflab.errors import OutsideSweep, RecordError
from perflab.formats.records import TrialRecord
from perflab.formats.summary import Comparison, Summary
from perflab.formats.summary.variant import Measured
from perflab.formats.sweepdir import inside, profile_record
from perflab.profile.profile_file import read_profile

# which evidence entry proves each treatment key took effect; any other key (a knob of
# the user's own) is proved by the entry under its own name, which schedule.evidence's
# check writes (perflab.measure.knobs.user_evidence)
TREATMENT_EVIDENCE = {
    "amp": "amp",
    "compile": "compile",
    "channels_last": "channels_last",
    "fused": "fused",
    "num_workers": "data_loader",
    # its own entry since 2026-11-26 (null without an accelerator: nothing is pinned);
    # data_loader's in the records written before
    "pin_memory": "pin_memory",
    # model=hf's knobs (perflab.measure.hf_knobs)
    "model.attn": "model.attn",
    "model.gradient_checkpointing": "model.gradient_checkpointing",
    "model.use_cache": "model.use_cache",
}


@dataclass
class Report:
    """Everything a report shows, computed from the records alone."""

    sweep_dir: Path
    experiment: Experiment
    summary: Summary
    trials: dict[str, dict[int, TrialRecord]]
    comparisons: pd.DataFrame
    variants: pd.DataFrame
    numerics: pd.DataFrame
    # variant name -> its profiling trial's profile.json, None when it has none
    profiles: dict[str, dict[str, Any] | None]
    # record files that could not be read, "path relative to the sweep directory: why"
    skipped: list[str] = field(default_factory=list)


def first_ok(trials: dict[int, TrialRecord]) -> TrialRecord | None:
    """The earliest ok trial: round 0 carries the probe and the layer evidence."""
    for _, record in sorted(trials.items()):
        if record.status == "ok":
            return record
    return None


def _probe_record(trials: dict[int, TrialRecord]) -> TrialRecord | None:
    return next((t for _, t in sorted(trials.items()) if t.probe is not None), None)


def _treatment_check(plan: Plan, variant: Variant, record: TrialRecord | None) -> str:
    if record is None:
        return "no data"
    checks = []
    for key in variant.treatment:
        name = TREATMENT_EVIDENCE.get(key, key)
        evidence = record.evidence.get(name)
        if evidence is None and name == "pin_memory":
            evidence = record.evidence.get("data_loader")  # a record from before
        state = (
            "n/a"
            if evidence is None or evidence.get("ok") is None
            else ("yes" if evidence["ok"] else "NO")
        )
        if evidence is None and key not in TREATMENT_EVIDENCE:
            state += " (no check: +schedule.evidence)"  # a knob of the user's own
        checks.append(f"{key}: {state}")
    return ", ".join(checks) or "n/a"


def comparison_frame(
    report_summary: Summary, plan: Plan, trials: dict[str, dict[int, TrialRecord]]
) -> pd.DataFrame:
    rows = []
    measured = {v.name: v.measured for v in report_summary.variants}
    for (variant, base), c in zip(plan.comparisons(), report_summary.comparisons, strict=True):
        v_sum, b_sum = measured[variant.name], measured[base.name]
        row = {
            "variant": variant.label,
            "baseline": base.label,
            "treatment": assignments(variant.treatment),
            "baseline_treatment": assignments(base.treatment),
            "cell": assignments(variant.cell),
            **_estimate_columns(c),
            "knob_in_effect": _treatment_check(plan, variant, first_ok(trials[variant.name])),
            "first_call_s": _first_call_s(v_sum),
            "baseline_first_call_s": _first_call_s(b_sum),
        }
        row["break_even_steps"] = _break_even(v_sum, b_sum)
        rows.append(row)
    return pd.DataFrame(rows)


def _estimate_columns(c: Comparison) -> dict[str, Any]:
    """The comparison's columns of comparisons.csv; those of its estimate are None
    without one (NO DATA)."""
    e = c.estimate
    return {
        "speedup": e.speedup if e else None,
        "ci_low": e.ci_low if e else None,
        "ci_high": e.ci_high if e else None,
        "ci_level": e.ci_level if e else None,
        "verdict": c.verdict,
        "interval": e.interval if e else None,
        "delta": c.delta,
        "rounds": e.rounds if e else None,
        "p_value": e.p_value if e else None,
        "p_adjusted": c.p_adjusted,
        "rounds_to_decide": e.rounds_to_decide if e else None,
        "distribution_sensitive": e.distribution_sensitive if e else None,
        "note": c.note,
    }


def _first_call_s(measured: Measured | None) -> float:
    return ((measured.first_call_ns if measured else None) or float("nan")) / 1e9


def _break_even(v_sum: Measured | None, b_sum: Measured | None) -> float | None:
    """Steps after which a slower first call (compilation) is paid back by faster steps."""
    if v_sum is None or b_sum is None:
        return None
    extra = v_sum.first_call_ns - b_sum.first_call_ns
    saved = b_sum.step_ns.p50 - v_sum.step_ns.p50
    if extra <= 0 or saved <= 0:
        return None
    return extra / saved


def variant_frame(report_summary: Summary) -> pd.DataFrame:
    rows = []
    for v in report_summary.variants:
        row: dict[str, Any] = {
            "variant": v.label,
            "name": v.name,
            "trials": v.trials,
            "ok": v.ok,
            "failed": len(v.failed),
        }
        if v.measured is not None:
            row.update(_measured_columns(v.measured))
        row["health"] = "; ".join(v.health)
        rows.append(row)
    return pd.DataFrame(rows)


def _measured_columns(m: Measured) -> dict[str, Any]:
    """A measured variant's columns of variants.csv (warm-up and trial length: None in a
    version 1 summary, which lacks them)."""
    steps = m.step_ns
    row: dict[str, Any] = {f"{p}_ms": getattr(steps, p) / 1e6 for p in ("p50", "p90", "p95", "p99")}
    row["bounded_percentiles"] = " ".join(steps.bounded_percentiles)
    row["throughput"] = m.throughput
    row.update({f"{k}_ms": _ms(t) for k, t in m.phase_median_ns.items()})
    row["peak_memory_mib"] = m.peak_memory_bytes / 2**20
    row["first_call_s"] = m.first_call_ns / 1e9
    row["warmup_s"] = m.warmup.median_s if m.warmup else None
    stops = m.warmup.stops.items() if m.warmup else ()
    row["warmup_stops"] = ", ".join(f"{k} {n}" for k, n in stops)
    timed = m.trial_length.timed_steps if m.trial_length else []
    row["timed_steps"] = " ".join(map(str, timed))
    return row


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def numerics_frame(plan: Plan, trials: dict[str, dict[int, TrialRecord]]) -> pd.DataFrame:
    rows = []
    for variant, base in plan.comparisons():
        v_rec, b_rec = _probe_record(trials[variant.name]), _probe_record(trials[base.name])
        row: dict[str, Any] = {"variant": variant.label, "baseline": base.label}
        if v_rec is None or b_rec is None or v_rec.probe is None or b_rec.probe is None:
            row.update({"ok": None, "reason": "no probe (no ok round-0 trial)"})
        else:
            row.update(compare_probes(b_rec.probe, v_rec.probe))
        rows.append(row)
    return pd.DataFrame(rows)


def _profile(sweep_dir: Path, job_dir: str, skipped: list[str]) -> dict[str, Any] | None:
    """A job's profile.json; None without one, or when it cannot be used (a link out of
    the sweep, a file without the values the report reads: named in ``skipped``, as an
    unreadable record is)."""
    path = profile_record(sweep_dir / job_dir)
    if not path.is_symlink() and not path.exists():
        return None  # not profiled (profile=off, or the pass failed)
    try:
        inside(sweep_dir, path)
        return read_profile(path)
    except RecordError as exc:  # OutsideSweep too
        print(f"perflab: warning: skipping {exc}", file=sys.stderr)
        why = str(exc).split(": ", 1)[-1] if not isinstance(exc, OutsideSweep) else None
        name = path.relative_to(sweep_dir).as_posix()
        skipped.append(f"{name}: {why or 'leads out of the sweep'}")
        return None


def load(sweep_dir: str | Path, summary: Summary | None = None) -> Report:
    """Analyse a sweep directory from its records and build every table (``summary``:
    the analysis just computed from the same records, to save doing it twice)."""
    sweep_dir = Path(sweep_dir)
    experiment = Experiment.load(sweep_dir)
    skipped: list[str] = []
    trials = load_trials(sweep_dir, experiment.plan, skipped)
    summary = summary if summary is not None else analyze(experiment, trials)
    plan = experiment.plan
    profiles = {v.name: _profile(sweep_dir, v.dir, skipped) for v in plan.variants}
    return Report(
        sweep_dir,
        experiment,
        summary,
        trials,
        comparison_frame(summary, plan, trials),
        variant_frame(summary),
        numerics_frame(plan, trials),
        profiles,
        skipped,
    )
