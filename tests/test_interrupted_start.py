"""An interrupt (Ctrl-C, SIGTERM) that lands while a warm worker is starting: the worker
that never got its process closes without error, and the sweep takes the interrupt's
normal path (exit 130, partial summary and report, the resume line)."""

from __future__ import annotations

import contextlib
import json
import multiprocessing.context
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from processes import alive
from test_resilience import FAULTY, PERFLAB, left_in_group

from perflab.formats.sweepdir import EXPERIMENT_FILE
from perflab.process.isolation import Worker


def _interrupted_start(process: object) -> None:
    """What Process.start meets when Ctrl-C arrives while the fork server has not yet
    answered with the new process's pid (the server busy importing torch, say)."""
    raise KeyboardInterrupt


def test_a_worker_interrupted_while_starting_closes_without_error(monkeypatch):
    monkeypatch.setattr(
        multiprocessing.context.ForkServerProcess, "_Popen", staticmethod(_interrupted_start)
    )
    worker = Worker()
    with pytest.raises(KeyboardInterrupt):
        worker.call("builtins:len", [], timeout_s=60)
    assert not worker.running
    worker.close()  # what the sweep's own clean-up does next: no AssertionError
    worker.close(kill=True)


def test_closing_a_worker_whose_process_never_started_is_a_no_op(monkeypatch):
    worker = Worker()
    worker.close()
    # half-started: the process object exists, start() never returned
    monkeypatch.setattr(
        multiprocessing.context.ForkServerProcess, "_Popen", staticmethod(_interrupted_start)
    )
    with pytest.raises(KeyboardInterrupt):
        worker._start()
    worker.close(kill=True)
    assert not worker.running


def _fork_server_of(pid: int) -> int:
    """The parent of a trial process: the fork server that forked it."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.slow
def test_sigterm_while_the_fork_server_is_held_takes_the_interrupt_path(tmp_path):
    """The issue's reproduction: the fork server stopped (SIGSTOP) after the first trial
    began, so the next variant's worker waits for its pid when SIGTERM arrives."""
    sweep, started, hold = tmp_path / "sweep", tmp_path / "started.log", tmp_path / "hold"
    hold.touch()
    proc = subprocess.Popen(
        [*PERFLAB, "-m", *FAULTY, "schedule.min_rounds=3", "schedule.max_rounds=3"]
        + [f"+model.args.started_log={started}", f"+model.args.hold_while={hold}"]
        + ["+model.args.step_us=200,300", "+schedule.treatments={model.args.step_us:200}"]
        + [f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    server = 0
    try:
        deadline = time.monotonic() + 120
        while not started.exists() or not started.read_text().strip():
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        trial = int(started.read_text().split()[0])
        server = _fork_server_of(trial)
        os.kill(server, signal.SIGSTOP)  # "held": no new process until it continues
        hold.unlink()  # the first trial finishes; the next needs a new worker
        while not list(sweep.glob("*/trials/r000.json")):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        time.sleep(0.5)  # the sweep now waits for the held server to fork the next worker
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        os.kill(server, signal.SIGCONT)  # the first worker's exit status comes through it
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(ProcessLookupError):
            if server:
                os.kill(server, signal.SIGCONT)
    assert proc.returncode == 130, err
    assert "AssertionError" not in err
    assert "interrupted; finished trials and their records are kept" in err
    assert "resume with: perflab -m model=custom" in err and f"hydra.sweep.dir={sweep}" in err
    experiment = json.loads((sweep / EXPERIMENT_FILE).read_text())
    assert experiment["stop_reason"] == "interrupted"
    assert (sweep / "summary.json").exists()
    assert "**Incomplete**" in (sweep / "report.md").read_text()
    assert not left_in_group(proc.pid)
    assert not alive({trial, server}, wait_s=10)
