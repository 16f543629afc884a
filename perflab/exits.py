"""The exit status of a perflab command.

The work happens deep inside Hydra (the task function, the launcher), where raising
would make Hydra print its own multi-line report; instead the code records what went
wrong here and the CLI turns it into one line and an exit code after Hydra returns.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# a trial failed, crashed, hung or was invalid (its record says why)
EXIT_FAILED = 1
# bad input: a config value, an override, a factory that cannot be built
EXIT_USAGE = 2
# the results could not be written (a full disk, the sweep directory deleted mid-run): the
# sweep stopped as if interrupted, finished trials kept (sysexits.h's EX_IOERR)
EXIT_OUTPUT_LOST = 74
# Ctrl-C, SIGTERM or SIGHUP (128 + SIGINT, the shell's convention for an interrupt)
EXIT_INTERRUPTED = 130

_pending: list[tuple[int, str]] = []


def report(code: int, message: str) -> None:
    _pending.append((code, message))


def worst() -> tuple[int, str] | None:
    """The most severe outcome reported (usage errors before failures), if any."""
    if not _pending:
        return None
    return max(_pending, key=lambda item: item[0])


# Signals that stop perflab the way Ctrl-C does: `kill PID` and batch schedulers send
# SIGTERM; a dropped SSH session or a closed terminal sends SIGHUP.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Inside, SIGTERM and SIGHUP raise KeyboardInterrupt as Ctrl-C does, so `kill PID`, a
    batch scheduler stopping the job or a dropped SSH session take the same path: the
    running trial is killed, finished trials are kept, the partial summary and report are
    written, exit 130. Without it either signal would end this process at once and leave
    its trial process running."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = {sig: signal.signal(sig, _interrupt) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum: int, frame: object) -> None:
    if signum == signal.SIGHUP:
        # the terminal is gone: what perflab prints from now on must not fail on it
        from perflab.process.console_streams import detach_from_terminal

        detach_from_terminal()
    raise KeyboardInterrupt
