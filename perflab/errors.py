"""Errors a user can cause. The CLI prints their message on one line and exits 2."""

from __future__ import annotations

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
