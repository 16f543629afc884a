"""The upper bound of every numeric config field, in one table, each with its reason.

Without them the absurd passed validation and failed late: ``profiling.active=10**20``
grew its profiling trial by ~130 MB/s until it was killed at 6 GiB,
``data.augment_passes=10**20`` kept every trial busy until its 900 s timeout,
``trial.timeout_s=1e20`` and ``schedule.settle_s=1e20`` raised OverflowError after the
sweep had started, and ``threads=10**20`` failed every trial. ``check_maxima`` refuses any
value above its bound with one ConfigError (field, value, bound and reason: exit 2) when
the config is validated, before a sweep starts or a trial runs.

The bounds refuse what no real run asks for; they are not the limits of this machine.
Sizes that cannot fit the memory here are refused later, still before anything is
measured, by perflab.measure.sizes, with the largest value that fits: a bound below sits
far above what any machine holds, so that check keeps the last word on them.

Lower bounds, ranges and rules between fields (``trial.max_steps >= trial.min_steps``)
stay in perflab.config.rules; NaN and infinity are refused there for every float field.
Every int and float field of the schema has an entry here: a field without one is a bug
(tests/test_bounds.py checks the schema against this table, docs/configuration.md
lists it).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from math import isqrt
from typing import Any

from perflab.config.vocabulary import SEED_MAX
from perflab.errors import ConfigError

# --- the yardsticks the bounds derive from -------------------------------------------------

DAY_S = 24 * 3600
WEEK_S = 7 * DAY_S
MONTH_S = 30 * DAY_S
# Host memory no single machine has (the largest servers hold tens of TiB): 1 PiB
HOST_MEMORY_CEILING = 2**50
# Memory no accelerator has (an H200 holds 141 GB, a B200 192 GB): 1 TiB
DEVICE_MEMORY_CEILING = 2**40
# More hardware threads than any single machine has (2 sockets of a 192-core AMD EPYC
# 9965: 768)
CORES_CEILING = 4096
FLOAT32_BYTES = 4
# perflab.measure.sizes: the sampler keeps 48 bytes a sample (SAMPLER_BYTES_PER_SAMPLE)
SAMPLER_BYTES_PER_SAMPLE = 48
# perflab.measure.sizes: at most 4 DataLoader workers per usable core (MAX_WORKERS_PER_CORE)
WORKERS_PER_CORE = 4

# float32 elements (4 bytes each, the smallest sample element) that fill 1 PiB
ELEMENTS = HOST_MEMORY_CEILING // FLOAT32_BYTES
# a width whose square float32 matrix (a width x width Linear, a seq_len x seq_len block of
# attention scores) fills 1 TiB: 2**19
WIDTH = isqrt(DEVICE_MEMORY_CEILING // FLOAT32_BYTES)
# 64x the largest tokenizer vocabularies in wide use (~256k entries)
CLASSES = 2**24
# JPEG's largest image side
IMAGE_SIDE = 65535
# 10x ResNet-1001, the deepest network of the common benchmarks
DEPTH = 10_000
# Each step's time and phase times are kept in the trial's record (~60 bytes of JSON a
# step: ~60 MB a record at this bound) and the analysis reads every record of a sweep;
# 10**6 of the shortest PyTorch steps (~10 us of Python each) are already 10 s
STEPS = 10**6
# A round runs one trial of every variant, each seconds long (build, warm-up, timed
# block); preset=rigorous stops at 200 rounds
ROUNDS = 10_000


@dataclass(frozen=True)
class Maximum:
    """The largest value a field takes, and why no real run asks for more."""

    limit: int | float
    why: str
    # False: the limit itself is refused too (a confidence of 1 is an infinite interval)
    inclusive: bool = True

    def allows(self, value: int | float) -> bool:
        return value <= self.limit if self.inclusive else value < self.limit

    def allowed(self) -> str:
        limit = int(self.limit) if float(self.limit).is_integer() else self.limit
        return f"{'<=' if self.inclusive else '<'} {limit} ({self.why})"


# Every numeric field, by its path on the command line. Model sizes are listed once for
# every model that has them; a list field (a shape) bounds each of its sizes.
MAXIMA: dict[str, Maximum] = {
    # --- knobs ---
    "batch_size": Maximum(ELEMENTS, "1 PiB of 4-byte samples; the memory check refuses less"),
    "num_workers": Maximum(
        WORKERS_PER_CORE * CORES_CEILING, "4 per core on more cores than any machine has"
    ),
    "threads": Maximum(CORES_CEILING, "more hardware threads than any machine has"),
    "seed": Maximum(SEED_MAX, "2**64 - 1, the largest seed torch.manual_seed takes"),
    "lr": Maximum(1000, "far above any that trains: 1e-5 to 10"),
    # --- data ---
    "data.num_samples": Maximum(
        HOST_MEMORY_CEILING // SAMPLER_BYTES_PER_SAMPLE, "the sampler's 48 bytes each fill 1 PiB"
    ),
    # ~55 us a pass on a 3x32x32 sample (this project's 2-core machine, 2026-11-26): 1000
    # passes are 55 ms a sample, 1.8 s of loading per batch of 32, heavier than any real
    # decode-and-augment pipeline
    "data.augment_passes": Maximum(1000, "55 ms of work per 3x32x32 sample"),
    # --- trial ---
    "trial.warmup_steps": Maximum(STEPS, "each step's time is kept in the record"),
    "trial.min_steps": Maximum(STEPS, "each step's time is kept in the record"),
    "trial.max_steps": Maximum(STEPS, "each step's time is kept in the record"),
    "trial.warmup_s": Maximum(WEEK_S, "a week, trial.timeout_s's bound"),
    "trial.warmup_max_s": Maximum(WEEK_S, "a week, trial.timeout_s's bound"),
    "trial.min_s": Maximum(WEEK_S, "a week, trial.timeout_s's bound"),
    "trial.max_s": Maximum(WEEK_S, "a week, trial.timeout_s's bound"),
    # the trial process's own deadline is a signal.alarm, a C int of seconds: it
    # overflowed at 1e20
    "trial.timeout_s": Maximum(WEEK_S, "a week"),
    "trial.steady_tolerance": Maximum(1, "relative, e.g. 0.02", inclusive=False),
    # steps timed as one group on an accelerator: a longer window leaves a default timed
    # block (trial.max_s 10 s) with fewer than 10 samples
    "trial.min_event_window_us": Maximum(10**6, "one second"),
    "trial.telemetry_interval_ms": Maximum(60_000, "one reading a minute"),
    "trial.max_memory_mb": Maximum(
        HOST_MEMORY_CEILING // 2**20, "1 PiB, more than any machine has"
    ),
    # a cap on each trial's log, kept in the sweep directory
    "trial.max_log_mb": Maximum(2**20, "1 TiB, more than the disks that hold sweeps"),
    # --- schedule ---
    "schedule.min_rounds": Maximum(ROUNDS, "50x preset=rigorous's max_rounds"),
    "schedule.max_rounds": Maximum(ROUNDS, "50x preset=rigorous's max_rounds"),
    "schedule.trials_per_worker": Maximum(ROUNDS, "schedule.max_rounds's bound"),
    "schedule.target_half_width": Maximum(1, "+-100 %: any wider stops at min_rounds"),
    "schedule.time_budget_s": Maximum(MONTH_S, "30 days"),
    "schedule.confidence": Maximum(1, "a probability; 1 is an infinite interval", inclusive=False),
    "schedule.delta": Maximum(0.5, "a band of +-50 % or more holds every result", inclusive=False),
    # before every trial: an hour each would make a 30-round sweep of 2 variants wait 60
    # hours; NVML's readings settle within minutes. It raised OverflowError at 1e20
    "schedule.settle_s": Maximum(3600, "an hour before every trial"),
    "schedule.shuffle_seed": Maximum(SEED_MAX, "as seed: 2**64 - 1"),
    # --- scaleout ---
    "scaleout.max_parallel": Maximum(CORES_CEILING, "more groups than any machine has cores"),
    "scaleout.slurm.gpus_per_node": Maximum(256, "far above any node's GPUs (8 is usual)"),
    "scaleout.slurm.cpus_per_task": Maximum(CORES_CEILING, "more cores than any node has"),
    "scaleout.slurm.mem_gb": Maximum(HOST_MEMORY_CEILING // 2**30, "1 PiB, more than any node has"),
    "scaleout.slurm.timeout_min": Maximum(MONTH_S // 60, "30 days, as schedule.time_budget_s"),
    # --- profiling ---
    # steps the profiler skips or traces and discards before recording; the trial's own
    # first call and 3 unprofiled steps run before them
    "profiling.wait": Maximum(1000, "the profiled trial has warmed up already"),
    "profiling.warmup": Maximum(1000, "the profiled trial has warmed up already"),
    # every recorded step's events stay in memory until the trace is written: 1.38 GB
    # for 30 steps of the default convnet on CPU (shapes and memory on, 2026-11-26)
    "profiling.active": Maximum(50, "~47 MB of profiler events in memory per step"),
    # a compressed trace unpacks to several times its size, more than Perfetto's UI
    # opens in a browser tab
    "profiling.max_trace_mb": Maximum(2048, "2 GiB compressed"),
    # --- model sizes (each model has some of them) ---
    "model.in_features": Maximum(WIDTH, "a square fp32 weight this wide is 1 TiB"),
    "model.hidden": Maximum(WIDTH, "a square fp32 weight this wide is 1 TiB"),
    "model.width": Maximum(WIDTH, "a square fp32 weight this wide is 1 TiB"),
    "model.d_model": Maximum(WIDTH, "a square fp32 weight this wide is 1 TiB"),
    "model.heads": Maximum(WIDTH, "model.d_model's bound; heads divide it"),
    "model.seq_len": Maximum(WIDTH, "seq_len x seq_len fp32 attention scores are 1 TiB"),
    "model.depth": Maximum(DEPTH, "10x the deepest common networks"),
    "model.layers": Maximum(DEPTH, "10x the deepest common networks"),
    "model.blocks": Maximum(DEPTH, "10x the deepest common networks"),
    "model.image_size": Maximum(IMAGE_SIDE, "JPEG's largest image side"),
    # each stage halves the resolution: 16 halve the largest image to one pixel
    "model.stages": Maximum(16, "log2 of model.image_size's bound"),
    "model.vocab_size": Maximum(CLASSES, "64x the largest tokenizer vocabularies"),
    "model.num_classes": Maximum(CLASSES, "model.vocab_size's bound"),
    "model.num_labels": Maximum(CLASSES, "model.vocab_size's bound"),
    "model.step_us": Maximum(60_000_000, "a minute per step"),
    "model.input.shape": Maximum(ELEMENTS, "1 PiB of float32 elements"),
    "model.input.high": Maximum(CLASSES, "model.vocab_size's bound"),
    "model.input.mask_id": Maximum(CLASSES, "model.vocab_size's bound: an id in the vocabulary"),
    "model.target.num_classes": Maximum(CLASSES, "model.vocab_size's bound"),
    "model.target.shape": Maximum(ELEMENTS, "1 PiB of float32 elements"),
}


def check_maxima(cfg: Any, prefix: str = "") -> None:
    """Refuse the first numeric value above its field's bound. A node's own numbers come
    before its nested nodes': model.image_size=10**9 is named, not the
    model.input.shape derived from it."""
    nested = []
    for f in fields(cfg):
        value, path = getattr(cfg, f.name), f"{prefix}{f.name}"
        if is_dataclass(value):
            nested.append((value, f"{path}."))
        elif _numbers(value):
            _check(path, value)
    for node, node_prefix in nested:
        check_maxima(node, node_prefix)


def _numbers(value: Any) -> list[int | float]:
    """The numbers a field holds: itself, or a list's items (a shape). bool is no number
    here, and wrongly typed items are left to the rules that name them."""
    items = value if isinstance(value, list) else [value]
    return [v for v in items if type(v) in (int, float)]


def _check(path: str, value: Any) -> None:
    if path not in MAXIMA:  # a new numeric field: give it a bound, with its reason
        raise LookupError(f"{path}: no upper bound in perflab.config.bounds.MAXIMA")
    bound = MAXIMA[path]
    if not all(bound.allows(v) for v in _numbers(value)):
        allowed = bound.allowed()
        if isinstance(value, list):
            allowed = f"every size {allowed}"
        raise ConfigError(path, value, allowed, "too large")
