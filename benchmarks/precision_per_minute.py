"""Precision per minute on the built-in convnet training step, A/A, on this machine.

Runs real `perflab -m` sweeps of one variant (the default convnet workload), so the only
comparison is the A/A sentinel, for a fixed number of rounds with different trial
lengths, and reports the sentinel's CI half-width times the square root of the minutes
the rounds took: the figure of merit for "how sure, how fast" (lower is better; halving
it means the same precision in a quarter of the time). The sentinel's verdict is shown
too: precision is worthless if A/A comes out FASTER or SLOWER.

    python benchmarks/precision_per_minute.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

# the console script found as the tests find it (tests/console_scripts.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from console_scripts import command  # noqa: E402

PERFLAB = command("perflab")
SETTINGS = {
    "default preset trials (>= 20 steps, >= 1 s)": (),
    "short trials (>= 5 steps, >= 0.3 s, warm-up 0.2 s)": (
        "trial.min_steps=5",
        "trial.min_s=0.3",
        "trial.warmup_steps=3",
        "trial.warmup_s=0.2",
    ),
    "shortest trials (>= 3 steps, warm-up 2 steps)": (
        "trial.min_steps=3",
        "trial.min_s=0",
        "trial.warmup_steps=2",
        "trial.warmup_s=0",
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as cwd:
        for name, overrides in SETTINGS.items():
            subprocess.run(
                [
                    *PERFLAB,
                    "-m",
                    "model=convnet",
                    *overrides,
                    f"schedule.min_rounds={rounds}",
                    f"schedule.max_rounds={rounds}",
                    "schedule.time_budget_s=3600",
                ],
                cwd=cwd,
                check=True,
                capture_output=True,
            )
            path = max(Path(cwd).glob("multirun/*/*/summary.json"), key=lambda p: p.stat().st_mtime)
            summary = json.loads(path.read_text())
            s = summary["sentinel"]
            minutes = summary["elapsed_s"] / 60
            print(
                f"{name}: {rounds} rounds in {minutes:.2f} min; A/A {s['speedup']:.3f}x "
                f"[{s['ci_low']:.3f}, {s['ci_high']:.3f}] {s['verdict']}; half-width "
                f"{s['half_width']:.1%}; half-width x sqrt(min) "
                f"{s['half_width'] * math.sqrt(minutes):.1%}; per-round sd "
                f"{s['sd_log_ratio']:.1%}"
            )


if __name__ == "__main__":
    main()
