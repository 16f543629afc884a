"""summary.json as typed dataclasses: what perflab.analysis computes from a sweep's
records, written by write_summary and read back, every value checked against its
field's type, by load_summary (load_merged_summary for a grouped sweep's merged file).

The dataclasses' fields are summary.json's keys in the order they are written: to_dict()
gives the JSON object key for key, so a summary read and written again is the same file,
byte for byte. Fields and units are documented in docs/experiments.md (summary.json); a
variant's entry is modelled in perflab.formats.summary.variant, the encoding (nested objects
written inline, keys written only when they apply) is perflab.formats.dataclass_json's.

Schema history:
  1 (2026-11-22) no schema_version field: the dict perflab.analysis returned, which grew
     from commit to commit (welch, outlier_steps; numerics; memory_kind, memory_by_phase,
     telemetry; on 2026-11-23 interval, t, carryover, health, warmup, trial_length and
     edited_records, and delta_requested dropped). Still read, every form of it:
     perflab.formats.summary.upgrade fills in what an older file lacks.
  2 (2026-11-23) ``schema_version`` (written first); otherwise the keys and values of
     version 1's last form, unchanged.
  3 (2026-11-26) a comparison's ``across_sessions``: the rounds of a resumed sweep whose
     two trials ran in different sessions, not paired. Version 2 files have none.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from perflab.errors import RecordError
from perflab.formats.dataclass_json import (
    SchemaError,
    decode,
    encode,
    inline,
    read_version,
    written_when,
)
from perflab.formats.groups import GroupEntry
from perflab.formats.json_file import read_json
from perflab.formats.records import write_json_atomic
from perflab.formats.summary.upgrade import Upgrade, merged_from_version_1, summary_from_version_1
from perflab.formats.summary.variant import VariantSummary

SUMMARY_SCHEMA_VERSION = 3
SUPPORTED_SUMMARY_VERSIONS = (1, 2, 3)
# the verdict of a comparison without an estimate (too few paired rounds)
NO_DATA = "NO DATA"

T = TypeVar("T")


class SummaryError(RecordError):
    """A summary.json that cannot be read: not JSON, a newer schema_version, or a field
    missing, unknown or of the wrong type (named in the message)."""


# --- numbers as summary.json holds them ---------------------------------------------------


def finite(value: float | None) -> float | None:
    """JSON has no NaN or infinity: an unbounded or undefined number is None (null), in
    the fields that allow None (an interval's open end, a p-value without spread)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def finite_json(value: Any) -> Any:
    """``finite`` applied to every number of a JSON value (a record's settings, a cell,
    memory readings: summary.json copies them as they are, with null for NaN)."""
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_json(v) for v in value]
    return finite(value) if isinstance(value, float) else value


# --- a paired comparison's numbers ------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Interval:
    # speedup, baseline cost / variant cost (> 1: the variant is faster)
    speedup: float
    # lower end of its confidence interval (None: the end does not exist)
    ci_low: float | None
    # upper end (None: an unbounded interval)
    ci_high: float | None


@dataclass(frozen=True, kw_only=True)
class Welch:
    """Welch's unpaired interval on the log costs of every ok trial, rounds ignored."""

    # speedup, baseline / variant
    speedup: float
    # lower end of its interval (None: undefined, e.g. no spread)
    ci_low: float | None
    # upper end (None: undefined)
    ci_high: float | None
    # two-sided p-value of "no difference" (None: undefined)
    p_value: float | None


@dataclass(frozen=True, kw_only=True)
class Unadjusted:
    """The plain paired numbers of a comparison that the carry-over model decided."""

    # speedup, baseline / variant
    speedup: float
    # lower end of the interval
    ci_low: float
    # upper end of the interval
    ci_high: float
    # the verdict this interval gave
    verdict: str
    # which interval it is: "t" or "trimmed"
    interval: str
    # two-sided p-value of "no difference" (None: no spread)
    p_value: float | None
    # larger relative distance of an end from the speedup
    half_width: float


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """The paired estimate of one comparison (perflab.analysis.verdicts.compare)."""

    # speedup, baseline cost / variant cost (> 1: the variant is faster)
    speedup: float
    # lower end of the interval that gave the verdict
    ci_low: float
    # upper end of that interval
    ci_high: float
    # its confidence level
    ci_level: float
    # which interval gave the verdict: "t", "trimmed" or "carry-over model"
    interval: str
    # larger relative distance of an end from the speedup
    half_width: float
    # paired rounds used
    rounds: int
    # with warm workers (schedule.isolation=worker): the independent units the interval
    # was computed from (worker generations), and the rounds each spans
    units: int | None = written_when()
    rounds_per_unit: int | None = written_when()
    # two-sided p-value of "no difference", before adjustment (None: no spread)
    p_value: float | None
    # standard deviation of the per-round log-ratios
    sd_log_ratio: float
    # FASTER, SLOWER, EQUIVALENT or INCONCLUSIVE, against the band
    verdict: str
    # the Student t interval on the per-round log-ratios
    t: Interval
    # the distribution-free Hodges-Lehmann estimate and interval
    hodges_lehmann: Interval
    # the Hodges-Lehmann interval gives another verdict (skewed or bimodal data)
    distribution_sensitive: bool
    # rounds whose log-ratio is an outlier (modified z-score above 3.5)
    outlier_rounds: list[int]
    # INCONCLUSIVE: total rounds likely needed (None otherwise, or on the band's edge)
    rounds_to_decide: int | None
    # the unpaired companion, with at least two ok trials of each variant
    welch: Welch | None = written_when()
    # the t interval without the outlier rounds, when there are some
    without_outliers: Interval | None = written_when()


# --- comparisons, the sentinel, carry-over, scaling -------------------------------------


def _compared(n: Numerics) -> bool:
    return n.reason is None


@dataclass(frozen=True, kw_only=True)
class Numerics:
    """The variant's probe outputs against its baseline's (perflab.analysis.numerics);
    outputs of different shapes have only ``ok`` and ``reason``."""

    # largest absolute difference of the sampled outputs
    max_abs_err: float | None = written_when(_compared)
    # the same, relative to the largest output magnitude
    max_rel_err: float | None = written_when(_compared)
    # cosine similarity of the sampled outputs
    cosine: float | None = written_when(_compared)
    # variant loss - baseline loss
    loss_diff: float | None = written_when(_compared)
    # the less precise output dtype of the two
    dtype: str | None = written_when(_compared)
    # the relative tolerance that dtype sets
    tolerance: float | None = written_when(_compared)
    # the outputs agree within the tolerance
    ok: bool
    # why the outputs could not be compared (their shapes differ)
    reason: str | None = written_when()

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, key for key (NaN kept as it is: a report's table shows it)."""
        return encode(self)


@dataclass(frozen=True, kw_only=True)
class Comparison:
    # the variant's label
    variant: str
    # the label of the baseline it is compared with
    baseline: str
    # the swept values the two share (their cell)
    cell: dict[str, Any]
    # "latency" or "throughput"
    metric: str
    # the band: schedule.delta
    delta: float
    # the variant's health flags, its baseline's ("baseline: ..."), a numerics change
    health: list[str]
    # None without a probe of both variants
    numerics: Numerics | None
    # None with fewer than 3 paired rounds (the file then says verdict "NO DATA")
    estimate: Estimate | None = inline("speedup", {"verdict": NO_DATA})
    # with a carry-over flagged: the plain paired numbers (the estimate is the model's)
    unadjusted: Unadjusted | None = written_when()
    # the p-value adjusted across the experiment's comparisons
    p_adjusted: float | None = written_when(lambda c: c.adjustment is not None)
    # how: "holm" or "benjamini-hochberg" (None: no estimate)
    adjustment: str | None = written_when()
    # why the verdict was downgraded (not significant after the adjustment)
    note: str | None = written_when()
    # rounds (from 0) whose two trials ran in different sessions of a resumed sweep, and
    # so were not paired (perflab.analysis.sessions); only when there are some
    across_sessions: list[int] | None = written_when()
    # the scale-out group it ran in: only in a grouped sweep's merged summary.json
    group: str | None = written_when()

    @property
    def verdict(self) -> str:
        return self.estimate.verdict if self.estimate is not None else NO_DATA


@dataclass(frozen=True, kw_only=True)
class Sentinel:
    """The A/A comparison: a baseline against its hidden copy."""

    # its paired estimate, as a comparison's
    estimate: Estimate = inline("speedup")
    # how far from 1 its interval reaches (information only: the band stays delta)
    noise_floor: float
    # with a carry-over flagged: the plain paired numbers
    unadjusted: Unadjusted | None = written_when()


@dataclass(frozen=True, kw_only=True)
class CarryOverEffect:
    # label of the predecessor configuration
    after: str
    # label of the reference predecessor it is compared with
    reference: str
    # relative change of a trial's cost after ``after`` instead of ``reference``
    # (+0.05: 5 % slower)
    effect: float
    # lower end of its interval
    low: float
    # upper end of its interval
    high: float
    # p-value, Holm-adjusted across the predecessors
    p_adjusted: float
    # trials that followed ``after``
    trials: int


@dataclass(frozen=True, kw_only=True)
class ScalingRow:
    # the cell's batch size, as swept
    batch_size: Any
    # label of the baseline variant of that batch size
    variant: str
    # samples/s: exp of the mean log throughput over its trials
    throughput: float
    # lower end of its t interval over the trials, samples/s
    ci_low: float
    # upper end, samples/s
    ci_high: float
    # trials it is computed from
    trials: int


# --- the whole file ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Isolation:
    """How the trials were run (schedule.isolation) and where their time went."""

    # "worker" (warm workers, each serving trials_per_worker rounds) or "process" (a
    # fresh process per trial)
    mode: str
    # rounds one worker serves, the analysis's unit (1 with "process")
    trials_per_worker: int
    # workers started over the experiment (None with "process")
    workers: int | None = written_when()
    # trials that wrote their costs down
    trials: int
    # seconds summed over those trials, by part: start, build, first_call, warmup, timed,
    # checks, other (where a record wrote it down)
    cost_s: dict[str, float]


@dataclass(frozen=True, kw_only=True)
class Summary:
    """A sweep's summary.json (perflab.analysis.summarize.analyze)."""

    # the file's schema version (history above)
    schema_version: int = SUMMARY_SCHEMA_VERSION
    # "latency" or "throughput"
    metric: str
    # confidence level of every interval
    ci_level: float
    # the band verdicts are judged against: schedule.delta
    delta: float
    # schedule.label, e.g. "exploratory (preset=quick)"
    label: str
    # complete rounds
    rounds: int
    # how the run ended: "precision reached", "max rounds", "interrupted", ...
    stop_reason: str
    # seconds spent measuring
    elapsed_s: float
    # how the trials were run and what each part cost (None before warm workers existed)
    isolation: Isolation | None = written_when()
    # reasons not to trust the verdicts (the A/A sentinel outside the band)
    unreliable: list[str]
    # notes on the whole experiment: an A/A bias, a carry-over
    health: list[str]
    # records changed after they were written, relative to the sweep directory
    edited_records: list[str]
    # more than 20 comparisons: Benjamini-Hochberg instead of Holm
    exploratory: bool
    # the A/A comparison; None without a sentinel or paired rounds of it
    sentinel: Sentinel | None
    # per predecessor configuration: its effect on the next trial's cost
    carryover: list[CarryOverEffect]
    # one per variant with a baseline, in the plan's order
    comparisons: list[Comparison]
    # when batch_size is swept: throughput of each baseline variant
    scaling: list[ScalingRow]
    # one per variant, the sentinel's included, in the plan's order
    variants: list[VariantSummary]

    def to_dict(self) -> dict[str, Any]:
        """summary.json's object, key for key."""
        return encode(self)

    @classmethod
    def from_dict(cls, data: Any) -> Summary:
        """A summary of any supported schema_version; SummaryError names a bad field."""
        return _decoded(cls, data, summary_from_version_1)

    def variant(self, name: str) -> VariantSummary:
        """The entry of the variant named ``name`` (its job number, or "sentinel")."""
        return next(v for v in self.variants if v.name == name)


@dataclass(frozen=True, kw_only=True)
class MergedSummary:
    """A grouped sweep's summary.json (perflab.report.merge): every group's comparisons
    and flags, each tagged with its group."""

    # the file's schema version (history above)
    schema_version: int = SUMMARY_SCHEMA_VERSION
    # groups.json's entries (perflab.formats.groups), a group unreadable at the merge
    # with state "unreadable: why"
    groups: list[GroupEntry]
    # every group's comparisons, each with its group
    comparisons: list[Comparison]
    # the groups' reasons not to trust their verdicts, "GROUP: ..."
    unreliable: list[str]
    # the groups' experiment notes, "GROUP: ..."
    health: list[str]
    # each group's A/A sentinel, None where it has none
    sentinels: list[Sentinel | None]
    # record files the groups' analyses skipped, "GROUP: path: why"
    skipped: list[str]
    # records changed after they were written, "GROUP: path"
    edited_records: list[str]

    def to_dict(self) -> dict[str, Any]:
        """The merged summary.json's object, key for key."""
        return encode(self)

    @classmethod
    def from_dict(cls, data: Any) -> MergedSummary:
        """A merged summary of any supported schema_version."""
        return _decoded(cls, data, merged_from_version_1)


def tagged(comparison: Comparison, group: str) -> Comparison:
    """The comparison as a merged summary lists it, with its group."""
    return replace(comparison, group=group)


# --- files ------------------------------------------------------------------------------


def write_summary(path: Path, summary: Summary | MergedSummary) -> None:
    """Write summary.json atomically (perflab.formats.records.write_json_atomic)."""
    write_json_atomic(path, summary.to_dict())


def load_summary(path: Path) -> Summary:
    """Read a sweep's summary.json; SummaryError names the file and what is wrong."""
    return _load(path, Summary.from_dict)


def load_merged_summary(path: Path) -> MergedSummary:
    """Read a grouped sweep's merged summary.json."""
    return _load(path, MergedSummary.from_dict)


def _load(path: Path, build: Callable[[Any], T]) -> T:
    try:
        data = read_json(path)  # not JSON, or nested deeper than any summary: ValueError
    except (OSError, ValueError) as exc:
        raise SummaryError(f"{path}: not a readable summary.json ({exc})") from exc
    try:
        return build(data)
    except SummaryError as exc:
        raise SummaryError(f"{path}: {exc}") from exc


def _decoded(cls: type[T], data: Any, upgrade: Upgrade) -> T:
    try:
        return decode(cls, _current(data, upgrade))
    except SchemaError as exc:
        raise SummaryError(str(exc)) from exc


def _current(data: Any, upgrade: Upgrade) -> dict[str, Any]:
    """The object in the current version's form: a version 1 object upgraded, a newer or
    unknown schema_version refused."""
    if not isinstance(data, dict):
        raise SchemaError(f"not a perflab summary (a JSON {type(data).__name__})")
    version = read_version(data, SUMMARY_SCHEMA_VERSION, SUPPORTED_SUMMARY_VERSIONS)
    return upgrade(data, SUMMARY_SCHEMA_VERSION) if version == 1 else data
