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

EXIT_OK = 0
# a trial failed, crashed, hung or was invalid (its record says why)
EXIT_FAILED = 1
# bad input: a config value, an override, a factory that cannot be built
EXIT_USAGE = 2
# Ctrl-C or SIGTERM (128 + SIGINT, the shell's convention for an interrupt)
EXIT_INTERRUPTED = 130

_pending: list[tuple[int, str]] = []


def report(code: int, message: str) -> None:
    _pending.append((code, message))


def worst() -> tuple[int, str] | None:
    """The most severe outcome reported (usage errors before failures), if any."""
    if not _pending:
        return None
    return max(_pending, key=lambda item: item[0])


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Inside, SIGTERM raises KeyboardInterrupt as Ctrl-C does, so `kill PID` or a batch
    scheduler stopping the job takes the same path: the running trial is killed, finished
    trials are kept, the partial summary and report are written, exit 130. Without it
    SIGTERM would end this process at once and leave its trial process running."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
