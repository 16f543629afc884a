"""What a trial's code does outside its own process must not outlive the trial or break
it: child processes it starts end with it (its process group), an os.chdir in it moves
none of perflab's files, and the files perflab writes get the mode open() gives."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from processes import alive
from test_resilience import BASE, perflab

from perflab.formats.atomic import write_text_whole
from perflab.formats.records import write_json_atomic
from perflab.formats.sweepdir import CONSOLE_LOG
from perflab.process.isolation import Worker, run_isolated


def sleeps_started(log: Path) -> set[int]:
    return {int(pid) for pid in log.read_text().split()}


def test_a_fresh_trial_s_child_process_ends_with_it(tmp_path):
    log = tmp_path / "children"
    outcome = run_isolated("unbounded:starts_sleep", str(log), timeout_s=60)
    assert outcome.kind == "ok"
    assert not alive(sleeps_started(log), wait_s=5)


def test_a_killed_trial_s_child_process_ends_with_it(tmp_path):
    log = tmp_path / "children"
    outcome = run_isolated("unbounded:starts_sleep_and_hangs", str(log), timeout_s=1)
    assert outcome.kind == "timeout"
    assert not alive(sleeps_started(log), wait_s=5)


def test_a_worker_s_child_processes_end_with_the_worker(tmp_path):
    log = tmp_path / "children"
    worker = Worker()
    try:
        assert worker.call("unbounded:starts_sleep", str(log), timeout_s=60).kind == "ok"
        assert alive(sleeps_started(log), wait_s=0)  # the worker lives on, and so may they
    finally:
        worker.close()
    assert not alive(sleeps_started(log), wait_s=5)


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_written_files_get_the_mode_open_gives(tmp_path, umask):
    previous = os.umask(umask)
    try:
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
        write_text_whole(tmp_path / "whole.txt", "x")
        write_json_atomic(tmp_path / "record.json", {"x": 1})
    finally:
        os.umask(previous)
    mode = stat.S_IMODE(plain.stat().st_mode)
    assert mode == 0o666 & ~umask
    for name in ("whole.txt", "record.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name


UNBOUNDED = tuple(a.replace("tests.faulty.build", "tests.unbounded.build") for a in BASE)


@pytest.mark.slow
def test_a_model_that_changes_directory_and_starts_a_process_leaves_the_sweep_whole(tmp_path):
    elsewhere, children = tmp_path / "elsewhere", tmp_path / "children"
    elsewhere.mkdir()
    result = perflab(
        tmp_path,
        *UNBOUNDED,
        "trial.min_s=0",
        "trial.steady_tolerance=0",
        "schedule.min_rounds=3",
        "schedule.max_rounds=3",
        f"+model.args.chdir={elsewhere}",
        f"+model.args.child_log={children}",
        "+model.args.step_us=200,300",
        "+schedule.treatments={model.args.step_us:200}",
        "hydra.sweep.dir=sweep",  # relative, as the default multirun/... is
    )
    assert result.returncode == 0, result.stderr
    sweep = tmp_path / "sweep"
    statuses = {
        p.relative_to(sweep).as_posix(): json.loads(p.read_text())["status"]
        for p in sweep.glob("*/trials/r*.json")
    }
    assert statuses == {
        f"{j}/trials/r{r:03d}.json": "ok" for j in ("0", "1", "sentinel") for r in range(3)
    }
    assert not list(elsewhere.iterdir())  # nothing written where the model went
    assert len(sleeps_started(children)) >= 3  # one per worker at least
    assert not alive(sleeps_started(children), wait_s=5)
    # results are as readable as the console log beside them
    console = stat.S_IMODE((sweep / CONSOLE_LOG).stat().st_mode)
    for name in ("summary.json", "report.md", "0/trials/r000.json"):
        assert stat.S_IMODE((sweep / name).stat().st_mode) == console, name
