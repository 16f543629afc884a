"""``perflab.run``: the experiment of ``perflab -m ...``, from Python.

It runs the command itself, ``perflab -m OVERRIDES``, in a child process:
the same launcher, isolation, interleaved rounds, A/A sentinel, profiles and report as
on the command line, and nothing of the caller's state (a notebook's imports, its CUDA
context, its threads) leaks into the trials. The caller reads the sweep's summary.json
when the child ends.

Progress lines go to ``sys.stdout`` as they come, so a notebook cell shows them. Ctrl-C
(a notebook's "interrupt the kernel") is passed on to the child as one SIGINT: the
child stops the way the command does (the running trial killed, finished trials kept,
the partial summary and report written), then KeyboardInterrupt reaches the caller;
``run(..., sweep_dir=SAME)`` resumes it.
"""

from __future__ import annotations

import datetime
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from perflab.api.overrides import as_overrides
from perflab.api.result import ExperimentError, Result, load_result

EXIT_INTERRUPTED = 130
# the perflab command, as this Python runs it. Not ``-m perflab.cli``: every process the
# fork server starts would run that module again as its main (and warn that it is
# imported already); a ``-c`` main is not re-run
PERFLAB = [
    sys.executable,
    "-c",
    "import sys; sys.argv[0] = 'perflab'; from perflab.cli import main; main()",
]
# how long a child asked to stop may take to write its partial summary before it is
# killed (a trial is killed at once; the summary and report take seconds)
STOP_GRACE_S = 60.0


def run(
    *overrides: str,
    sweep_dir: str | Path | None = None,
    timeout_s: float | None = None,
    quiet: bool = False,
    **fields: Any,
) -> Result:
    """Run an experiment as ``perflab -m OVERRIDES`` does and return its summary.

    ``overrides``: as on the command line (``"amp=off,bf16"``). Keyword arguments are
    fields too: ``batch_size=[32, 64]`` sweeps, ``preset="quick"``,
    ``experiment="amp"`` (a ready-made study), ``schedule__max_rounds=6`` (``__`` for
    a dot), ``step=my_step`` (a function: by its import name, or shipped by value when
    it is defined in the calling script or notebook). ``sweep_dir``: where the sweep
    goes (default ``multirun/DATE/TIME`` under the working directory, as the command's);
    an interrupted sweep resumes when run again with the same one. ``timeout_s``: stop
    the experiment cleanly after this many seconds and return what it measured.
    ``quiet``: print nothing.

    Raises ExperimentError for bad input (before anything is measured) and
    KeyboardInterrupt after a Ctrl-C, once the partial results are written."""
    argv = as_overrides(overrides, fields)
    where = Path(sweep_dir) if sweep_dir is not None else _default_sweep_dir()
    command = [*PERFLAB, "-m", *argv, f"hydra.sweep.dir={where}"]
    returncode, interrupted, last_error = _run_child(command, timeout_s, quiet)
    if interrupted == "user":
        raise KeyboardInterrupt(
            f"perflab: interrupted; the partial results are in {where}; "
            f"run again with sweep_dir={str(where)!r} to resume"
        )
    if returncode not in (0, 1) and not (returncode == EXIT_INTERRUPTED and interrupted):
        raise ExperimentError(
            last_error or f"perflab ended with exit code {returncode}", returncode
        )
    return load_result(where, returncode)


def _default_sweep_dir() -> Path:
    """conf/perflab.yaml's hydra.sweep.dir, filled in here so the caller knows it."""
    now = datetime.datetime.now()
    return Path("multirun") / now.strftime("%Y-%m-%d") / now.strftime("%H-%M-%S-%f")


def _run_child(
    command: list[str], timeout_s: float | None, quiet: bool
) -> tuple[int, str | None, str]:
    """Run the command, echoing its output; return its exit code, who stopped it
    ("user": Ctrl-C here, "timeout", or None) and its last "perflab: error:" line."""
    # its own session: a terminal's Ctrl-C reaches this process only, which passes it
    # on once (twice would cut the child's clean stop short)
    child = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
        start_new_session=True,
    )
    errors: list[str] = []
    pumps = [
        _pump(child.stdout, sys.stdout, quiet, []),
        _pump(child.stderr, sys.stderr, quiet, errors),
    ]
    stopped_by = _wait(child, timeout_s)
    for pump in pumps:
        pump.join()
    last = next((e for e in reversed(errors) if e.startswith("perflab: error:")), "")
    return child.returncode, stopped_by, last.removeprefix("perflab: error: ").strip()


def _pump(source: IO[str] | None, sink: IO[str], quiet: bool, kept: list[str]) -> threading.Thread:
    """Copy the child's lines to ``sink`` as they come (a notebook shows sys.stdout),
    keeping them in ``kept``."""

    def copy() -> None:
        assert source is not None
        for line in source:
            kept.append(line.rstrip("\n"))
            if not quiet:
                sink.write(line)
                sink.flush()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread


def _wait(child: subprocess.Popen[str], timeout_s: float | None) -> str | None:
    """Wait for the child; on Ctrl-C or at the deadline ask it to stop (SIGINT, as the
    command's Ctrl-C) and wait for its clean stop. Returns who stopped it."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while child.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                _stop(child)
                return "timeout"
            time.sleep(0.1)
    except KeyboardInterrupt:
        _stop(child)
        return "user"
    return None


def _stop(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGINT)
    try:
        child.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    except KeyboardInterrupt:  # a second Ctrl-C: no clean stop wanted
        child.kill()
        child.wait()
