"""What running a sweep's groups as submitit jobs costs beyond the trials themselves.

Runs a spin sweep split into three groups (batch_size=1,2,3) through submitit's local
executor, then, per group, splits the group's wall time (from submission to its result
in the launcher) into the time spent inside trial processes (started_at -> finished_at
of every record) and the rest: the job's process start, unpickling, importing perflab
and torch, the fork server's start, the scheduler between trials, the group's report,
and collecting the result. Bar: <= 5 s per group.

    python benchmarks/scaleout_overhead.py
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

# the console script found as the tests find it (tests/console_scripts.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from console_scripts import command  # noqa: E402

PERFLAB = command("perflab")
SWEEP = (
    "+experiment=spin_ratio",
    "model.step_us=200,300",
    "schedule.treatments={model.step_us:200}",
    "preset=quick",
    "schedule.min_rounds=5",
    "schedule.max_rounds=5",
    "trial.warmup_s=0",
    "trial.min_steps=50",
    "trial.min_s=0",
    "profile=false",
    "batch_size=1,2,3",
    "scaleout.group_by=[batch_size]",
)


def _seconds(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def trial_seconds(group_dir: Path) -> tuple[float, int]:
    total, count = 0.0, 0
    for path in group_dir.glob("*/trials/*.json"):
        record = json.loads(path.read_text())
        total += _seconds(record["started_at"], record["finished_at"])
        count += 1
    return total, count


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        result = subprocess.run(
            [*PERFLAB, "-m", *SWEEP], cwd=tmp, capture_output=True, text=True, check=False
        )
        wall = time.monotonic() - start
        if result.returncode != 0:
            sys.exit(result.stderr + result.stdout)
        [root] = Path(tmp, "multirun").glob("*/*")
        index = json.loads((root / "groups.json").read_text())
        rows, phases = [], []
        for group in index["groups"]:
            inside, trials = trial_seconds(root / "groups" / group["dir"])
            in_job = group["seconds"] + group["overhead_s"]  # submit -> result
            rows.append((group["key"], trials, inside, in_job, group["overhead_s"]))
            phases.append(group["phases_s"])
    print(f"sweep: 3 groups x (2 variants + sentinel) x 5 rounds; perflab wall {wall:.1f} s")
    print("group          trials  in trials  submit->result  job start+collect  beyond trials")
    for key, trials, inside, in_job, job_overhead in rows:
        print(
            f"{key:<14} {trials:>6}  {inside:>8.2f} s  {in_job:>12.2f} s  {job_overhead:>15.2f} s"
            f"  {in_job - inside:>11.2f} s"
        )
    for (key, *_), p in zip(rows, phases, strict=True):
        print(
            f"{key}: inside the job: experiment {p['experiment']:.2f} s (trials and the "
            f"fork server's start), report {p['report']:.2f} s"
        )
    beyond = [in_job - inside for _, _, inside, in_job, _ in rows]
    print(
        f"beyond the trials, per group: median {statistics.median(beyond):.2f} s, "
        f"max {max(beyond):.2f} s (bar 5 s)"
    )


if __name__ == "__main__":
    main()
