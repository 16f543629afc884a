"""The README's main command, as a user runs it, under settings compared back to back.

Each run is `perflab -m batch_size=32,64 amp=true,false` (plus a setting's overrides) in a
fresh directory; the settings alternate (A, B, A, B, ...) so that a drift of this shared
host over the hour falls on both. Per run: the wall time, the rounds, where the trials'
seconds went (summary.json's isolation.cost_s) and each interval's half-width.

    python benchmarks/main_command.py --pairs 2 \\
        --a "" --b "trial.keep_steady_window=false"
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# the console script found as the tests find it (tests/console_scripts.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from console_scripts import command  # noqa: E402

PERFLAB = command("perflab")
MAIN = ["-m", "batch_size=32,64", "amp=true,false"]


def run(overrides: list[str]) -> tuple[float, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        subprocess.run([*PERFLAB, *MAIN, *overrides], cwd=cwd, check=True, capture_output=True)
        wall = time.perf_counter() - start
        (summary,) = Path(cwd).glob("multirun/*/*/summary.json")
        return wall, json.loads(summary.read_text())


def describe(name: str, wall: float, summary: dict[str, Any]) -> str:
    costs = summary["isolation"]["cost_s"]
    trials = summary["isolation"]["trials"]
    per_trial = ", ".join(f"{k} {v / trials:.3f}" for k, v in costs.items())
    intervals = [
        f"{c['variant']}: {c['speedup']:.3f}x [{c['ci_low']:.3f}, {c['ci_high']:.3f}] "
        f"+-{c['half_width']:.1%} {c['verdict']}"
        for c in summary["comparisons"]
    ]
    s = summary["sentinel"]
    intervals.append(
        f"sentinel: {s['speedup']:.3f}x [{s['ci_low']:.3f}, {s['ci_high']:.3f}] "
        f"+-{s['half_width']:.1%} {s['verdict']}"
    )
    return (
        f"{name}: wall {wall:.1f} s, {summary['rounds']} rounds, {trials} trials; "
        f"per trial (s): {per_trial}\n    " + "\n    ".join(intervals)
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--a", default="", help="setting A's overrides, space-separated")
    parser.add_argument("--b", default="trial.keep_steady_window=false")
    args = parser.parse_args()
    settings = {"A": args.a.split(), "B": args.b.split()}
    print(f"A: {' '.join(settings['A']) or '(defaults)'}; B: {' '.join(settings['B'])}")
    for _ in range(args.pairs):
        for name, overrides in settings.items():
            print(describe(name, *run(overrides)), flush=True)


if __name__ == "__main__":
    main()
