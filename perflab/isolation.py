"""Run a function in a fresh process forked from a server that has torch preloaded, or
in a warm worker from the same server that answers call after call (Worker).

A trial must not inherit another's compile caches, allocator state, autotune choices or
thread pools, so each runs in its own process. Spawning one costs ~1.2 s (it re-imports
torch) and plain fork deadlocks once the parent ran a multi-threaded op (libgomp is not
fork-safe); a fork server that imported torch, torch._dynamo and perflab once hands out
clean children in ~20 ms (docs/design.md#fresh-processes). Without torch._dynamo
preloaded, the first torch.optim call in a child costs ~1.1 s.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import math
import multiprocessing
import multiprocessing.connection
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.errors import ConfigError, DiskFull, no_space

PRELOAD = [
    # Every child runs the command's script again as __mp_main__ (multiprocessing.spawn.
    # prepare; Python 3.11's forkserver never preloads "__main__": it looks for a key
    # that get_preparation_data does not write). For the `perflab` console script that
    # means importing perflab.cli and Hydra: ~70 ms per child unless already imported.
    "perflab.cli",
    "torch",
    "torch._dynamo",
    "torch.optim",
    "hydra.utils",
    "perflab.measure.trial",
    "perflab.measure.profiled",
    # last: freezes what the imports above left alive (its docstring says why)
    "perflab.frozen_heap",
]


# A child ended by these was stopped by the user (Ctrl-C reaches the whole process group;
# SIGTERM is how schedulers and `kill` ask a job to stop; SIGHUP reaches the terminal's
# processes when an SSH session drops), not failed by its variant: run_isolated raises
# KeyboardInterrupt for it instead of reporting a failure.
INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# The child's own deadline lies this long after the parent's, so the parent, which kills
# and records a hung child itself, normally gets there first; the child's alarm is for a
# parent that can no longer do it.
OWN_TIMEOUT_GRACE_S = 10


@dataclass
class Outcome:
    # "ok": fn returned; "config_error": fn raised ConfigError; "error": fn raised something
    # else; "crashed": the process died without answering; "timeout": it was killed
    # ("interrupted" and "disk_full" never leave run_isolated: they raise
    # KeyboardInterrupt and DiskFull instead)
    kind: str
    value: Any = None
    message: str = ""
    exitcode: int | None = None


def _context() -> Any:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def start_fork_server() -> None:
    """Start the fork server now rather than on the first request: its import of torch
    (~3 s on a 2-core CPU) then runs beside this process's own start-up (Hydra's
    composition, the launcher's imports) instead of after it. Nothing changes for the
    children: the server's environment, working directory and sys.path are the ones it
    would have had (perflab sets none of them between start-up and the first trial)."""
    import atexit
    import multiprocessing.forkserver

    _context()
    multiprocessing.forkserver.ensure_running()
    atexit.register(_stop_fork_server)


def _stop_fork_server() -> None:
    """At exit, end the fork server at once instead of letting it notice on its own. It
    holds this command's stdout and stderr, and one still importing torch (a command that
    stopped at a config error a second after it began) would keep whoever reads them
    (`$(perflab ...)`, a test's subprocess.run) waiting seconds for their end. Its
    children, the trials, are gone by then."""
    import multiprocessing.forkserver

    # CPython's ForkServer keeps its server's pid here (no public accessor)
    pid = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def resolve_function(fn: Callable[[Any], Any] | str) -> Callable[[Any], Any]:
    """A function, or one named "module:function" (imported here, in the child)."""
    if not isinstance(fn, str):
        return fn
    module, _, name = fn.partition(":")
    return getattr(importlib.import_module(module), name)


def drop_if_empty(log: Path) -> bool:
    """Remove a log its process wrote nothing to (also one left by a process that was
    killed); True if it is gone."""
    with contextlib.suppress(OSError):
        if log.stat().st_size == 0:
            log.unlink()
    return not log.exists()


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or replaced stream: nothing to flush
            stream.flush()


@contextlib.contextmanager
def output_to(path: Path | None) -> Iterator[None]:
    """Send everything this process and its children write to stdout and stderr into
    ``path`` (truncated first) while the block runs; ``None`` leaves them alone.

    A trial process inherits the console from the fork server, so without this its
    noise lands between perflab's own lines: Inductor's autotune tables (~120 lines per
    max-autotune trial), the TF32 hint of every compiled trial, Python ``warnings``,
    ``print`` in a user's model, C++ warnings (``TORCH_WARN`` outside Python's reach)
    written straight to file descriptor 2. Redirecting the descriptors, not only
    ``sys.stdout``, catches all of them, and the trial's own child processes (DataLoader
    workers, say) inherit the file unless they choose their own output. A log left
    empty is removed, so a log on disk means the trial printed something.
    """
    if path is None:
        yield
        return
    created = not path.parent.exists()  # removed again if nothing was printed
    # one level (trials/, profile/): never recreate a deleted sweep directory
    path.parent.mkdir(exist_ok=True)
    _flush()
    # O_APPEND: every write lands at the end, whichever process of the trial makes it
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    saved = os.dup(1), os.dup(2)
    # a line-buffered stdout: a trial that crashes loses no line it printed
    stdout = sys.stdout if isinstance(sys.stdout, io.TextIOWrapper) else None
    block_buffered = stdout is not None and not stdout.line_buffering
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        if stdout is not None and block_buffered:
            stdout.reconfigure(line_buffering=True)
        yield
    finally:
        _flush()
        if stdout is not None and block_buffered:
            stdout.reconfigure(line_buffering=False)
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for kept in (*saved, fd):
            os.close(kept)
        if drop_if_empty(path) and created:
            with contextlib.suppress(OSError):  # fails, as it should, if anything else is there
                path.parent.rmdir()


def _die_with_parent(parent_pid: int) -> None:
    """End this process (SIGKILL) as soon as the process that asked for it is gone.

    A trial's parent is the fork server, and the fork server outlives the sweep process
    that started it for as long as any of its children runs (each holds its "alive"
    descriptor), so the kernel's parent-death signal never comes. Without this a trial
    of a sweep killed with -9 ran on, beside the trials of the resumed sweep, and wrote
    its record into a directory nobody measured any more. A thread waits on a pidfd of
    the sweep process (Linux 5.3+), or polls it where there is none."""
    watcher = threading.Thread(target=_watch, args=(parent_pid,), daemon=True)
    watcher.start()


# how often the fallback (no pidfd) looks whether the parent is still there, s
PARENT_POLL_S = 0.5


def _watch(parent_pid: int) -> None:
    try:
        fd = os.pidfd_open(parent_pid)
    except ProcessLookupError:
        os.kill(os.getpid(), signal.SIGKILL)  # gone already
    except (OSError, AttributeError):
        while _exists(parent_pid):
            time.sleep(PARENT_POLL_S)
    else:
        select.select([fd], [], [])  # readable once the process has exited
    os.kill(os.getpid(), signal.SIGKILL)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _own_deadline(timeout_s: float) -> None:
    """End this process by SIGALRM's default action (the kernel's, so a child stuck in C
    code with the GIL held dies too) some seconds after the parent's own deadline."""
    if 0 < timeout_s < float("inf") and hasattr(signal, "alarm"):
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(math.ceil(timeout_s) + OWN_TIMEOUT_GRACE_S)


def _child(
    fn: Callable[[Any], Any] | str,
    arg: Any,
    conn: multiprocessing.connection.Connection,
    log: Path | None = None,
    timeout_s: float = 0.0,
    parent_pid: int | None = None,
) -> None:
    if parent_pid is not None:
        _die_with_parent(parent_pid)
    _own_deadline(timeout_s)
    try:
        conn.send(_call(fn, arg, log))
    finally:
        conn.close()


def _call(fn: Callable[[Any], Any] | str, arg: Any, log: Path | None) -> Outcome:
    """``fn(arg)`` as an Outcome: whatever it raises is reported, never left to hang the
    parent that waits for the answer."""
    try:
        with output_to(log):
            return Outcome("ok", resolve_function(fn)(arg))
    except ConfigError as exc:
        return Outcome("config_error", message=str(exc))
    except KeyboardInterrupt:
        return Outcome("interrupted", message="interrupted")
    except OSError as exc:
        kind = "disk_full" if no_space(exc) else "error"
        return Outcome(kind, message=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    except BaseException as exc:  # noqa: BLE001 - report, never hang the parent
        return Outcome("error", message=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def run_isolated(
    fn: Callable[[Any], Any] | str, arg: Any, timeout_s: float, log: Path | None = None
) -> Outcome:
    """Call ``fn(arg)`` in a fresh child (``fn`` may be named "module:function", so
    that this process need not import it). Never raises for what happens in the child, with
    one exception: a child interrupted by SIGINT or SIGTERM raises KeyboardInterrupt here,
    as an interrupt of this process does. Either way the child is gone when this returns
    or raises: no orphan keeps running (or writing) after its parent gave up on it.
    ``log``: where the child's stdout and stderr go (see output_to); else the console."""
    ctx = _context()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_child, args=(fn, arg, send, log, timeout_s, os.getpid()), daemon=False
    )
    try:
        proc.start()
        send.close()  # the child holds the only writer now: EOF means it died
        outcome = _collect(recv, proc, timeout_s)
    except BaseException:  # Ctrl-C, SIGTERM (see outcome.sigterm_interrupts), bugs
        if proc.pid:
            proc.kill()
            proc.join()
        raise
    finally:
        send.close()
        recv.close()
        if log is not None:
            drop_if_empty(log)  # a child killed before it could
    return _raise_for(outcome)


def _raise_for(outcome: Outcome) -> Outcome:
    """The outcomes that are not the child's to report but this process's to act on."""
    if outcome.kind == "interrupted":
        raise KeyboardInterrupt
    if outcome.kind == "disk_full":  # the trial was fine; the disk was not
        raise DiskFull(f"no space left on the disk ({outcome.message.splitlines()[0]})")
    return outcome


def _collect(recv: multiprocessing.connection.Connection, proc: Any, timeout_s: float) -> Outcome:
    outcome = _answer(recv, proc, timeout_s)
    if outcome.kind in ("timeout", "crashed", "interrupted"):
        return outcome
    proc.join(timeout=30)
    if proc.is_alive():
        proc.kill()
        proc.join()
    outcome.exitcode = proc.exitcode
    return outcome


def _answer(recv: multiprocessing.connection.Connection, proc: Any, timeout_s: float) -> Outcome:
    """The child's answer within ``timeout_s``; a child that hung is killed, and one that
    died without answering is told apart: interrupted, ended by its own deadline, or
    crashed."""
    if not recv.poll(timeout_s):
        proc.kill()
        proc.join()
        return Outcome("timeout", message=f"no result after {timeout_s:g} s; killed")
    try:
        answer: Outcome = recv.recv()
        return answer
    except (EOFError, ConnectionResetError):
        proc.join()
        if proc.exitcode is not None and -proc.exitcode in INTERRUPT_SIGNALS:
            return Outcome("interrupted", exitcode=proc.exitcode)
        if proc.exitcode == -signal.SIGALRM:  # its own deadline (_own_deadline)
            return Outcome("timeout", message=f"no result after {timeout_s:g} s; ended itself")
        return Outcome(
            "crashed",
            message=f"trial process {describe_exit(proc.exitcode)}",
            exitcode=proc.exitcode,
        )


# --- warm workers -----------------------------------------------------------------------


class Worker:
    """A process from the same fork server that answers calls one at a time, keeping
    what they leave in its memory from one call to the next (schedule.isolation=worker:
    a variant's built workload, compiled graphs and warm caches;
    docs/design.md#warm-workers). It starts on its first call. A call that hangs,
    crashes or is interrupted ends the worker: the next call starts a fresh one. What
    happens in it never raises here, with run_isolated's two exceptions
    (KeyboardInterrupt, DiskFull)."""

    def __init__(self) -> None:
        self._proc: Any = None
        self._conn: multiprocessing.connection.Connection | None = None
        # calls answered by the current process
        self.calls = 0

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def _start(self) -> multiprocessing.connection.Connection:
        ctx = _context()
        ours, theirs = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(target=_serve, args=(theirs, os.getpid()), daemon=False)
        self._proc.start()
        theirs.close()  # the worker holds the only other end now: EOF means it died
        self._conn, self.calls = ours, 0
        return ours

    def call(self, fn: str, arg: Any, timeout_s: float, log: Path | None = None) -> Outcome:
        """``fn(arg)`` in the worker (started if it is not running); ``log`` as for
        run_isolated."""
        conn = self._conn if self.running and self._conn is not None else self._start()
        try:
            with contextlib.suppress(BrokenPipeError):  # died since: _answer says how
                conn.send((fn, arg, log, timeout_s))
            outcome = _answer(conn, self._proc, timeout_s)
        except BaseException:  # Ctrl-C, SIGTERM, bugs: no worker outlives its sweep
            self.close(kill=True)
            raise
        finally:
            if log is not None:
                drop_if_empty(log)
        self.calls += 1
        if outcome.kind in ("timeout", "crashed", "interrupted"):
            self.close(kill=True)
        return _raise_for(outcome)

    def close(self, kill: bool = False, grace_s: float = 5.0) -> None:
        """End the worker: asked to exit, killed if it does not within ``grace_s`` (or at
        once with ``kill``)."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None:
            return
        if conn is not None:
            if not kill:
                with contextlib.suppress(OSError):
                    conn.send(None)
            conn.close()
        proc.join(0 if kill else grace_s)
        if proc.is_alive():
            proc.kill()
            proc.join()


def _serve(conn: multiprocessing.connection.Connection, parent_pid: int) -> None:
    """A worker's loop: answer (fn, arg, log, timeout_s) calls until told to stop (None)
    or until its parent is gone. Each call gets its own deadline, as a fresh child would."""
    _die_with_parent(parent_pid)
    try:
        while True:
            try:
                request = conn.recv()
            except (EOFError, KeyboardInterrupt):  # parent gone; Ctrl-C while idle
                return
            if request is None:
                return
            fn, arg, log, timeout_s = request
            _own_deadline(timeout_s)
            outcome = _call(fn, arg, log)
            signal.alarm(0)
            conn.send(outcome)
            if outcome.kind == "interrupted":
                return
    finally:
        conn.close()
