"""Errors a user can cause. The CLI prints their message on one line and exits 2."""

from __future__ import annotations

import errno
from typing import Any


class PerflabError(Exception):
    """Base class of user-caused errors: bad config, bad files, bad arguments."""


class ConfigError(PerflabError):
    """A config value is not allowed. The message names the field, the value and what is allowed."""

    def __init__(self, field: str, value: Any, allowed: str, problem: str = "not allowed") -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}={format_value(value)}: {problem}; allowed: {allowed}")


def format_value(value: Any) -> str:
    """Show a value the way it is written on the command line."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str) and value.strip() == value and value:
        return value
    return repr(value)


class RecordError(PerflabError):
    """A record file cannot be read: wrong schema version, truncated, or not a perflab record."""


class OutsideSweep(RecordError):
    """A file a sweep directory names (a trace in profile.json, a job directory in
    experiment.json, a group in groups.json), or a symbolic link in it, leads out of the
    sweep directory, or nowhere (a loop of links): it is not read, and the reader skips
    it as it skips a bad record."""


class OutputLost(Exception):
    """Results can no longer be written where the run writes them. Not a user's bad
    input (nothing to fix in the command) and not a failed trial (the trial was fine): the
    run stops as if interrupted, keeps what is on disk and says how to resume.
    ``summary``: the sweep's summary of the trials finished, when one could be made."""

    def __init__(self, message: str, summary: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.summary = summary


class DiskFull(OutputLost):
    """The disk, or the user's quota, filled while results were written."""


# errno values of a disk that filled (or a quota reached) while results were written
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def no_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in NO_SPACE


class SweepDirDeleted(OutputLost):
    """The sweep directory was removed while the sweep ran; writing on would recreate
    it with a fraction of the experiment in it."""


def printable(message: str) -> str:
    """The message on one line whatever the user typed: a newline or other control
    character inside an override (or a path) is shown escaped, as Python writes it."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
