"""The slurm tier: a grouped sweep through a real SLURM cluster, jobs cancelled with
scancel, and the resume (docs/slurm.md).

Runs where ``sinfo`` answers with an idle node; ``bash benchmarks/slurm/start_cluster.sh``
starts a single-node cluster on this machine. Skipped elsewhere, so the default suite
stays fast without SLURM; ``pytest -m slurm`` runs this tier alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from console_scripts import command

PERFLAB = command("perflab")
# seconds sinfo, squeue and scancel may take before the cluster counts as absent
SLURM_TIMEOUT_S = 10


def idle_node_cpus() -> int | None:
    """The CPUs of an idle SLURM node; None without one (no sinfo, no controller, busy)."""
    if shutil.which("sinfo") is None:
        return None
    try:
        # scontrol ping answers at once; sinfo waits ~10 s for a controller that is down
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, timeout=SLURM_TIMEOUT_S)
        if ping.returncode != 0:
            return None
        out = subprocess.run(
            ["sinfo", "--noheader", "--states=idle", "--format=%c"],
            capture_output=True,
            text=True,
            timeout=SLURM_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    cpus = [int(c) for c in out.stdout.split() if c.isdigit()] if out.returncode == 0 else []
    return max(cpus) if cpus else None


CPUS = idle_node_cpus()
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        CPUS is None,
        reason="needs a SLURM cluster whose sinfo shows an idle node: "
        "bash benchmarks/slurm/start_cluster.sh (docs/slurm.md)",
    ),
]

ROUNDS = 4
GROUPS = ("batch_size=1", "batch_size=2", "batch_size=3")
# tests/test_scaleout.py's FAST with a fourth round (time to cancel a group in the
# middle), and neither a precision nor a time budget that could stop a group before it:
# every group runs exactly ROUNDS rounds and stops at "max rounds"
SWEEP = (
    "+experiment=spin_ratio",
    "device=cpu",
    "model.step_us=200,300",
    "schedule.treatments={model.step_us:200}",
    "preset=quick",
    f"schedule.min_rounds={ROUNDS}",
    f"schedule.max_rounds={ROUNDS}",
    "schedule.time_budget_s=3600",
    "schedule.target_half_width=1e-9",
    "trial.warmup_s=0",
    "trial.min_steps=20",
    "trial.min_s=0",
    "profile=false",
    "batch_size=1,2,3",
    "scaleout.group_by=[batch_size]",
    "scaleout.executor=slurm",
    "scaleout.slurm.gpus_per_node=0",
    "scaleout.slurm.mem_gb=1",
    "scaleout.slurm.timeout_min=15",
)


def _slurm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=SLURM_TIMEOUT_S)


def _state(job_id: str) -> str:
    return _slurm("squeue", "--noheader", "--states=all", f"--jobs={job_id}", "--format=%T").stdout


def _wait_for(found: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"no {what} after {timeout_s:.0f} s")


def _command(root: Path, cpus: int) -> list[str]:
    return [
        *PERFLAB,
        "-m",
        *SWEEP,
        f"scaleout.slurm.cpus_per_task={cpus}",
        f"hydra.sweep.dir={root}",
    ]


def _submitted(log: Path) -> dict[str, str] | None:
    """Job id by group, from perflab's "group KEY: job ID submitted" lines, once every
    group's job is submitted."""
    jobs = dict(re.findall(r"group (\S+): job (\d+) submitted", log.read_text()))
    return jobs if len(jobs) == len(GROUPS) else None


def _records(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted((root / "groups").glob("*/*/trials/r*.json"))
    }


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def _first_run(root: Path, cwd: Path, cpus: int) -> tuple[int, str, dict[str, str]]:
    """Start the sweep; scancel group 3 while it waits for a CPU and group 1 while it
    measures (after its first trial); return perflab's exit code, output and job ids."""
    log = cwd / "first.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the job ids are read while it runs
    with log.open("w") as out:
        first = subprocess.Popen(
            _command(root, cpus), cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env
        )
    jobs: dict[str, str] = {}

    def alive() -> None:
        if first.poll() is not None:
            pytest.fail(f"perflab exited ({first.returncode}) too early:\n{log.read_text()}")

    try:
        jobs = _wait_for(lambda: alive() or _submitted(log), 120, "job id of every group")
        pending = _state(jobs["batch_size=3"])
        assert pending.strip() == "PENDING", (
            f"group batch_size=3 should wait for a CPU (2 groups of {cpus} CPUs fill a "
            f"{CPUS}-CPU node), squeue says {pending!r}"
        )
        _slurm("scancel", jobs["batch_size=3"]).check_returncode()
        group_1 = root / "groups" / "batch_size=1"
        _wait_for(
            lambda: alive() or list(group_1.glob("*/trials/r*.json")), 300, "trial of batch_size=1"
        )
        _slurm("scancel", jobs["batch_size=1"]).check_returncode()
        code = first.wait(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
        for job in jobs.values():  # nothing left queued or running if a check failed
            _slurm("scancel", job)
    return code, log.read_text(), jobs


def _check_interrupted(root: Path, code: int, output: str, jobs: dict[str, str]) -> None:
    """What docs/slurm.md promises after the two scancels."""
    assert code == 130, output  # interrupted (a cancelled running job) beats failed (1)
    assert "resume with: perflab -m " in output and f"hydra.sweep.dir={root}" in output
    assert f"job {jobs['batch_size=3']} ended (CANCELLED) without a result" in output
    index = {g["key"]: g for g in _json(root / "groups.json")["groups"]}
    assert [(k, index[k]["state"], index[k].get("stop_reason")) for k in GROUPS] == [
        ("batch_size=1", "done", "interrupted"),
        ("batch_size=2", "done", "max rounds"),
        ("batch_size=3", "failed", None),
    ]
    assert "CANCELLED" in index["batch_size=3"]["error"]
    groups = root / "groups"
    interrupted = _json(groups / "batch_size=1" / "experiment.json")
    assert interrupted["stop_reason"] == "interrupted"
    kept = list((groups / "batch_size=1").glob("*/trials/r*.json"))
    assert 0 < len(kept) < 3 * ROUNDS  # cancelled in the middle: some trials, not all
    assert "**Incomplete**" in (groups / "batch_size=1" / "report.md").read_text()
    assert len(list((groups / "batch_size=2").glob("*/trials/r*.json"))) == 3 * ROUNDS
    assert not (groups / "batch_size=3" / "experiment.json").exists()  # it never ran
    merged = (root / "report.md").read_text()
    assert "| interrupted |" in merged and "| failed |" in merged


def _check_complete(root: Path, before: dict[str, bytes]) -> None:
    """Every variant of every group has its ROUNDS trials, those of the first run
    unchanged, each the trial of its own group and variant; the merged report says so."""
    index = _json(root / "groups.json")["groups"]
    assert [(g["key"], g["state"], g["stop_reason"]) for g in index] == [
        (key, "done", "max rounds") for key in GROUPS
    ]
    after = _records(root)
    assert {k: after.get(k) for k in before} == before  # no trial lost or rewritten
    for key in GROUPS:
        group = root / "groups" / key
        experiment = _json(group / "experiment.json")
        batch_size = int(key.split("=")[1])
        for variant in experiment["plan"]["variants"]:
            trials = group / variant["dir"] / "trials"
            names = sorted(p.name for p in trials.glob("r*.json"))
            assert names == [f"r{r:03d}.json" for r in range(ROUNDS)], (key, variant["label"])
            for r, name in enumerate(names):
                record = _json(trials / name)
                assert (record["status"], record["round"]) == ("ok", r)
                # no trial of another group or variant mixed in
                assert record["config"]["batch_size"] == batch_size
                assert record["config"]["model"]["step_us"] == variant["treatment"]["model.step_us"]
        summary = _json(group / "summary.json")
        assert [v["trials"] for v in summary["variants"]] == [ROUNDS] * 3, key
        assert "**Incomplete**" not in (group / "report.md").read_text()
    resumed = _json(root / "groups" / "batch_size=1" / "experiment.json")["resumed"]
    kept = sum(1 for path in before if path.startswith("groups/batch_size=1/"))
    assert [s["trials_kept"] for s in resumed] == [kept]
    merged = _json(root / "summary.json")
    assert sorted(c["group"] for c in merged["comparisons"]) == list(GROUPS)
    assert {(c["variant"], c["baseline"]) for c in merged["comparisons"]} == {
        ("model.step_us=300", "model.step_us=200")
    }
    report = (root / "report.md").read_text()
    assert report.count("| max rounds |") == 3 and "| failed |" not in report


def test_scancel_then_resume_completes_every_group(tmp_path):
    assert CPUS is not None
    root = tmp_path / "sweep"
    # two groups' jobs fill the node together, so the third waits in the queue
    cpus = max(1, CPUS // 2)
    code, output, jobs = _first_run(root, tmp_path, cpus)
    _check_interrupted(root, code, output, jobs)
    before = _records(root)
    # the command perflab printed: the same one, into the same directory
    again = subprocess.run(
        _command(root, cpus), cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    assert again.returncode == 0, again.stdout + again.stderr
    _check_complete(root, before)
