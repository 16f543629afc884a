"""Faults a hostile but realistic user causes, each injected into a real sweep (device=cpu,
the installed `perflab`, trials in their own processes): the launcher killed with -9 or
its SSH session dropped, two perflab on one directory, code edited between sessions, a
disk that fills mid-sweep, output piped into `head`, output directories perflab must not
write into, the sweep directory deleted while it runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import alive, descendants
from test_resilience import (
    BASE,
    PERFLAB,
    assert_interrupted_cleanly,
    interrupt_mid_trial,
    perflab,
    records,
)

from perflab.formats.sweepdir import CONSOLE_LOG, EXPERIMENT_FILE, LOCK_FILE

# trials of ~0.7 s: long enough to act while one runs
LONG = (
    *BASE,
    "trial.min_s=0.6",
    "schedule.min_rounds=3",
    "schedule.max_rounds=3",
    "+model.args.step_us=2000,2100",
    "+schedule.treatments={model.args.step_us:2000}",
)
# a 3-round sweep of ~0.1 s trials
QUICK = (
    *BASE,
    "trial.min_s=0",
    "schedule.min_rounds=3",
    "schedule.max_rounds=3",
    "+model.args.step_us=200,300",
    "+schedule.treatments={model.args.step_us:200}",
)


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*PERFLAB, "-m", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_for_trials(started: Path, count: int, proc: subprocess.Popen[str]) -> None:
    """Until ``count`` trial processes have reached their first step."""
    deadline = time.monotonic() + 120
    while not started.exists() or len(started.read_text().split()) < count:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.02)


# --- the launcher killed ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.heavy
def test_kill_9_of_the_launcher_takes_its_trial_along_and_the_run_resumes(tmp_path):
    sweep, started = tmp_path / "sweep", tmp_path / "started.log"
    args = (*LONG, f"+model.args.started_log={started}", f"hydra.sweep.dir={sweep}")
    proc = start(tmp_path, *args)
    wait_for_trials(started, 2, proc)
    helpers = descendants(proc.pid)  # fork server, resource tracker, the running trial
    kept = {p: p.stat().st_mtime_ns for p in sweep.glob("*/trials/r*.json")}
    proc.kill()
    proc.communicate()
    assert helpers and not alive(helpers, wait_s=5)
    time.sleep(2)  # longer than the trial had left: an orphan would have written by now
    assert {p: p.stat().st_mtime_ns for p in sweep.glob("*/trials/r*.json")} == kept

    # the killed run's lock is stale (the kernel dropped it with its holder): resumable
    again = perflab(tmp_path, *args)
    assert again.returncode == 0, again.stderr
    assert "ended without finishing; continuing its directory" in again.stdout
    full = {"r000.json": "ok", "r001.json": "ok", "r002.json": "ok"}
    assert records(sweep) == {j: full for j in ("0", "1", "sentinel")}
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())


def test_a_trial_process_ends_itself_after_its_deadline_when_its_parent_cannot():
    # the parent kills a hung trial at trial.timeout_s; the trial's own alarm is for a
    # parent that is gone or stuck (grace set to 0 here to keep the test short)
    code = (
        "import time, perflab.process.isolation as i; i.OWN_TIMEOUT_GRACE_S = 0; "
        "i._own_deadline(0.5); time.sleep(30)"
    )
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert done.returncode == -signal.SIGALRM and time.monotonic() - began < 20


@pytest.mark.slow
def test_sighup_to_the_terminal_s_processes_behaves_like_ctrl_c(tmp_path):
    sweep = tmp_path / "sweep"
    result, started, pgid = interrupt_mid_trial(tmp_path, sweep, True, signal.SIGHUP)
    # the terminal is gone, so what perflab said last is in the console's copy
    log = (sweep / CONSOLE_LOG).read_text()
    result.stderr += log
    assert_interrupted_cleanly(result, started, pgid, sweep)
    assert "resume with: perflab -m model=custom" in log


# --- two perflab, one directory ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.heavy
def test_a_second_perflab_on_a_live_sweep_directory_is_refused(tmp_path):
    sweep, started = tmp_path / "sweep", tmp_path / "started.log"
    # the first sweep's steps wait while `hold` exists: it is surely still running when
    # the second perflab arrives, however slow a loaded machine makes that
    hold = tmp_path / "hold"
    hold.touch()
    held = (f"+model.args.started_log={started}", f"+model.args.hold_while={hold}")
    first = start(tmp_path, *LONG, *held, f"hydra.sweep.dir={sweep}")
    wait_for_trials(started, 1, first)
    # another experiment (other sizes) and the same one are both refused while it runs
    for other in ("+model.args.step_us=2000,9000", "+model.args.step_us=2000,2100"):
        second = perflab(tmp_path, *LONG[:-2], other, LONG[-1], f"hydra.sweep.dir={sweep}")
        assert second.returncode == 2
        [line] = second.stderr.strip().splitlines()
        assert line.startswith(f"perflab: error: hydra.sweep.dir={sweep}: in use by perflab (pid ")
        assert f"pid {first.pid} " in line
    hold.unlink()
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    summary = json.loads((sweep / "summary.json").read_text())
    assert [v["label"] for v in summary["variants"]] == [
        "model.args.step_us=2000",
        "model.args.step_us=2100",
        "model.args.step_us=2000 (A/A copy)",
    ]
    assert (sweep / LOCK_FILE).read_text() == ""  # released: nobody holds it


# --- code edited between sessions -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.heavy
def test_editing_the_model_s_module_between_sessions_refuses_the_resume(tmp_path):
    source = Path(__file__).with_name("faulty.py").read_text()
    (tmp_path / "mymodel.py").write_text(source)
    args = [
        *(a.replace("tests.faulty.build", "mymodel.build") for a in QUICK),
        "schedule.sentinel=false",  # two variants are enough to resume
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    assert perflab(tmp_path, *args).returncode == 0
    again = perflab(tmp_path, *args)  # unchanged: the same experiment, nothing left to run
    assert again.returncode == 0 and "nothing left to run" in again.stdout
    (tmp_path / "mymodel.py").write_text(source + "\n# tuned\n")
    edited = perflab(tmp_path, *args)
    assert edited.returncode == 2
    [line] = edited.stderr.strip().splitlines()
    assert "holds a different experiment (code: the source of mymodel.build changed)" in line


# --- a full disk ------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 60 MB file system of its own (tmpfs), where the test can fill the disk."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=60m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Write one file until the disk has no space left."""
    filler = disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 2**20)
                f.flush()
        except OSError:
            pass
    return filler


@pytest.mark.slow
@pytest.mark.heavy
def test_a_disk_that_fills_mid_sweep_stops_like_an_interruption_and_resumes(tmp_path, small_disk):
    sweep, started = small_disk / "sweep", tmp_path / "started.log"
    args = (*LONG, f"+model.args.started_log={started}", f"hydra.sweep.dir={sweep}")
    proc = start(tmp_path, *args)
    wait_for_trials(started, 2, proc)  # the first trial's record is on disk
    filler = fill(small_disk)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 74, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("perflab: stopped: no space left on the disk")
    assert "finished trials kept in" in line and "resume with: perflab -m model=custom" in line
    # nothing half-written: every file whole (temporary files removed), no empty plot
    assert not list(sweep.rglob("*.tmp"))
    assert all(p.stat().st_size > 0 for p in sweep.rglob("*.png"))
    kept = {p: p.stat().st_mtime_ns for p in sweep.glob("*/trials/r*.json")}
    assert kept  # the finished trials are there, each readable
    records(sweep)

    filler.unlink()
    again = perflab(tmp_path, *args)
    assert again.returncode == 0, again.stderr
    full = {"r000.json": "ok", "r001.json": "ok", "r002.json": "ok"}
    assert records(sweep) == {j: full for j in ("0", "1", "sentinel")}
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())


# --- a closed stdout --------------------------------------------------------------------


@pytest.mark.slow
def test_piping_into_head_does_not_stop_the_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    command = " ".join(
        [*map(_quote, PERFLAB), "-m", *map(_quote, QUICK), f"hydra.sweep.dir={sweep}"]
    )
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command} | head -2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2
    assert "stdout was closed" in done.stderr
    assert json.loads((sweep / EXPERIMENT_FILE).read_text())["stop_reason"] == "max rounds"
    full = {"r000.json": "ok", "r001.json": "ok", "r002.json": "ok"}
    assert records(sweep) == {j: full for j in ("0", "1", "sentinel")}
    assert "report: " in (sweep / CONSOLE_LOG).read_text()


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


# --- where perflab must not write -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.heavy
def test_output_locations_perflab_must_not_write_into_are_refused(tmp_path):
    (tmp_path / "a-file").write_text("")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    root_before = sorted(os.listdir("/"))
    cases = {
        "/": "it is the root directory",
        "/proc": "/proc is a virtual file system of the kernel",
        "/proc/perflab": "/proc is a virtual file system of the kernel",
        str(tmp_path / "a-file"): "it is a file",
        str(foreign): "it is a non-empty directory that perflab did not write",
        "x" * 100_000: "a name in it is longer than 255 bytes",
    }
    for directory, why in cases.items():
        for mode, field in ((["-m"], "hydra.sweep.dir"), ([], "hydra.run.dir")):
            done = subprocess.run(
                [*PERFLAB, *mode, *QUICK[:-2], f"{field}={directory}"],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 2, (field, directory[:50], done.stderr[-500:])
            [line] = done.stderr.strip().splitlines()
            assert line.startswith(f"perflab: error: {field}=") and why in line, line
            assert len(line) < 600
    assert sorted(os.listdir("/")) == root_before
    assert os.listdir(foreign) == ["notes.txt"]


# --- the sweep directory deleted --------------------------------------------------------


@pytest.mark.slow
def test_a_sweep_directory_deleted_mid_run_stops_the_sweep(tmp_path):
    sweep, started = tmp_path / "sweep", tmp_path / "started.log"
    proc = start(tmp_path, *LONG, f"+model.args.started_log={started}", f"hydra.sweep.dir={sweep}")
    wait_for_trials(started, 2, proc)
    subprocess.run(["rm", "-rf", str(sweep)], check=True)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 74, err
    assert "was deleted while the sweep ran" in err.strip().splitlines()[-1]
    assert not sweep.exists()  # not recreated
