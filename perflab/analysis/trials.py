"""One trial's numbers from its record: its cost, the one number per trial every
consumer compares (the comparisons, carry-over, scaling, plots, --against, the stopping
rule), and its headline (percentiles, throughput, phases). perflab.analysis.stats
computes over plain numbers; this is where a record becomes them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perflab.analysis.stats import per_step_ns, percentiles
from perflab.formats.records import TrialRecord
from perflab.formats.trial_parts import TrialSettings


def trial_cost(record: TrialRecord, metric: str) -> float:
    """One number per trial, lower is better, in ns.

    latency: the median step time (robust to the odd preempted step).
    throughput: total timed ns per item over the whole block: stalls are real cost.
    """
    samples = record.samples
    if samples is None or not samples.step_ns:
        raise ValueError("a trial without samples has no cost")
    if metric == "latency":
        return percentiles(per_step_ns(samples.step_ns, samples.steps_per_sample), (50,))[0]
    batch_size = TrialSettings.of(record.settings).batch_size  # checked by load_record
    if batch_size is None:
        raise ValueError("a trial without its batch size has no throughput")
    items = len(samples.step_ns) * samples.steps_per_sample * batch_size
    return sum(samples.step_ns) / items


@dataclass(frozen=True)
class TrialSummary:
    steps: int
    p50_ns: float
    p90_ns: float
    p99_ns: float
    mean_ns: float
    # items per second over the whole timed block: stalls are real cost
    throughput: float
    first_call_ns: int
    # median of each phase, ns
    phase_median_ns: dict[str, float]
    peak_memory_bytes: int | None


def summarize_trial(record: TrialRecord) -> TrialSummary:
    """The headline numbers of one trial, derived from its raw samples."""
    samples = record.samples
    if samples is None:
        raise ValueError("a trial without samples has no summary")
    steps = per_step_ns(samples.step_ns, samples.steps_per_sample)
    p50, p90, p99 = percentiles(steps, (50, 90, 99))
    return TrialSummary(
        steps=len(samples.step_ns) * samples.steps_per_sample,
        p50_ns=p50,
        p90_ns=p90,
        p99_ns=p99,
        mean_ns=float(np.mean(steps)) if steps else float("nan"),
        throughput=1e9 / trial_cost(record, "throughput"),
        first_call_ns=samples.first_call_ns,
        phase_median_ns={k: percentiles(v, (50,))[0] for k, v in samples.phases_ns.items()},
        peak_memory_bytes=record.memory.peak_bytes,
    )
