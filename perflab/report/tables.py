"""Tidy pandas DataFrames behind every table of the report, for notebooks too.

from perflab.report import load
report = load("multirun/2026-11-22/10-00-00-000000")
report.comparisons   # one row per comparison
report.variants      # one row per variant
report.numerics      # one row per comparison: the variant's outputs against its baseline's
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from perflab.analysis.numerics import compare_probes
from perflab.analysis.summary import Experiment, analyze, load_trials
from perflab.config.plan import Plan, Variant
from perflab.profile.profile_file import load_profile
from perflab.records import TrialRecord

# which evidence entry proves each treatment key took effect
TREATMENT_EVIDENCE = {
    "amp": "amp",
    "compile": "compile",
    "channels_last": "channels_last",
    "fused": "fused",
    "num_workers": "data_loader",
    "pin_memory": "data_loader",
}


@dataclass
class Report:
    """Everything a report shows, computed from the records alone."""

    sweep_dir: Path
    experiment: Experiment
    summary: dict[str, Any]
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
        evidence = record.evidence.get(TREATMENT_EVIDENCE.get(key, ""))
        state = (
            "n/a"
            if evidence is None or evidence.get("ok") is None
            else ("yes" if evidence["ok"] else "NO")
        )
        checks.append(f"{key}: {state}")
    return ", ".join(checks) or "n/a"


def comparison_frame(
    report_summary: dict[str, Any], plan: Plan, trials: dict[str, dict[int, TrialRecord]]
) -> pd.DataFrame:
    rows = []
    variants = {v["name"]: v for v in report_summary["variants"]}
    for (variant, base), c in zip(plan.comparisons(), report_summary["comparisons"], strict=True):
        v_sum, b_sum = variants[variant.name], variants[base.name]
        row = {
            "variant": variant.label,
            "baseline": base.label,
            "treatment": " ".join(f"{k}={_fmt(val)}" for k, val in variant.treatment.items()),
            "baseline_treatment": " ".join(f"{k}={_fmt(val)}" for k, val in base.treatment.items()),
            "cell": " ".join(f"{k}={_fmt(val)}" for k, val in variant.cell.items()),
            **{
                k: c.get(k)
                for k in (
                    "speedup",
                    "ci_low",
                    "ci_high",
                    "ci_level",
                    "verdict",
                    "interval",
                    "delta",
                    "rounds",
                    "p_value",
                    "p_adjusted",
                    "rounds_to_decide",
                    "distribution_sensitive",
                    "note",
                )
            },
            "knob_in_effect": _treatment_check(plan, variant, first_ok(trials[variant.name])),
            "first_call_s": (v_sum.get("first_call_ns") or float("nan")) / 1e9,
            "baseline_first_call_s": (b_sum.get("first_call_ns") or float("nan")) / 1e9,
        }
        row["break_even_steps"] = _break_even(v_sum, b_sum)
        rows.append(row)
    return pd.DataFrame(rows)


def _break_even(v_sum: dict[str, Any], b_sum: dict[str, Any]) -> float | None:
    """Steps after which a slower first call (compilation) is paid back by faster steps."""
    if "step_ns" not in v_sum or "step_ns" not in b_sum:
        return None
    extra = v_sum["first_call_ns"] - b_sum["first_call_ns"]
    saved = b_sum["step_ns"]["p50"] - v_sum["step_ns"]["p50"]
    if extra <= 0 or saved <= 0:
        return None
    return extra / saved


def variant_frame(report_summary: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for v in report_summary["variants"]:
        row: dict[str, Any] = {
            "variant": v["label"],
            "name": v["name"],
            "trials": v["trials"],
            "ok": v["ok"],
            "failed": len(v["failed"]),
        }
        if "step_ns" in v:
            steps = v["step_ns"]
            row.update({f"{p}_ms": steps[p] / 1e6 for p in ("p50", "p90", "p95", "p99")})
            row["bounded_percentiles"] = " ".join(steps["bounded_percentiles"])
            row["throughput"] = v["throughput"]
            row.update({f"{k}_ms": t / 1e6 for k, t in v["phase_median_ns"].items()})
            row["peak_memory_mib"] = v["peak_memory_bytes"] / 2**20
            row["first_call_s"] = v["first_call_ns"] / 1e9
            row["warmup_s"] = v["warmup"]["median_s"]
            row["warmup_stops"] = ", ".join(f"{k} {n}" for k, n in v["warmup"]["stops"].items())
            row["timed_steps"] = " ".join(map(str, v["trial_length"]["timed_steps"]))
        row["health"] = "; ".join(v["health"])
        rows.append(row)
    return pd.DataFrame(rows)


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


def _fmt(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def load(sweep_dir: str | Path, summary: dict[str, Any] | None = None) -> Report:
    """Analyse a sweep directory from its records and build every table (``summary``:
    the analysis just computed from the same records, to save doing it twice)."""
    sweep_dir = Path(sweep_dir)
    experiment = Experiment.load(sweep_dir)
    skipped: list[str] = []
    trials = load_trials(sweep_dir, experiment.plan, skipped)
    summary = summary if summary is not None else analyze(experiment, trials)
    plan = experiment.plan
    profiles = {
        v.name: load_profile(sweep_dir / v.dir / "profile" / "profile.json") for v in plan.variants
    }
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
