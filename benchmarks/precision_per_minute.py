"""Precision per minute on the built-in convnet training step, A/A, on this machine.

Runs real `perflab -m` sweeps of one variant (the default convnet workload), so the only
comparison is the A/A sentinel, for a fixed number of rounds with different trial
lengths, and reports the sentinel's CI half-width times the square root of the minutes
the rounds took: the figure of merit for "how sure, how fast" (lower is better; halving
it means the same precision in a quarter of the time). The sentinel's verdict is shown
too: precision is worthless if A/A comes out FASTER or SLOWER.

    python benchmarks/precision_per_minute.py [--rounds 24] [--only TEXT]
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
# The shortest trials: 3 timed steps after a warm-up of at least 2 steps and 0.1 s, then
# until steady (preset=quick's; the default preset's warm-up lasts at least 0.5 s)...
SHORTEST = ("trial.min_steps=3", "trial.min_s=0.2", "trial.warmup_steps=2", "trial.warmup_s=0.1")
SETTINGS = {
    "default preset trials (>= 20 steps, >= 1 s), fresh process per trial": (
        "trial.min_steps=20",
        "trial.min_s=1.0",
        "trial.warmup_steps=5",
        "trial.warmup_s=0.5",
        "schedule.isolation=process",
    ),
    # ...in a fresh process per trial, and in warm workers serving 2 and 4 rounds each
    "shortest trials, fresh process per trial": (*SHORTEST, "schedule.isolation=process"),
    "shortest trials, warm workers x2": (
        *SHORTEST,
        "schedule.isolation=worker",
        "schedule.trials_per_worker=2",
    ),
    # the same with the warm-up's steady window thrown away, as before 2026-11-24
    "shortest trials, warm workers x2, steady window dropped": (
        *SHORTEST,
        "schedule.isolation=worker",
        "schedule.trials_per_worker=2",
        "trial.keep_steady_window=false",
    ),
    "shortest trials, warm workers x4": (
        *SHORTEST,
        "schedule.isolation=worker",
        "schedule.trials_per_worker=4",
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--only", default="", help="run the settings whose name has this")
    args = parser.parse_args()
    rounds = args.rounds
    with tempfile.TemporaryDirectory() as cwd:
        for name, overrides in SETTINGS.items():
            if args.only not in name:
                continue
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
                f"{s['sd_log_ratio']:.1%}; {s.get('units', s['rounds'])} units"
            )


if __name__ == "__main__":
    main()
