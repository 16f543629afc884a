"""Pure functions over raw samples: no torch, no I/O. Summaries are recomputed, never stored."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perflab.records import TrialRecord


def percentiles(values: Sequence[float], qs: Sequence[float]) -> list[float]:
    """Percentiles by linear interpolation between order statistics (numpy's default)."""
    if not len(values):
        return [float("nan")] * len(qs)
    return [float(v) for v in np.percentile(np.asarray(values, dtype=np.float64), qs)]


def per_step_ns(step_ns: Sequence[int], steps_per_sample: int) -> list[float]:
    return [v / steps_per_sample for v in step_ns]


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
    total_ns = sum(samples.step_ns)
    n_steps = len(samples.step_ns) * samples.steps_per_sample
    batch = int(record.settings.get("batch_size", 1))
    return TrialSummary(
        steps=n_steps,
        p50_ns=p50,
        p90_ns=p90,
        p99_ns=p99,
        mean_ns=float(np.mean(steps)) if steps else float("nan"),
        throughput=n_steps * batch / (total_ns / 1e9) if total_ns else float("nan"),
        first_call_ns=samples.first_call_ns,
        phase_median_ns={k: percentiles(v, (50,))[0] for k, v in samples.phases_ns.items()},
        peak_memory_bytes=record.memory.get("peak_bytes"),
    )
