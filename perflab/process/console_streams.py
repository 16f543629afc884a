"""perflab's own console: it survives a closed pipe and a dropped terminal, and a sweep
keeps a copy of it in its directory.

A sweep runs for minutes, and what it prints is not where its results live (those are
the records, summary.json and report.md). So a console that goes away must not stop it:
``perflab -m ... | head -2`` closes the pipe after two lines (Python then raises
BrokenPipeError at the next print), and a dropped SSH session leaves a terminal whose
writes fail with EIO. Either used to end the sweep half way, once with exit 0. Here the
first failed write detaches the stream (later writes go nowhere), the sweep measures on,
and everything it printed is also in ``console.log`` beside its results.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from perflab.formats.sweepdir import CONSOLE_LOG

# errno values of a console that is gone: the reader of a pipe exited, the terminal hung up
GONE = (errno.EPIPE, errno.EIO, errno.ENXIO, errno.EBADF)


class TolerantStream:
    """A text stream that stops writing, without an error, once its console is gone, and
    copies what is written to a file while one is set (copy_to)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._copy: TextIO | None = None
        self.gone = False

    def write(self, text: str) -> int:
        if self._copy is not None:
            with contextlib.suppress(OSError, ValueError):  # the copy is a convenience
                self._copy.write(text)
                self._copy.flush()
        if not self.gone:
            try:
                self._stream.write(text)
            except OSError as exc:
                self._lost(exc)
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except OSError as exc:
                self._lost(exc)

    def copy_to(self, path: Path | None) -> None:
        if self._copy is not None:
            with contextlib.suppress(OSError):
                self._copy.close()
        self._copy = open(path, "a") if path is not None else None  # noqa: SIM115 - kept

    def detach(self) -> None:
        """Write nowhere from now on; the descriptor itself points at /dev/null, so that
        C code and child processes that write to it do not fail either."""
        self.gone = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def _lost(self, exc: OSError) -> None:
        if exc.errno not in GONE:
            raise exc
        self.detach()
        if self is sys.stdout:
            _say_once_on_stderr()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _streams() -> dict[str, TolerantStream]:
    return {
        name: stream
        for name in ("stdout", "stderr")
        if isinstance(stream := getattr(sys, name), TolerantStream)
    }


def guard_console() -> None:
    """Make sys.stdout and sys.stderr tolerant (idempotent). Called first by the perflab
    command, before Hydra sets up logging handlers that keep a reference to them."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, TolerantStream):
            setattr(sys, name, TolerantStream(stream))


def copy_console_to(path: Path | None) -> None:
    """Copy what perflab prints from now on into ``path`` (appended), or stop (None)."""
    for stream in _streams().values():
        stream.copy_to(path)


def detach_from_terminal() -> None:
    """The terminal hung up (SIGHUP): stop writing to it, keep the copy."""
    for stream in _streams().values():
        stream.detach()


_told: list[bool] = []


def _say_once_on_stderr() -> None:
    if _told:
        return
    _told.append(True)
    with contextlib.suppress(Exception):
        print(
            f"perflab: stdout was closed (its reader exited); measuring goes on, and what "
            f"perflab prints is kept in {CONSOLE_LOG} in the sweep directory",
            file=sys.stderr,
        )
