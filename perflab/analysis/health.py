"""Health flags: what in a variant's trials makes their timing suspect beyond noise.
A leak (memory rising through the timed block), stalls (samples many times the median)
and GPU telemetry (a low SM clock, slowdown reasons). Pure functions over records.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from perflab.formats.records import THROTTLE_BITS, TrialRecord
from perflab.formats.trial_parts import TrialTelemetry

MIB = 2**20


# A leak: memory that rose steadily through a trial's timed block (growth below)
# by at least 16 MiB and 5 % of what it held as the block began. The absolute floor sits
# above the 12 MiB that the convnet's RSS swings between samples on CPU; the relative
# one keeps out growth that is small for the process (CPU RSS starts near 400 MiB of
# preloaded torch) and could neither change a step's time nor exhaust memory during a
# run. A variant is flagged when at least half of its trials leak: a leak in the model
# is in every trial.
LEAK_MIN_BYTES = 16 * MIB
LEAK_MIN_SHARE = 0.05


# A stall: a sample at least 5x its trial's median and at least 50 ms long; the floor keeps
# scheduler preemptions of microsecond steps on a shared machine out (a stall worth a flag
# is a checkpoint, an evaluation or a sleep: tenths of a second and more). A variant is
# flagged from two stalls on, so one lone hiccup in a sweep is not a flag.
STALL_RATIO = 5.0
STALL_MIN_NS = 50_000_000


STALL_MIN_COUNT = 2


def _growth(record: TrialRecord) -> Growth | None:
    readings = record.memory.sample_bytes or []
    return growth(readings, record.samples.steps_per_sample) if record.samples else None


def _leaks(growth: Growth) -> bool:
    return (
        growth.steady
        and growth.over_block >= LEAK_MIN_BYTES
        and growth.over_block >= LEAK_MIN_SHARE * growth.start
    )


def leak_flag(ok: list[TrialRecord]) -> str | None:
    """A health flag when memory grew steadily through the timed block of at least half of
    the trials with enough per-sample readings, with the median growth of those that
    grew; None otherwise (and for records from before the readings)."""
    growths = [g for g in map(_growth, ok) if g is not None]
    leaking = [g for g in growths if _leaks(g)]
    if not leaking or 2 * len(leaking) < len(growths):
        return None
    per_100 = float(np.median([g.per_step for g in leaking])) * 100 / MIB
    return (
        f"memory grows +{per_100:.1f} MiB per 100 steps through the timed block in "
        f"{len(leaking)}/{len(growths)} trials (a leak?)"
    )


def stalls(sample_ns: list[int]) -> list[int]:
    """The samples of one trial that are stalls: >= STALL_RATIO x its median and
    >= STALL_MIN_NS."""
    if not sample_ns:
        return []
    floor = max(STALL_RATIO * float(np.median(sample_ns)), STALL_MIN_NS)
    return [v for v in sample_ns if v >= floor]


def stall_flag(ok: list[TrialRecord]) -> str | None:
    """A health flag when the variant's samples hold at least STALL_MIN_COUNT stalls, with
    their count and the longest."""
    samples = [t.samples.step_ns for t in ok if t.samples is not None]
    found = [stalls(x) for x in samples]
    count = sum(len(x) for x in found)
    if count < STALL_MIN_COUNT:
        return None
    longest = max(v for x in found for v in x)
    trials = sum(bool(x) for x in found)
    where = f" in {trials}/{len(samples)} trials" if len(samples) > 1 else ""
    return (
        f"stalls: {count} of {sum(len(x) for x in samples)} samples >= {STALL_RATIO:g}x "
        f"the median step (up to {longest / 1e9:.2f} s){where}"
    )


# The growth rule splits a trial's readings in quarters and takes the lowest reading of
# each: the memory the quarter never went below, what the process holds for good.
# Activations freed between steps make the RSS of the built-in convnet swing by 12 MiB
# from one sample to the next on CPU (glibc returns large blocks to the system); the
# minimum ignores that swing, and four quarters show whether memory rose throughout or
# only once.
GROWTH_PARTS = 4
MIN_READINGS = 2 * GROWTH_PARTS


@dataclass(frozen=True)
class Growth:
    """How memory grew through one trial's timed block (see ``growth``)."""

    # bytes per step, between the lowest readings of the first and the last quarter
    per_step: float
    # per_step times the trial's timed steps
    over_block: float
    # the first quarter's lowest reading: memory held as the timed block began
    start: float
    # memory rose from each quarter to the next by at least half an even share of the
    # whole rise, as a leak does; a one-time jump (a cache filling up, a buffer
    # allocated late) or a ramp that settles in the first quarter does not
    steady: bool


def growth(readings: Sequence[int], steps_per_sample: int) -> Growth | None:
    """Memory growth through a timed block from its per-sample readings (SampleMemory);
    None with fewer than MIN_READINGS readings."""
    n = len(readings)
    if n < MIN_READINGS:
        return None
    bounds = [n * q // GROWTH_PARTS for q in range(GROWTH_PARTS + 1)]
    lows = [min(readings[a:b]) for a, b in pairwise(bounds)]
    rise = lows[-1] - lows[0]
    # over the samples between the first quarter's start and the last one's: a steady
    # leak's lowest readings are the first of their quarters
    per_step = rise / ((bounds[-2] - bounds[0]) * steps_per_sample)
    even_share = rise / (GROWTH_PARTS - 1)
    steady = rise > 0 and min(b - a for a, b in pairwise(lows)) >= even_share / 2
    return Growth(per_step, per_step * n * steps_per_sample, float(lows[0]), steady)


BENIGN_REASONS = frozenset({"gpu_idle", "applications_clocks_setting", "display_clock_setting"})


# Health thresholds (docs/design.md#health-flags): a median SM clock below 75 % of the
# GPU's maximum, or a slowdown reason in at least 10 % of the samples, is flagged.
LOW_CLOCK_RATIO = 0.75
THROTTLED_SHARE = 0.10


def telemetry_flags(trials: list[TrialTelemetry]) -> list[str]:
    """What in the telemetry of a variant's trials makes their timing suspect, one line
    per kind however many trials show it: a low SM clock, and each slowdown reason held
    in at least THROTTLED_SHARE of a trial's samples."""
    have = [t for t in trials if t.available]
    flags = []
    low = [r for t in have if (r := t.clock_ratio_median) is not None and r < LOW_CLOCK_RATIO]
    if low:
        flags.append(
            f"GPU SM clock below {LOW_CLOCK_RATIO:.0%} of its maximum in {len(low)}/"
            f"{len(have)} trials (median {statistics.median(low):.0%}): throttled or "
            "power-managed"
        )
    for name in THROTTLE_BITS:
        if name in BENIGN_REASONS:
            continue
        shares = [
            share
            for t in have
            if (share := (t.throttle_share or {}).get(name, 0.0)) >= THROTTLED_SHARE
        ]
        if shares:
            flags.append(
                f"GPU slowdown {name} in {len(shares)}/{len(have)} trials, median "
                f"{statistics.median(shares):.0%} of samples"
            )
    return flags
