"""Run a function in a fresh process forked from a server that has torch preloaded.

A trial must not inherit another's compile caches, allocator state, autotune choices or
thread pools, so each runs in its own process. Spawning one costs ~1.2 s (it re-imports
torch) and plain fork deadlocks once the parent ran a multi-threaded op (libgomp is not
fork-safe); a fork server that imported torch, torch._dynamo and perflab once hands out
clean children in ~20 ms (DESIGN.md). Without torch._dynamo preloaded, the first
torch.optim call in a child costs ~1.1 s.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import multiprocessing.connection
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perflab.errors import ConfigError

log = logging.getLogger(__name__)

PRELOAD = ["torch", "torch._dynamo", "torch.optim", "hydra.utils", "perflab.trial"]


# A child ended by these was stopped by the user (Ctrl-C reaches the whole process group;
# SIGTERM is how schedulers and `kill` ask a job to stop), not failed by its variant:
# run_isolated raises KeyboardInterrupt for it instead of reporting a failure.
INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class Outcome:
    # "ok": fn returned; "config_error": fn raised ConfigError; "error": fn raised something
    # else; "crashed": the process died without answering; "timeout": it was killed
    # ("interrupted" never leaves run_isolated: it raises KeyboardInterrupt instead)
    kind: str
    value: Any = None
    message: str = ""
    exitcode: int | None = None


def _context() -> Any:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def start_server() -> None:
    """Start the fork server now (it imports torch, ~3 s) instead of at the first trial."""
    from multiprocessing import forkserver

    _context()
    forkserver.ensure_running()


def resolve_function(fn: Callable[[Any], Any] | str) -> Callable[[Any], Any]:
    """A function, or one named "module:function" (imported here, in the child)."""
    if not isinstance(fn, str):
        return fn
    module, _, name = fn.partition(":")
    return getattr(importlib.import_module(module), name)


def _child(
    fn: Callable[[Any], Any] | str, arg: Any, conn: multiprocessing.connection.Connection
) -> None:
    try:
        conn.send(Outcome("ok", resolve_function(fn)(arg)))
    except ConfigError as exc:
        conn.send(Outcome("config_error", message=str(exc)))
    except KeyboardInterrupt:
        conn.send(Outcome("interrupted", message="interrupted"))
    except BaseException as exc:  # noqa: BLE001 - report, never hang the parent
        detail = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        conn.send(Outcome("error", message=detail))
    finally:
        conn.close()


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def run_isolated(fn: Callable[[Any], Any] | str, arg: Any, timeout_s: float) -> Outcome:
    """Call ``fn(arg)`` in a fresh child (``fn`` may be named "module:function", so
    that this process need not import it). Never raises for what happens in the child, with
    one exception: a child interrupted by SIGINT or SIGTERM raises KeyboardInterrupt here,
    as an interrupt of this process does. Either way the child is gone when this returns
    or raises: no orphan keeps running (or writing) after its parent gave up on it."""
    ctx = _context()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, arg, send), daemon=False)
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
    if outcome.kind == "interrupted":
        raise KeyboardInterrupt
    return outcome


def _collect(recv: multiprocessing.connection.Connection, proc: Any, timeout_s: float) -> Outcome:
    if not recv.poll(timeout_s):
        proc.kill()
        proc.join()
        return Outcome("timeout", message=f"no result after {timeout_s:g} s; killed")
    try:
        outcome: Outcome = recv.recv()
    except EOFError:
        proc.join()
        if proc.exitcode is not None and -proc.exitcode in INTERRUPT_SIGNALS:
            return Outcome("interrupted", exitcode=proc.exitcode)
        return Outcome(
            "crashed",
            message=f"trial process {describe_exit(proc.exitcode)}",
            exitcode=proc.exitcode,
        )
    proc.join(timeout=30)
    if proc.is_alive():
        proc.kill()
        proc.join()
    outcome.exitcode = proc.exitcode
    return outcome
