"""Why threads=1 is the default: step times with 1 and 2 intra-op threads, alone and
beside a busy co-tenant process (what a shared machine looks like).

Runs the real `perflab` command (default convnet workload, quick preset) four times and
prints the step-time percentiles of each.

    python benchmarks/threads_under_load.py
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

# the console script found as the tests find it (tests/console_scripts.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from console_scripts import command  # noqa: E402

PERFLAB = command("perflab")


def p50_p90(threads: int, cwd: str) -> str:
    out = subprocess.run(
        [*PERFLAB, "preset=quick", f"threads={threads}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    match = re.search(r"p50 (.+?)\s+p90 (.+?)\s+p99", out)
    return f"p50 {match.group(1)}, p90 {match.group(2)}" if match else out


def main() -> None:
    with tempfile.TemporaryDirectory() as cwd:
        for threads in (1, 2):
            print(f"alone,          threads={threads}: {p50_p90(threads, cwd)}")
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            for threads in (1, 2):
                print(f"with co-tenant, threads={threads}: {p50_p90(threads, cwd)}")
        finally:
            spinner.kill()


if __name__ == "__main__":
    main()
