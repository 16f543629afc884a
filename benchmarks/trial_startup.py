"""How long until a fresh trial process is ready to build its workload.

Measures, with perflab's own isolation layer (fork server with torch preloaded):
  cold  - the first trial of a run: the fork server starts and imports torch once;
  ready - each later trial: from run_isolated() to the child running its trial code with
          torch, torch._dynamo and perflab.measure.trial already imported (the 0.5 s bar);
  round - a whole round trip (start, run a no-op, answer, exit);
  collect - the full garbage collection every trial runs before it measures, with the
          preloads frozen (perflab/process/frozen_heap.py) and with them thawed, as before;
and, for contrast, a `python -c "import torch"` in a new interpreter (what spawn pays).
CLOCK_MONOTONIC (perf_counter_ns) is shared by all processes on Linux, so the child's
entry time can be compared with the parent's start time.

    python benchmarks/trial_startup.py [--trials 20]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time


def child_entry(_: object) -> tuple[int, bool]:
    entered = time.perf_counter_ns()
    ready = all(m in sys.modules for m in ("torch", "torch._dynamo", "perflab.measure.trial"))
    return entered, ready


def child_collection(_: object) -> tuple[float, float, int]:
    """Seconds of a full collection in a fresh child as it starts (the preloads frozen),
    then with them thawed; and how many objects were frozen."""
    frozen = gc.get_freeze_count()
    start = time.perf_counter()
    gc.collect()
    as_started = time.perf_counter() - start
    gc.unfreeze()
    start = time.perf_counter()
    gc.collect()
    return as_started, time.perf_counter() - start, frozen


def main() -> None:
    from perflab.process.isolation import run_isolated

    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()

    start = time.perf_counter_ns()
    outcome = run_isolated(child_entry, None, timeout_s=120)
    cold_ms = (outcome.value[0] - start) / 1e6
    ready, rounds, preloaded = [], [], True
    for _ in range(args.trials):
        start = time.perf_counter_ns()
        outcome = run_isolated(child_entry, None, timeout_s=120)
        end = time.perf_counter_ns()
        entered, ok = outcome.value
        preloaded &= ok
        ready.append((entered - start) / 1e6)
        rounds.append((end - start) / 1e6)

    collections = [run_isolated(child_collection, None, timeout_s=120).value for _ in range(5)]
    frozen_s, thawed_s = (statistics.median(c[i] for c in collections) for i in (0, 1))

    start = time.perf_counter_ns()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    spawn_ms = (time.perf_counter_ns() - start) / 1e6

    print(f"cold (fork server start + first child): {cold_ms:.0f} ms")
    print(
        f"ready, later trials: median {statistics.median(ready):.1f} ms, "
        f"max {max(ready):.1f} ms over {args.trials}; torch preloaded: {preloaded}"
    )
    print(f"round trip (start, no-op, answer, exit): median {statistics.median(rounds):.1f} ms")
    print(
        f"full collection before a trial measures (median of 5 children): {frozen_s * 1e3:.1f} "
        f"ms with the preloads frozen ({collections[0][2]} objects), {thawed_s * 1e3:.0f} ms "
        "with them thawed"
    )
    print(f"new interpreter + import torch (spawn's cost): {spawn_ms:.0f} ms")


if __name__ == "__main__":
    main()
