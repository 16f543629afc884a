"""Wall time of `perflab` with the default workload and preset, as a user runs it.

Each run is a new `perflab` process in a fresh directory, so it pays everything: Hydra
start-up, the fork server importing torch, the trial, the record and the summary.

    python benchmarks/default_run.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the console script found as the tests find it (tests/console_scripts.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from console_scripts import command  # noqa: E402

PERFLAB = command("perflab")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    walls = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as cwd:
            start = time.perf_counter()
            subprocess.run([*PERFLAB], cwd=cwd, check=True, capture_output=True)
            walls.append(time.perf_counter() - start)
    print(
        f"perflab (default workload and preset), {args.runs} runs: median "
        f"{statistics.median(walls):.1f} s, max {max(walls):.1f} s"
    )


if __name__ == "__main__":
    main()
