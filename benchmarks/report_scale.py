"""Report generation at scale: 100 variants x 30 rounds of synthetic records.

Writes a sweep directory of seeded records (no torch, no timing), then times
`perflab.report.load` + `write_report` (analysis, tables, markdown, plots, CSVs) and reads
the process's peak RSS before and after.

    python benchmarks/report_scale.py [--variants 100] [--rounds 30] [--steps 40]
"""

from __future__ import annotations

import argparse
import random
import resource
import tempfile
import time
from pathlib import Path

from perflab.analysis.sweep import Experiment, ScheduleSettings
from perflab.config.plan import Job, build_plan
from perflab.formats.records import Samples, TrialRecord, write_json_atomic, write_record
from perflab.formats.sweepdir import EXPERIMENT_FILE
from perflab.formats.trial_parts import TrialMemory

SCHEDULE = {
    "metric": "latency",
    "confidence": 0.95,
    "delta": 0.01,
    "label": "",
    "min_rounds": 10,
    "max_rounds": 30,
    "target_half_width": 0.02,
    "time_budget_s": 240.0,
}


def make(root: Path, variants: int, rounds: int, steps: int) -> None:
    jobs = [
        Job(
            i,
            [f"model.width={i // 2}", f"amp={'off' if i % 2 == 0 else 'bf16'}"],
            {"model.width": i // 2, "amp": "off" if i % 2 == 0 else "bf16"},
        )
        for i in range(variants)
    ]
    plan = build_plan(jobs, {}, sentinel=True)
    rng = random.Random(0)
    for v in plan.variants:
        for r in range(rounds):
            ns = [int(1e6 * (1 + 0.02 * rng.gauss(0, 1))) for _ in range(steps)]
            write_record(
                root / v.dir / "trials" / f"r{r:03d}.json",
                TrialRecord(
                    status="ok",
                    config={},
                    settings={"batch_size": 8},
                    started_at="t",
                    finished_at="t",
                    round=r,
                    memory=TrialMemory(kind="process_rss", peak_bytes=2**20),
                    samples=Samples(1, ns, {"data": ns, "forward": ns}, [], 1, 0.04, "min_reached"),
                ),
            )
    write_json_atomic(
        root / EXPERIMENT_FILE,
        Experiment(plan, ScheduleSettings.from_dict(SCHEDULE), "max rounds", rounds, 1.0).to_dict(),
    )


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variants", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    from perflab.report import load, write_report

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make(root, args.variants, args.rounds, args.steps)
        before = peak_rss_mib()
        start = time.perf_counter()
        write_report(load(root))
        took = time.perf_counter() - start
        print(
            f"{args.variants} variants (+ sentinel) x {args.rounds} rounds x {args.steps} "
            f"steps: report in {took:.1f} s; peak RSS {before:.0f} MiB before, "
            f"{peak_rss_mib():.0f} MiB after"
        )


if __name__ == "__main__":
    main()
