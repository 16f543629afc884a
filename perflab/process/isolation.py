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
import re
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
    "perflab.measure.profiling_pass",
    # last: freezes what the imports above left alive (its docstring says why)
    "perflab.process.frozen_heap",
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


# PRELOAD and what start_fork_server added for this command
_preload = list(PRELOAD)


# conf/model/hf.yaml's and the hf_* experiments' model.arch
DEFAULT_HF_ARCH = "gpt2"


def _context() -> Any:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_preload)
    return ctx


def hf_preload(argv: list[str]) -> tuple[str, ...]:
    """What the fork server imports beside torch when the command line asks for a Hugging
    Face model: transformers and the modelling module of each architecture named, ~1.4 s
    a worker process would otherwise spend importing them itself (GPT-2 on this project's
    2-core CPU). Read from the overrides because the server starts before Hydra composes;
    a wrong guess costs only the server's time (names that do not import are skipped by
    multiprocessing's preload)."""
    if not any(re.fullmatch(r"\+?(model=hf|experiment=hf_\w+)", arg) for arg in argv):
        return ()
    arches = [DEFAULT_HF_ARCH]
    for arg in argv:
        if arg.startswith("model.arch="):
            arches = [a.strip() for a in arg.split("=", 1)[1].split(",")]
    modules = [f"transformers.models.{a}.modeling_{a}" for a in arches if a.isidentifier()]
    return ("transformers", *modules)


def start_fork_server(extra_preload: tuple[str, ...] = ()) -> None:
    """Start the fork server now rather than on the first request: its import of torch
    (~3 s on a 2-core CPU) then runs beside this process's own start-up (Hydra's
    composition, the launcher's imports) instead of after it. Nothing changes for the
    children: the server's environment, working directory and sys.path are the ones it
    would have had (perflab sets none of them between start-up and the first trial)."""
    import atexit
    import multiprocessing.forkserver

    global _preload
    _preload = [*PRELOAD[:-1], *extra_preload, PRELOAD[-1]]  # the frozen heap stays last
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
        _kill_own_group()  # gone already
    except (OSError, AttributeError):
        while _exists(parent_pid):
            time.sleep(PARENT_POLL_S)
    else:
        select.select([fd], [], [])  # readable once the process has exited
    _kill_own_group()


# --- a trial's own process group ----------------------------------------------------------
#
# What a trial's code starts (a `sleep 60` from subprocess, a helper server, compile
# workers) used to outlive the trial and the sweep: the trial process was killed or
# exited, and its children were handed to init. Each trial process (and warm worker) now
# leads a process group of its own, which everything it starts joins unless it leaves on
# purpose (setsid); whoever ends the process ends the group. A group, not
# PR_SET_CHILD_SUBREAPER: a subreaper only adopts orphans while it lives, and a trial
# killed with SIGKILL (by its deadline, a memory cap, the sweep) cannot clean up after
# itself, while its parent can still kill the group by its id. Only the sweep process's
# Ctrl-C changes: the terminal no longer signals the trial directly, the sweep process
# kills it (and its group) as it already did on any interrupt.


def _lead_own_group() -> None:
    """Make this process the leader of a new process group (its id is this pid)."""
    with contextlib.suppress(OSError):  # already a group or session leader: keep that one
        os.setpgid(0, 0)
    # Outside the terminal's foreground group now: under `stty tostop` a write to the
    # terminal (a child run without a log) would stop it with SIGTTOU; ignored, the
    # write goes through as before
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)


def _kill_own_group() -> None:
    """SIGKILL this process's group, itself included (or itself alone if it leads none)."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def end_group(pid: int | None) -> None:
    """SIGKILL what is left of the process group a child led (its descendants), once the
    child itself has ended or is being killed. A group id stays reserved while any
    member lives, so the id cannot name someone else's group meanwhile; a group with no
    member left (or a child that never made one) is ESRCH, ignored."""
    if pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _kill(proc: Any) -> None:
    """SIGKILL a child and its group, and wait for the child."""
    end_group(proc.pid)
    proc.kill()
    proc.join()


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
    _lead_own_group()  # before the user's code can start anything
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


# --- what a trial's processes may use -------------------------------------------------
#
# A model that leaks 4 MiB a step reached 6 GiB in 22 s, long before trial.timeout_s, and
# one that prints 200 kB a step filled a 60 MB disk in a second. The parent bounds both
# while it waits for the answer, sampling every WATCH_INTERVAL_S: from outside, so a
# trial stuck in C code or holding its GIL is stopped all the same, and nothing runs in
# the timed process. The log stays a plain file that every process of the trial appends
# to (output_to), cut back to its cap by the parent, rather than a pipe drained by a
# thread: a thread in the trial would take its GIL while it is timed, and a trial that
# writes from C with the GIL held would block forever on a full pipe; a drain in the
# parent would lose what a crashed trial wrote last if it fell behind, and would have to
# split one warm worker's output between its trials' logs. The price: the log outgrows
# its cap by what the trial writes within one interval before the cut (LOG_CHASE_S once
# it is over). What one sample costs is in benchmarks/RESULTS.md ("Trial caps").

# how often the parent samples a running trial's memory and log size
WATCH_INTERVAL_S = 0.1
# how often it looks at the log while the log is over its cap (being written fast)
LOG_CHASE_S = 0.005
# the config fields that set the caps, named in what the caps write
MEMORY_FIELD = "trial.max_memory_mb"
LOG_FIELD = "trial.max_log_mb"
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class Limits:
    """Bounds on one trial's processes (0: no bound): the host memory of the trial
    process and its descendants (``max_memory_bytes``; ``memory_setting`` says where the
    value came from, for the failure message) and the size of its log, ``log``
    (``max_log_bytes``)."""

    max_memory_bytes: int = 0
    memory_setting: str = ""
    log: Path | None = None
    max_log_bytes: int = 0


def tree_rss_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` and its descendants, summed; None without /proc.

    Read from /proc/PID/statm, counters the kernel keeps (not smaps_rollup's Pss, which
    walks the page tables under the process's mmap lock, slowing the trial's own page
    faults, and takes milliseconds per GiB). Pages shared between processes (a
    DataLoader worker's copy-on-write view of its parent) count once per process, so
    with many child processes this over-counts what the trial really holds."""
    total, todo, seen = 0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            with open(f"/proc/{current}/statm", "rb") as f:
                total += int(f.read().split()[1]) * _PAGE_BYTES
        except (OSError, IndexError, ValueError):
            if current == pid:
                return None  # no /proc (not Linux), or the process is gone
            continue
        todo += _children(current)
    return total


def machine_memory_bytes() -> int | None:
    """The memory this machine gives its processes: physical memory, or less where the
    process's cgroup (a container, a batch job) sets a lower limit; None if unknown."""
    try:
        physical: int | None = os.sysconf("SC_PHYS_PAGES") * _PAGE_BYTES
    except (AttributeError, OSError, ValueError):
        physical = None
    limits = [n for n in (physical, _cgroup_limit_bytes()) if n]
    return min(limits) if limits else None


def _cgroup_limit_bytes() -> int | None:
    """This process's cgroup memory limit (v2 memory.max, v1 memory.limit_in_bytes);
    None when there is none ("max", or v1's near-2**63 "unlimited")."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            file = Path("/sys/fs/cgroup", path.lstrip("/"), "memory.max")
        elif "memory" in controllers.split(","):
            file = Path("/sys/fs/cgroup/memory", path.lstrip("/"), "memory.limit_in_bytes")
        else:
            continue
        with contextlib.suppress(OSError, ValueError):
            value = int(file.read_text())
            if value < 2**60:
                return value
    return None


def _children(pid: int) -> list[int]:
    """The direct children of ``pid``: each of its threads lists those it forked."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found += [int(child) for child in f.read().split()]
        except (OSError, ValueError):
            continue
    return found


def trim_log(log: Path, cap: int) -> int:
    """Cut ``log`` back to its first ``cap`` bytes; return how many bytes went.

    Every writer of a trial's log (the trial process, anything it started) opened it
    with O_APPEND (output_to), so after the cut their next writes land at the new end:
    the file holds the first ``cap`` bytes and at most one interval's worth of later
    output, which the next cut (the last one after the trial) removes. (A write that
    lands between the size check and the cut, a microsecond apart, goes uncounted.)"""
    try:
        if os.stat(log).st_size <= cap:
            return 0
        fd = os.open(log, os.O_WRONLY)
    except OSError:  # not there (nothing printed yet, or dropped as empty)
        return 0
    try:
        size = os.fstat(fd).st_size
        os.ftruncate(fd, min(size, cap))
        return max(size - cap, 0)
    finally:
        os.close(fd)


def _mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:,.0f} MiB"


class _Watch:
    """One running trial's limits, checked by its parent every ``interval`` seconds."""

    def __init__(self, limits: Limits, pid: int) -> None:
        self.limits, self.pid = limits, pid
        self.dropped = 0  # bytes cut from the log so far
        self.interval = WATCH_INTERVAL_S
        self._next_memory = 0.0  # time.monotonic() of the next memory sample

    def check(self) -> str:
        """One look at the trial: its log cut back to its cap, its memory sampled (at
        most every WATCH_INTERVAL_S); why it must stop, or "" to let it run on."""
        cut = self.keep_log_small()
        # A log over its cap is being written fast: look again soon, so that it outgrows
        # the cap by what the trial writes in LOG_CHASE_S, not in WATCH_INTERVAL_S.
        self.interval = LOG_CHASE_S if cut else WATCH_INTERVAL_S
        now = time.monotonic()
        if now < self._next_memory:
            return ""
        self._next_memory = now + WATCH_INTERVAL_S
        return self.over_memory()

    def over_memory(self) -> str:
        """Why the trial must stop for its memory ("" while it is within its cap)."""
        cap = self.limits.max_memory_bytes
        rss = tree_rss_bytes(self.pid) if cap else None
        if rss is None or rss <= cap:
            return ""
        return (
            f"the trial used {_mib(rss)} of host memory (resident, the trial process and "
            f"its child processes), over its cap of {_mib(cap)} ({self.limits.memory_setting})"
            f"; killed. Raise {MEMORY_FIELD} if the trial needs that much (0: no cap), or "
            "look for a leak"
        )

    def keep_log_small(self) -> int:
        """Cut the log back to its cap; the bytes cut."""
        log, cap = self.limits.log, self.limits.max_log_bytes
        cut = trim_log(log, cap) if log is not None and cap else 0
        self.dropped += cut
        return cut

    def finish(self) -> None:
        """The last cut, once the trial has ended, and a line saying what was cut."""
        self.keep_log_small()
        if not self.dropped or self.limits.log is None:
            return
        cap = self.limits.max_log_bytes
        with contextlib.suppress(OSError), open(self.limits.log, "a") as f:
            f.write(
                f"\n[perflab: {self.dropped:,} more bytes of this trial's output dropped: "
                f"the log keeps its first {cap:,} bytes ({LOG_FIELD}={cap / 2**20:g}); "
                f"raise {LOG_FIELD} to keep more]\n"
            )


def run_isolated(
    fn: Callable[[Any], Any] | str,
    arg: Any,
    timeout_s: float,
    log: Path | None = None,
    limits: Limits | None = None,
) -> Outcome:
    """Call ``fn(arg)`` in a fresh child (``fn`` may be named "module:function", so
    that this process need not import it). Never raises for what happens in the child, with
    one exception: a child interrupted by SIGINT or SIGTERM raises KeyboardInterrupt here,
    as an interrupt of this process does. Either way the child is gone when this returns
    or raises, and so is everything it started (its process group): no orphan keeps
    running (or writing) after its parent gave up on it.
    ``log``: where the child's stdout and stderr go (see output_to); else the console.
    ``limits``: what the child may use (Limits), enforced while it runs."""
    ctx = _context()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_child, args=(fn, arg, send, log, timeout_s, os.getpid()), daemon=False
    )
    try:
        proc.start()
        send.close()  # the child holds the only writer now: EOF means it died
        outcome = _collect(recv, proc, timeout_s, limits)
    except BaseException:  # Ctrl-C, SIGTERM (see outcome.sigterm_interrupts), bugs
        if proc.pid:
            _kill(proc)
        raise
    finally:
        end_group(proc.pid)  # what the child started and left behind
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


# the outcomes after which the child is already gone (killed, or dead without answering)
ENDED = ("timeout", "crashed", "interrupted", "memory_cap")


def _collect(
    recv: multiprocessing.connection.Connection,
    proc: Any,
    timeout_s: float,
    limits: Limits | None,
) -> Outcome:
    outcome = _answer(recv, proc, timeout_s, limits)
    if outcome.kind in ENDED:
        return outcome
    proc.join(timeout=30)
    if proc.is_alive():
        _kill(proc)
    outcome.exitcode = proc.exitcode
    return outcome


def _answer(
    recv: multiprocessing.connection.Connection,
    proc: Any,
    timeout_s: float,
    limits: Limits | None = None,
) -> Outcome:
    """The child's answer within ``timeout_s`` and ``limits``; a child that hung or went
    over a limit is killed, and one that died without answering is told apart:
    interrupted, ended by its own deadline, or crashed."""
    watch = _Watch(limits, proc.pid) if limits is not None else None
    try:
        stopped = _wait(recv, proc, timeout_s, watch)
    finally:
        if watch is not None:
            watch.finish()
    if stopped is not None:
        return stopped
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


def _wait(
    recv: multiprocessing.connection.Connection,
    proc: Any,
    timeout_s: float,
    watch: _Watch | None,
) -> Outcome | None:
    """Wait until the child answers or dies (None), or stop it: at ``timeout_s``, or
    when ``watch`` finds it over its memory cap (its log is cut back on the way)."""
    if watch is None:
        if recv.poll(timeout_s):
            return None
    else:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            if recv.poll(min(left, watch.interval)):
                return None
            why = watch.check()
            if why:
                _kill(proc)
                return Outcome("memory_cap", message=why)
    _kill(proc)
    return Outcome("timeout", message=f"no result after {timeout_s:g} s; killed")


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
        # kept before start(), which an interrupt can cut short (it waits for the fork
        # server's answer): close() then closes our end, and a process the server forked
        # all the same reads EOF and exits
        self._conn, self.calls = ours, 0
        try:
            self._proc.start()
        finally:
            theirs.close()  # the worker holds the only other end now: EOF means it died
        return ours

    def call(
        self,
        fn: str,
        arg: Any,
        timeout_s: float,
        log: Path | None = None,
        limits: Limits | None = None,
    ) -> Outcome:
        """``fn(arg)`` in the worker (started if it is not running); ``log`` and
        ``limits`` as for run_isolated (a worker over its memory cap is killed)."""
        try:
            conn = self._conn if self.running and self._conn is not None else self._start()
            with contextlib.suppress(BrokenPipeError):  # died since: _answer says how
                conn.send((fn, arg, log, timeout_s))
            outcome = _answer(conn, self._proc, timeout_s, limits)
        except BaseException:  # Ctrl-C, SIGTERM, bugs: no worker outlives its sweep
            self.close(kill=True)
            raise
        finally:
            if log is not None:
                drop_if_empty(log)
        self.calls += 1
        if outcome.kind in ENDED:
            self.close(kill=True)
        return _raise_for(outcome)

    def close(self, kill: bool = False, grace_s: float = 5.0) -> None:
        """End the worker: asked to exit, killed if it does not within ``grace_s`` (or at
        once with ``kill``); then what it started (its process group)."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None:
            return
        if conn is not None:
            if not kill:
                with contextlib.suppress(OSError):
                    conn.send(None)
            conn.close()
        if proc.pid is None:
            # never started, or interrupted inside start() before the fork server gave
            # its pid: there is nothing to wait for (join() would raise AssertionError
            # and turn a Ctrl-C into a crash with no summary)
            return
        proc.join(0 if kill else grace_s)
        if proc.is_alive():
            _kill(proc)
        end_group(proc.pid)


def _serve(conn: multiprocessing.connection.Connection, parent_pid: int) -> None:
    """A worker's loop: answer (fn, arg, log, timeout_s) calls until told to stop (None)
    or until its parent is gone. Each call gets its own deadline, as a fresh child would."""
    _lead_own_group()  # before the user's code can start anything
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
