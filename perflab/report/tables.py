"""A sweep as the report reads it: the typed values every section renders, and tidy
pandas DataFrames of them for notebooks and the CSV exports.

    from perflab.report import load
    report = load("multirun/2026-11-22/10-00-00-000000")
    report.summary           # summary.json as perflab.formats.summary.Summary (typed)
    report.comparison_rows   # per comparison: the summary's, with the knob's evidence,
                             # the first calls and the break-even (ComparisonRow)
    report.variant_rows      # per variant: the plan's and the summary's (VariantRow)
    report.comparisons       # DataFrame, one row per comparison (comparisons.csv)
    report.variants          # DataFrame, one row per variant, the A/A copy too (variants.csv)
    report.numerics          # DataFrame, one row per comparison: the variant's outputs
                             # against its baseline's (numerics.csv)
    report.trials_frame()    # DataFrame, one row per trial record
    report.families_frame()  # DataFrame, one row per variant and kernel or operator family
                             # of its profiled pass

The markdown renders the typed values; the frames are built from them. Their columns:

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
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from perflab.analysis.stats import per_step_ns, percentiles
from perflab.analysis.summarize import analyze
from perflab.analysis.sweep import Experiment, SweepRecords, read_sweep
from perflab.analysis.trials import trial_cost
from perflab.config.plan import Plan, Variant, assignments
from perflab.errors import OutsideSweep, RecordError
from perflab.formats.profile_json import Profile, read_profile
from perflab.formats.records import TrialRecord
from perflab.formats.summary import Comparison, Summary
from perflab.formats.summary.variant import Measured, VariantSummary
from perflab.formats.sweepdir import inside, profile_record

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
# the entry that proved a treatment key in records written before it had its own
EARLIER_EVIDENCE = {"pin_memory": "data_loader"}

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
NAN = float("nan")
# the step-time percentiles of a variant (StepTimes), each a column NAME_ms
PERCENTILES = ("p50", "p90", "p95", "p99")
# why a comparison has no numerics check
NO_PROBE = "no probe (no ok round-0 trial)"


@dataclass(frozen=True)
class VariantRow:
    """One variant as the report shows it: the plan's variant, its summary entry, and
    what its records add."""

    variant: Variant
    summary: VariantSummary
    # its kernels ran in Triton's interpreter (fused=triton on CPU, as its evidence says):
    # its timing says nothing of the compiled kernels
    interpreted: bool


@dataclass(frozen=True)
class ComparisonRow:
    """One comparison as the report shows it: the summary's comparison (estimate,
    numerics, health), the plan's two variants, and what their records add."""

    comparison: Comparison
    variant: Variant
    baseline: Variant
    # did each treatment knob take effect, per its evidence: "amp: yes, compile: NO"
    knob_in_effect: str
    # median first call (first batch, compilation) of each, s; NaN without one
    first_call_s: float
    baseline_first_call_s: float
    # steps after which the variant's slower first call is paid back by its faster
    # steps; None when it is not slower to start, or not faster to step
    break_even_steps: float | None
    # the variant's timing is Triton's interpreter's (VariantRow.interpreted)
    interpreted: bool


@dataclass
class Report:
    """Everything a report shows, computed from the records alone. The typed rows and
    the frames are derived from the summary, the plan and the records, once, on first
    use (module docstring)."""

    sweep_dir: Path
    experiment: Experiment
    summary: Summary
    trials: dict[str, dict[int, TrialRecord]]
    # variant name -> its profiling trial's profile.json, None when it has none
    profiles: dict[str, Profile | None]
    # record files that could not be read, "path relative to the sweep directory: why"
    skipped: list[str] = field(default_factory=list)

    @cached_property
    def comparison_rows(self) -> list[ComparisonRow]:
        """One per comparison, in the plan's order (the summary's): the comparisons
        frame and the markdown read the same rows."""
        return comparison_rows(self.summary, self.experiment.plan, self.trials)

    @cached_property
    def comparisons(self) -> pd.DataFrame:
        return comparison_frame(self.experiment.plan, self.comparison_rows)

    @cached_property
    def variants(self) -> pd.DataFrame:
        return variant_frame(self.summary, self.experiment.plan)

    @cached_property
    def numerics(self) -> pd.DataFrame:
        return numerics_frame(self.summary)

    @cached_property
    def variant_rows(self) -> list[VariantRow]:
        """One per variant, the A/A copy included, in the plan's order (the summary's)."""
        return variant_rows(self.summary, self.experiment.plan, self.trials)

    def trials_frame(self) -> pd.DataFrame:
        """One row per trial record (module docstring); built when asked, as it reads
        every record's steps."""
        return trial_frame(self.summary, self.experiment.plan, self.trials)

    def families_frame(self) -> pd.DataFrame:
        """One row per variant and family of its profiled pass (module docstring)."""
        return family_frame(self.experiment.plan, self.profiles)


def first_ok(trials: dict[int, TrialRecord]) -> TrialRecord | None:
    """The earliest ok trial: round 0 carries the probe and the layer evidence."""
    for _, record in sorted(trials.items()):
        if record.status == "ok":
            return record
    return None


def _evidence_ok(record: TrialRecord, name: str) -> tuple[bool, bool | None]:
    """(whether the record has the evidence entry ``name``, or the one that held it in
    records written before; what the entry says: did the knob take effect, None when it
    could not tell). The record keeps its evidence as the trial wrote it, JSON objects."""
    evidence = record.evidence.get(name)
    if evidence is None and name in EARLIER_EVIDENCE:
        evidence = record.evidence.get(EARLIER_EVIDENCE[name])
    return evidence is not None, None if evidence is None else evidence.get("ok")


def _treatment_check(plan: Plan, variant: Variant, record: TrialRecord | None) -> str:
    """The knob-in-effect column: per treatment key, "yes", "NO" or "n/a" by its evidence."""
    if record is None:
        return "no data"
    checks = []
    for key in variant.treatment:
        found, ok = _evidence_ok(record, TREATMENT_EVIDENCE.get(key, key))
        state = "n/a" if ok is None else ("yes" if ok else "NO")
        if not found and key not in TREATMENT_EVIDENCE:
            state += " (no check: +schedule.evidence)"  # a knob of the user's own
        checks.append(f"{key}: {state}")
    return ", ".join(checks) or "n/a"


def interpreted(record: TrialRecord | None) -> bool:
    """The record's Triton kernels ran in the interpreter (fused=triton on CPU): its
    fused evidence says the timing is not representative."""
    fused = record.evidence.get("fused") if record is not None else None
    return fused is not None and fused.get("timing_representative") is False


# --- the typed rows -----------------------------------------------------------------------


def variant_rows(
    summary: Summary, plan: Plan, trials: dict[str, dict[int, TrialRecord]]
) -> list[VariantRow]:
    """One per variant of the plan, with its summary entry (the same order)."""
    return [
        VariantRow(variant, entry, interpreted(first_ok(trials.get(variant.name, {}))))
        for variant, entry in zip(plan.variants, summary.variants, strict=True)
    ]


def comparison_rows(
    summary: Summary, plan: Plan, trials: dict[str, dict[int, TrialRecord]]
) -> list[ComparisonRow]:
    """One per comparison of the plan, with the summary's (the same order)."""
    rows = []
    for (variant, base), c in zip(plan.comparisons(), summary.comparisons, strict=True):
        v_sum, b_sum = summary.variant(variant.name).measured, summary.variant(base.name).measured
        record = first_ok(trials[variant.name])
        rows.append(
            ComparisonRow(
                comparison=c,
                variant=variant,
                baseline=base,
                knob_in_effect=_treatment_check(plan, variant, record),
                first_call_s=_first_call_s(v_sum),
                baseline_first_call_s=_first_call_s(b_sum),
                break_even_steps=_break_even(v_sum, b_sum),
                interpreted=interpreted(record),
            )
        )
    return rows


def _first_call_s(measured: Measured | None) -> float:
    return ((measured.first_call_ns if measured else None) or NAN) / 1e9


def _break_even(v_sum: Measured | None, b_sum: Measured | None) -> float | None:
    """Steps after which a slower first call (compilation) is paid back by faster steps."""
    if v_sum is None or b_sum is None:
        return None
    extra = v_sum.first_call_ns - b_sum.first_call_ns
    saved = b_sum.step_ns.p50 - v_sum.step_ns.p50
    if extra <= 0 or saved <= 0:
        return None
    return extra / saved


# --- the frames ---------------------------------------------------------------------------


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
    NaN for a fresh process. The record keeps it as the trial wrote it, a JSON object."""
    w = record.worker
    if w.get("isolation") != "worker":
        return {"worker_generation": NAN, "worker_id": NAN}
    return {"worker_generation": _nan(w.get("generation")), "worker_id": _nan(w.get("id"))}


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


def _profile(sweep_dir: Path, job_dir: str, skipped: list[str]) -> Profile | None:
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


def load(
    sweep_dir: str | Path, summary: Summary | None = None, records: SweepRecords | None = None
) -> Report:
    """Analyse a sweep directory from its records and build every table (``records``:
    the records this command already read, and ``summary``: the analysis just computed
    from them, to save doing either twice)."""
    sweep_dir = Path(sweep_dir)
    records = records if records is not None else read_sweep(sweep_dir)
    experiment, trials = records.experiment, records.trials
    skipped = list(records.skipped)
    summary = summary if summary is not None else analyze(experiment, trials)
    plan = experiment.plan
    profiles = {v.name: _profile(sweep_dir, v.dir, skipped) for v in plan.variants}
    return Report(sweep_dir, experiment, summary, trials, profiles, skipped)
