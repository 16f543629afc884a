"""summary.json's entry of one variant: what its trials measured, as typed dataclasses
(part of perflab.formats.summary's model; perflab.profile.diagnosis reads it). The fields
are the JSON keys, in the order they are written; docs/experiments.md has the meanings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perflab.formats.dataclass_json import inline, written_when
from perflab.formats.trial_parts import PhaseReading


@dataclass(frozen=True, kw_only=True)
class StepTimes:
    """Every timed step of the variant's ok trials, pooled, in ns."""

    # median step
    p50: float
    # 90th, 95th and 99th percentile steps (descriptive unless in bounded_percentiles)
    p90: float
    p95: float
    p99: float
    # mean step
    mean: float
    # standard deviation of the steps
    std: float
    # interquartile range
    iqr: float
    # median absolute deviation from the median
    mad: float
    # coefficient of variation, std / mean (no unit)
    cv: float
    # percentiles with at least 10 samples beyond them ("p50", ...)
    bounded_percentiles: list[str]
    # timed steps counted
    steps: int
    # steps outside Tukey's fences of their own trial (flagged, kept); None in a version
    # 1 file written before they were counted
    outlier_steps: int | None


@dataclass(frozen=True, kw_only=True)
class TrialCost:
    # median per-trial cost (the metric's one number per trial), ns
    median: float
    # rounds whose trial cost is an outlier among the variant's (modified z-score)
    outlier_trials: list[int]


@dataclass(frozen=True, kw_only=True)
class Telemetry:
    """GPU telemetry over a variant's trials (perflab.analysis.variants)."""

    # any trial had NVML readings; the other fields but reason only then
    available: bool
    # why there are none (no GPU, NVML missing, ...)
    reason: str | None = written_when(lambda t: not t.available)
    # the GPU's name
    device: str | None = written_when(lambda t: t.available)
    # trials with readings
    trials: int | None = written_when(lambda t: t.available)
    # median of the per-trial median GPU utilization, %
    util_pct_median: float | None = written_when(lambda t: t.available)
    # median of the per-trial median SM clock / its maximum
    clock_ratio_median: float | None = written_when(lambda t: t.available)
    # median of the per-trial median power draw, W
    power_w_median: float | None = written_when(lambda t: t.available)
    # highest temperature seen, degrees C
    temperature_c_max: float | None = written_when(lambda t: t.available)


@dataclass(frozen=True, kw_only=True)
class Warmup:
    # median warm-up length over the trials, s
    median_s: float
    # median warm-up steps over the trials
    median_steps: float
    # warm-ups that ended each way ("steady", "cap", "minimum", "none") -> count
    stops: dict[str, int]


@dataclass(frozen=True, kw_only=True)
class TrialLength:
    # "fixed" (by the configuration's calibrating trial), else the trials' own length
    # rule ("bounds", "calibrating")
    rule: str
    # round of the calibrating trial, when fixed
    from_round: int | None
    # steps per timed sample seen over the trials
    steps_per_sample: list[int]
    # timed steps per trial seen over the trials
    timed_steps: list[int]


@dataclass(frozen=True, kw_only=True)
class Variance:
    # variance of the per-trial mean log step time that step noise explains; None with
    # too few trials
    within: float | None
    # the rest: variance between trials; None with too few trials
    between: float | None
    # which of the two more rounds or longer trials would shrink
    advice: str
    # with warm workers: the part of ``between`` that comes with the worker process
    worker: float | None = written_when()


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What a variant's ok trials measured (a variant without one has none)."""

    # step-time statistics
    step_ns: StepTimes
    # the per-trial costs the comparisons use
    trial_cost_ns: TrialCost
    # median per-trial throughput, samples/s
    throughput: float
    # median first call (first batch, compilation, autotuning), ns
    first_call_ns: float
    # median of each step phase over the trials that have it, ns (None: no samples)
    phase_median_ns: dict[str, float | None]
    # peak memory over the trials, bytes
    peak_memory_bytes: int
    # what memory counts: "cuda_allocator" or "process_rss"
    memory_kind: str | None
    # memory at the end of each phase of one instrumented step: the trial record's
    # memory.phases, each written as the trial wrote it (docs/records.md)
    memory_by_phase: list[PhaseReading]
    # None in a version 1 file written before telemetry was sampled
    telemetry: Telemetry | None
    # highest 1/5/15-minute load average seen at a trial's start or end
    load_max: float
    # what the config became on the machine: the first ok trial's record.settings
    settings: dict[str, Any]
    # how the warm-ups went; None in a version 1 file written before the warm-up rule
    warmup: Warmup | None
    # how the timed blocks' length was set; None in a version 1 file, as warmup
    trial_length: TrialLength | None
    # where the spread of the trials comes from
    variance: Variance
    # mean seconds per trial by part: start, build, first_call, warmup, timed, checks,
    # other (where a record wrote it down); None for records before schema 4, which did
    # not write them down
    cost_s: dict[str, float] | None = written_when()
    # warm workers that ran its ok trials (None: a fresh process each)
    workers: int | None = written_when()


@dataclass(frozen=True, kw_only=True)
class VariantSummary:
    # the variant's name: its job number, or "sentinel"
    name: str
    # its overrides as a label, e.g. "amp=true"
    label: str
    # its job directory, relative to the sweep directory
    dir: str
    # trials on disk
    trials: int
    # trials whose status is ok
    ok: int
    # round (as a string) -> why its trial was not ok
    failed: dict[str, str]
    # flags that make its timing suspect (noise, leaks, stalls, throttling, ...)
    health: list[str]
    # None when no trial was ok
    measured: Measured | None = inline("step_ns", {})
