"""The best precision per minute any method could reach on this host: an A/A comparison
of the default CPU workload (convnet training step) measured in one process, with no
isolation and no overhead at all.

    python benchmarks/host_floor.py [--minutes 1] [--steps 3] [--repeats 2]

Two copies of the same workload, built alike, alternate in blocks of ``--steps`` steps
(the order in each pair of blocks drawn at random), for ``--minutes`` of measuring. A
block's figure is the median of its steps, as a perflab trial's is; each pair of blocks
gives one log-ratio, and the pairs go into the paired t interval perflab uses
(stats.paired_effect). Its half-width times sqrt(minutes) is the figure of merit of
benchmarks/precision_per_minute.py, here with nothing spent outside the timed steps:
no process start, no build, no first call, no warm-up, no record. It is a lower bound
only: one process hides what perflab's trials also sample (placement, physical pages,
heap layout from process to process), so a method that keeps that protection can only
do worse. If this bound is above a goal, no design of perflab reaches the goal here.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from dataclasses import dataclass

from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from perflab.analysis.stats import paired_effect
from perflab.config.compose import register_configs
from perflab.config.schema import PerflabConfig
from perflab.measure import knobs
from perflab.measure.resolve import resolve
from perflab.measure.steps import Prepared, Step, first_call, make_step, prepare
from perflab.measure.timing import make_timer


@dataclass
class Copy:
    """One of the two A/A copies: its workload and its step."""

    prep: Prepared
    step: Step


def _config(overrides: list[str]) -> PerflabConfig:
    register_configs()
    with initialize_config_module(config_module="perflab.conf", version_base=None):
        cfg = compose(config_name="perflab", overrides=["device=cpu", *overrides])
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


def _build(cfg: PerflabConfig) -> Copy:
    resolved = resolve(cfg)
    knobs.apply_seed(cfg.seed)
    prep = prepare(cfg, resolved)
    step = make_step(cfg, resolved, prep)
    first_call(step, prep, make_timer(resolved.device, capacity=2))
    return Copy(prep, step)


def _noop() -> None:
    pass


def block_median_s(copy: Copy, steps: int) -> float:
    """The median of ``steps`` consecutive steps, each timed by the host clock (the CPU
    path's timer: the step's work is done when it returns)."""
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        copy.step(copy.prep.workload.batches, _noop)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def warm(copy: Copy, seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        copy.step(copy.prep.workload.batches, _noop)


def measure(a: Copy, b: Copy, steps: int, minutes: float) -> tuple[list[float], float]:
    """Alternate the copies in blocks until ``minutes`` have passed: the per-pair
    log-ratios ln(a) - ln(b), and the minutes spent."""
    draw = random.Random()
    d: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < minutes * 60:
        first_a = draw.random() < 0.5
        if first_a:
            ta, tb = block_median_s(a, steps), block_median_s(b, steps)
        else:
            tb, ta = block_median_s(b, steps), block_median_s(a, steps)
        d.append(math.log(ta) - math.log(tb))
    return d, (time.perf_counter() - start) / 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--steps", type=int, nargs="+", default=[3], help="steps per block")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. batch_size=64")
    args = parser.parse_args()
    cfg = _config(args.overrides)
    knobs.apply_threads(cfg.threads)
    a, b = _build(cfg), _build(cfg)
    warm(a, 2.0)
    warm(b, 2.0)
    for _ in range(args.repeats):
        for steps in args.steps:
            d, minutes = measure(a, b, steps, args.minutes)
            effect = paired_effect(d)
            step_ms = 1e3 * statistics.median(
                block_median_s(c, 1) for c in (a, b) for _ in range(3)
            )
            print(
                f"blocks of {steps} steps, one process: {len(d)} pairs in {minutes:.2f} min "
                f"(step ~{step_ms:.0f} ms); A/A {effect.speedup:.3f}x "
                f"[{effect.low:.3f}, {effect.high:.3f}]; half-width "
                f"{100 * effect.half_width:.1f}%; half-width x sqrt(min) "
                f"{100 * effect.half_width * math.sqrt(minutes):.1f}%; per-pair sd "
                f"{100 * effect.sd_log:.1f}%",
                flush=True,
            )


if __name__ == "__main__":
    main()
