"""The typed rows the report renders, one per variant and one per comparison: the
summary's entry with the plan's variants and what their records add (the knob's
evidence, the first calls, the break-even, Triton's interpreter). The markdown renders
them; perflab.report.frames turns them into DataFrames."""

from __future__ import annotations

from dataclasses import dataclass

from perflab.config.plan import Plan, Variant
from perflab.formats.records import TrialRecord
from perflab.formats.summary import Comparison, Summary
from perflab.formats.summary.variant import Measured, VariantSummary

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
# a number that does not exist: NaN in a row's float field and a frame's float column
NAN = float("nan")


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


def first_ok(trials: dict[int, TrialRecord]) -> TrialRecord | None:
    """The earliest ok trial: round 0 carries the probe and the layer evidence."""
    for _, record in sorted(trials.items()):
        if record.status == "ok":
            return record
    return None


def _evidence_ok(record: TrialRecord, name: str) -> tuple[bool, bool | None]:
    """(whether the record has the evidence entry ``name``, or the one that held it in
    records written before; what the entry says: did the knob take effect, None when it
    could not tell)."""
    evidence = record.evidence.get(name)
    if evidence is None and name in EARLIER_EVIDENCE:
        evidence = record.evidence.get(EARLIER_EVIDENCE[name])
    return evidence is not None, None if evidence is None else evidence.ok


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
    return fused is not None and fused.timing_representative is False


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
