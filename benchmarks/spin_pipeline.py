"""Ground truth through the whole pipeline: real `perflab -m` sweeps of the spin workload.

Spin steps busy-wait a set number of microseconds, so the true speedup between two
variants is the ratio of their step_us (plus a constant few-us step overhead, which
biases ratios towards 1 by at most ~0.1 % at these lengths). The base is 10710 us so
that every ratio is exact in whole microseconds: 10710/10500 = 1.02, /10200 = 1.05,
/8568 = 1.25, /5355 = 2.0.

1. A/A: repeated sweeps of one variant; each one's A/A sentinel is a real A/A
   comparison. Reports false FASTER/SLOWER verdicts with a Clopper-Pearson bound.
2. Known ratios: one sweep with all ratios; reports estimate, CI, verdict and bias.
3. Scheduler overhead: the gap between one trial's end and the next one's start,
   from the records' timestamps.

    python benchmarks/spin_pipeline.py [--aa 20]

Note: with a single step_us value the sweep has no treatment swept, so the declared
treatment is inert and the A/A sentinel is the only comparison.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from perflab.simulation import clopper_pearson

PERFLAB = str(Path(sys.executable).parent / "perflab")
BASE_US = 10710
RATIOS = {10710: 1.0, 10500: 1.02, 10200: 1.05, 8568: 1.25, 5355: 2.0}
TRIAL = (
    "model=spin",
    "data=memory",
    "mode=infer",
    f"+schedule.treatments={{model.step_us:{BASE_US}}}",
    "trial.warmup_steps=3",
    "trial.warmup_s=0",
    "trial.min_steps=20",
    "trial.min_s=0",
    "schedule.min_rounds=10",
    "schedule.max_rounds=10",
)


def sweep(cwd: Path, *overrides: str) -> dict:
    subprocess.run(
        [PERFLAB, "-m", *TRIAL, *overrides], cwd=cwd, check=True, capture_output=True, text=True
    )
    newest = max(cwd.glob("multirun/*/*/summary.json"), key=lambda p: p.stat().st_mtime)
    return {"summary": json.loads(newest.read_text()), "dir": newest.parent}


def aa(cwd: Path, runs: int) -> None:
    verdicts = []
    for _ in range(runs):
        s = sweep(cwd, f"model.step_us={BASE_US}")["summary"]["sentinel"]
        verdicts.append(s["verdict"])
    false = sum(v in ("FASTER", "SLOWER") for v in verdicts)
    low, high = clopper_pearson(false, runs)
    print(
        f"A/A (sentinel of {runs} sweeps, 10 rounds each): {false}/{runs} FASTER/SLOWER "
        f"[Clopper-Pearson 95 %: {low:.1%}, {high:.1%}]; verdicts: "
        + ", ".join(f"{v} {verdicts.count(v)}" for v in sorted(set(verdicts)))
    )


def ratios(cwd: Path) -> Path:
    result = sweep(cwd, "model.step_us=" + ",".join(map(str, RATIOS)))
    for c in result["summary"]["comparisons"]:
        true = RATIOS[int(c["variant"].split("=")[1])]
        bias = c["speedup"] / true - 1
        print(
            f"true {true:.2f}: estimate {c['speedup']:.4f} [{c['ci_low']:.4f}, "
            f"{c['ci_high']:.4f}] {c['verdict']}, bias {bias:+.3%}, covered: "
            f"{c['ci_low'] <= true <= c['ci_high']}"
        )
    return result["dir"]


def gaps(sweep_dir: Path) -> None:
    spans = []
    for path in sweep_dir.glob("*/trials/r*.json"):
        record = json.loads(path.read_text())
        spans.append(
            (
                datetime.fromisoformat(record["started_at"]),
                datetime.fromisoformat(record["finished_at"]),
            )
        )
    spans.sort()
    between = [(b[0] - a[1]).total_seconds() for a, b in zip(spans, spans[1:], strict=False)]
    print(
        f"scheduler overhead between trials ({len(between)} gaps): median "
        f"{statistics.median(between) * 1000:.0f} ms, max {max(between) * 1000:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--aa", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        sweep_dir = ratios(cwd)
        gaps(sweep_dir)
        aa(cwd, args.aa)


if __name__ == "__main__":
    main()
