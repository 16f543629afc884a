"""Did the H100 trials in tests/fixtures/h100 still ramp after a short warm-up?

Those sweeps ran on 2026-11-23 with a fixed warm-up (before the until-steady rule): 2
steps under preset=quick (20-80 ms on these steps) and 0.5 s or 3 s in the others. For
each trial this compares the median step of the first quarter of its timed block (its
first sample, in a 3-sample block) with the median of the whole block: a block still
ramping after its warm-up starts slow. It is the evidence there is, without a GPU, on
whether a GPU trial could warm up for 0.1 s instead of the default preset's 0.5 s
(benchmarks/gpu_speed.py: the per-trial bar of 0.15 s beyond the timed block).

    python benchmarks/h100_warmup_floor.py
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "h100"


def first_quarter_excess(step_ns: list[int]) -> float:
    """Median of the block's first quarter against the block's median, minus 1."""
    quarter = step_ns[: max(1, len(step_ns) // 4)]
    return statistics.median(quarter) / statistics.median(step_ns) - 1


def main() -> None:
    for run in sorted(p for p in FIXTURES.iterdir() if p.is_dir() and p.name != "traces"):
        by_variant: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for path in sorted(run.glob("*/trials/r*.json")):
            record = json.loads(path.read_text())
            samples = record.get("samples") or {}
            step_ns, warm = samples.get("step_ns") or [], samples.get("warmup_step_ns") or []
            if record.get("status") != "ok" or len(step_ns) < 3:
                continue
            config = record["config"]
            knobs = ", ".join(f"{k}={config.get(k)}" for k in ("amp", "compile"))
            label = f"{path.parent.parent.name} ({knobs})"
            by_variant[label].append((sum(warm) / 1e9, first_quarter_excess(step_ns)))
        for label, trials in sorted(by_variant.items()):
            excess = [e for _, e in trials]
            print(
                f"{run.name}/{label}: {len(trials)} trials, warm-up "
                f"{statistics.median(w for w, _ in trials):.3f} s; first quarter of the block "
                f"against its median: median {statistics.median(excess):+.1%}, range "
                f"{min(excess):+.1%} to {max(excess):+.1%}"
            )


if __name__ == "__main__":
    main()
