"""Tidy pandas DataFrames of a sweep, for notebooks and the CSV exports, built from the
report's typed values (the summary and perflab.report.rows); perflab.report.tables.Report
serves them. Their columns:

- comparisons: ``variant`` (its label), then one column per swept knob named by the knob
  (``amp``, ``batch_size``, ``model.attn``) holding the variant's value, ``baseline``,
  ``baseline_KNOB`` per treatment knob (the baseline's value), ``treatment``,
  ``baseline_treatment``, ``cell`` (as overrides), the estimate (``speedup``, ``ci_low``,
  ``ci_high``, ``ci_level``, ``verdict``, ``interval``, ``delta``, ``rounds``, ``p_value``,
  ``p_adjusted``, ``rounds_to_decide``, ``distribution_sensitive``, ``note``),
  ``knob_in_effect``, ``first_call_s``, ``baseline_first_call_s``, ``break_even_steps``,
  ``health`` (the comparison's flags, "; "-joined) and ``healthy`` (none).
- variants: ``variant``, one column per swept knob, ``name``, ``trials``, ``ok``,
  ``failed``; for a variant with an ok trial ``p50_ms`` ... ``p99_ms``,
  ``bounded_percentiles``, ``throughput`` (samples/s), ``PHASE_ms`` per step phase,
  ``peak_memory_mib``, ``first_call_s``, ``warmup_s``, ``warmup_stops``, ``timed_steps``;
  then ``health`` (its flags as text), ``healthy`` (an ok trial and no flag) and one
  ``health_KIND`` bool per kind of flag (HEALTH_KINDS; ``health_other`` for any other).
- numerics: ``variant``, ``baseline``, ``max_abs_err``, ``max_rel_err``, ``cosine``,
  ``loss_diff``, ``dtype``, ``tolerance``, ``ok``; ``reason`` where they were not compared.
- trials_frame(): ``variant``, ``name``, ``round``, ``session``, ``worker_generation``
  and ``worker_id`` (NaN for a trial in a fresh process), ``status``, ``steps``,
  ``p50_ms``, ``mean_ms``, ``min_ms``, ``max_ms`` (per step), ``cost_ms`` (the one number
  the analysis compares, perflab.analysis.trials.trial_cost: the median step for latency,
  the time per sample for throughput), ``started_at``, ``reason`` (why it was not ok).
- families_frame(): ``variant``, ``name``, ``device`` (cuda: kernel time on the device;
  cpu: self CPU time of the operators), ``family``, ``us`` (over the profiled steps),
  ``share`` (of the variant's profiled time).

A number that does not exist is NaN in a float column, never None.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from perflab.analysis.stats import per_step_ns, percentiles
from perflab.analysis.trials import trial_cost
from perflab.config.plan import Plan, Variant, assignments
from perflab.formats.profile_json import Profile
from perflab.formats.records import TrialRecord
from perflab.formats.summary import Comparison, Summary
from perflab.formats.summary.variant import Measured, VariantSummary
from perflab.report.rows import NAN, ComparisonRow

# the kinds of a variant's health flags (perflab.analysis.variants and
# perflab.analysis.health word them), each found by the words its flag starts with: a
# boolean column of the variants' frame, health_KIND
HEALTH_KINDS = {
    "noisy": re.compile(r"(grossly )?noisy steps"),
    "warmup_capped": re.compile(r"warm-up reached"),
    "unsteady": re.compile(r"\d+/\d+ trials changed level"),
    "loaded": re.compile(r"machine loaded"),
    "leak": re.compile(r"memory grows"),
    "stalls": re.compile(r"stalls:"),
    "throttled": re.compile(r"GPU (SM clock below|slowdown)"),
    "knob_off": re.compile(r"knob not in effect"),
}
# the step-time percentiles of a variant (StepTimes), each a column NAME_ms
PERCENTILES = ("p50", "p90", "p95", "p99")
# why a comparison has no numerics check
NO_PROBE = "no probe (no ok round-0 trial)"


def _nan(value: float | None) -> float:
    """A number of a frame's float column: NaN where there is none."""
    return NAN if value is None else value


def knob_values(plan: Plan, variant: Variant) -> dict[str, Any]:
    """The variant's value of each swept knob, a column each named by the knob, in the
    order the knobs were swept."""
    values = {**variant.cell, **variant.treatment}
    return {key: values.get(key) for key in plan.swept}


def comparison_frame(plan: Plan, rows: list[ComparisonRow]) -> pd.DataFrame:
    """comparisons.csv: one row per comparison (columns: the module docstring)."""
    return pd.DataFrame([_comparison_columns(plan, row) for row in rows])


def _comparison_columns(plan: Plan, row: ComparisonRow) -> dict[str, Any]:
    variant, base, c = row.variant, row.baseline, row.comparison
    return {
        "variant": variant.label,
        **knob_values(plan, variant),
        "baseline": base.label,
        # a comparison's two variants share their cell: they differ in treatment knobs only
        **{f"baseline_{key}": value for key, value in base.treatment.items()},
        "treatment": assignments(variant.treatment),
        "baseline_treatment": assignments(base.treatment),
        "cell": assignments(variant.cell),
        **_estimate_columns(c),
        "knob_in_effect": row.knob_in_effect,
        "first_call_s": row.first_call_s,
        "baseline_first_call_s": row.baseline_first_call_s,
        "break_even_steps": _nan(row.break_even_steps),
        "health": "; ".join(c.health),
        "healthy": not c.health,
    }


def _estimate_columns(c: Comparison) -> dict[str, Any]:
    """The comparison's columns of comparisons.csv; the numbers of its estimate are NaN
    without one (NO DATA), its words None."""
    e = c.estimate
    return {
        "speedup": e.speedup if e else NAN,
        "ci_low": e.ci_low if e else NAN,
        "ci_high": e.ci_high if e else NAN,
        "ci_level": e.ci_level if e else NAN,
        "verdict": c.verdict,
        "interval": e.interval if e else None,
        "delta": c.delta,
        "rounds": e.rounds if e else NAN,
        "p_value": _nan(e.p_value) if e else NAN,
        "p_adjusted": _nan(c.p_adjusted),
        "rounds_to_decide": _nan(e.rounds_to_decide) if e else NAN,
        "distribution_sensitive": e.distribution_sensitive if e else None,
        "note": c.note,
    }


def variant_frame(report_summary: Summary, plan: Plan | None = None) -> pd.DataFrame:
    """variants.csv: one row per variant (columns: the module docstring); the knobs'
    columns come from the plan."""
    entries = report_summary.variants
    knobs = [knob_values(plan, v) for v in plan.variants] if plan else [{}] * len(entries)
    rows = []
    for v, knob_columns in zip(entries, knobs, strict=True):
        rows.append(
            {
                "variant": v.label,
                **knob_columns,
                "name": v.name,
                "trials": v.trials,
                "ok": v.ok,
                "failed": len(v.failed),
                **(_measured_columns(v.measured) if v.measured is not None else {}),
                "health": "; ".join(v.health),
                **_health_columns(v),
            }
        )
    return pd.DataFrame(rows)


def _measured_columns(m: Measured) -> dict[str, Any]:
    """A measured variant's columns of variants.csv (warm-up and trial length: NaN and
    empty in a version 1 summary, which lacks them)."""
    steps = m.step_ns
    stops = m.warmup.stops.items() if m.warmup else ()
    timed = m.trial_length.timed_steps if m.trial_length else []
    return {
        **{f"{p}_ms": getattr(steps, p) / 1e6 for p in PERCENTILES},
        "bounded_percentiles": " ".join(steps.bounded_percentiles),
        "throughput": m.throughput,
        **{f"{k}_ms": _nan(t) / 1e6 for k, t in m.phase_median_ns.items()},
        "peak_memory_mib": m.peak_memory_bytes / 2**20,
        "first_call_s": m.first_call_ns / 1e9,
        "warmup_s": m.warmup.median_s if m.warmup else NAN,
        "warmup_stops": ", ".join(f"{k} {n}" for k, n in stops),
        "timed_steps": " ".join(map(str, timed)),
    }


def health_kind(flag: str) -> str:
    """The kind of a health flag (HEALTH_KINDS), "other" for one of none of them."""
    return next((kind for kind, words in HEALTH_KINDS.items() if words.match(flag)), "other")


def _health_columns(v: VariantSummary) -> dict[str, bool]:
    """healthy (an ok trial, no flag) and one bool per kind of flag."""
    kinds = {health_kind(flag) for flag in v.health}
    return {
        "healthy": v.ok > 0 and not v.health,
        **{f"health_{kind}": kind in kinds for kind in [*HEALTH_KINDS, "other"]},
    }


def numerics_frame(summary: Summary) -> pd.DataFrame:
    """numerics.csv: the variant's probe outputs against its baseline's, per comparison:
    the summary's Comparison.numerics, NaN where summary.json has null."""
    rows = []
    for c in summary.comparisons:
        row: dict[str, Any] = {"variant": c.variant, "baseline": c.baseline}
        if c.numerics is None:
            row.update({"ok": None, "reason": NO_PROBE})
        else:
            values = c.numerics.to_dict()
            row.update({k: NAN if v is None and k in _NUMERIC else v for k, v in values.items()})
        rows.append(row)
    return pd.DataFrame(rows)


# numerics.csv's number columns: NaN where the summary has null
_NUMERIC = ("max_abs_err", "max_rel_err", "cosine", "loss_diff", "tolerance")


def trial_frame(
    summary: Summary, plan: Plan, trials: dict[str, dict[int, TrialRecord]]
) -> pd.DataFrame:
    """One row per trial record, by variant then round (columns: the module docstring)."""
    rows = [
        {
            "variant": variant.label,
            "name": variant.name,
            "round": r,
            "session": _nan(record.session),
            **_worker_columns(record),
            "status": record.status,
            **_step_columns(record, summary.metric),
            "started_at": record.started_at,
            "reason": summary.variant(variant.name).failed.get(str(r)),
        }
        for variant in plan.variants
        for r, record in sorted(trials.get(variant.name, {}).items())
    ]
    return pd.DataFrame(rows, columns=TRIAL_COLUMNS)


TRIAL_COLUMNS = [
    "variant",
    "name",
    "round",
    "session",
    "worker_generation",
    "worker_id",
    "status",
    "steps",
    "p50_ms",
    "mean_ms",
    "min_ms",
    "max_ms",
    "cost_ms",
    "started_at",
    "reason",
]


def _worker_columns(record: TrialRecord) -> dict[str, float]:
    """The warm worker a trial ran in: its generation (the rounds it served) and number;
    NaN for a fresh process."""
    w = record.worker
    if not w.warm:
        return {"worker_generation": NAN, "worker_id": NAN}
    return {"worker_generation": _nan(w.generation), "worker_id": _nan(w.id)}


def _step_columns(record: TrialRecord, metric: str) -> dict[str, float]:
    """A trial's step times, ms per step, and its cost; NaN for a trial without steps."""
    samples = record.samples
    if samples is None or not samples.step_ns:
        return {k: NAN for k in ("steps", "p50_ms", "mean_ms", "min_ms", "max_ms", "cost_ms")}
    steps = per_step_ns(samples.step_ns, samples.steps_per_sample)
    return {
        "steps": len(samples.step_ns) * samples.steps_per_sample,
        "p50_ms": percentiles(steps, (50,))[0] / 1e6,
        "mean_ms": sum(steps) / len(steps) / 1e6,
        "min_ms": min(steps) / 1e6,
        "max_ms": max(steps) / 1e6,
        "cost_ms": trial_cost(record, metric) / 1e6,
    }


def family_frame(plan: Plan, profiles: dict[str, Profile | None]) -> pd.DataFrame:
    """One row per variant and family of its profiled pass, in the profile's order
    (columns: the module docstring); none for a variant without a profile."""
    rows = []
    for variant in plan.variants:
        profile = profiles.get(variant.name)
        if not profile:
            continue
        total = sum(profile.families_us.values()) or 1.0
        rows += [
            {
                "variant": variant.label,
                "name": variant.name,
                "device": profile.device,
                "family": family,
                "us": float(us),
                "share": us / total,
            }
            for family, us in profile.families_us.items()
        ]
    return pd.DataFrame(rows, columns=["variant", "name", "device", "family", "us", "share"])
