"""Timing overhead per step on the CPU path: what perflab's marks and bounds add to a step.

Runs perflab's own timed loop (trial.run_block with a HostTimer, 5 phase marks per train
step, one clock reading per step for the time bound) over a step that only fetches its
batch, and a bare Python loop that only fetches the batch; the difference per step is
everything perflab adds. Also reports perf_counter_ns's own cost, and the overhead as a
share of a 1 ms step.

    python benchmarks/timer_overhead.py [--steps 200000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from perflab.analysis.steady import Bounds
from perflab.measure.steps import TRAIN_PHASES, run_block
from perflab.measure.timing import HostTimer


def empty_train_step(source: Iterator[Any], mark: Callable[[], None]) -> None:
    next(source)
    for _ in TRAIN_PHASES:
        mark()


def bare_loop_ns_per_step(steps: int) -> float:
    source = iter(range(steps + 1))
    start = time.perf_counter_ns()
    for _ in range(steps):
        next(source)
    return (time.perf_counter_ns() - start) / steps


def perflab_loop_ns_per_step(timer: Any, steps: int) -> float:
    source = iter(range(steps + 1))
    start = time.perf_counter_ns()
    run_block(empty_train_step, source, timer, Bounds(steps, steps, 0.0, 1e9))
    return (time.perf_counter_ns() - start) / steps


def clock_cost_ns(calls: int = 1_000_000) -> float:
    clock = time.perf_counter_ns
    start = clock()
    for _ in range(calls):
        clock()
    return (clock() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    timed, bare = [], []
    for _ in range(args.repeats):
        timer = HostTimer()
        timed.append(perflab_loop_ns_per_step(timer, args.steps))
        timer.collect()
        bare.append(bare_loop_ns_per_step(args.steps))
    overhead = statistics.median(timed) - statistics.median(bare)
    print(f"perf_counter_ns call:                 {clock_cost_ns():.1f} ns")
    print(f"perflab timed loop (median):          {statistics.median(timed):.1f} ns/step")
    print(f"bare loop, same batches (median):     {statistics.median(bare):.1f} ns/step")
    print(
        f"timing overhead ({len(TRAIN_PHASES)} marks + bound check): {overhead:.1f} ns/step "
        f"= {overhead / 1e6 * 100:.4f} % of a 1 ms step"
    )


if __name__ == "__main__":
    main()
