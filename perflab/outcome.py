"""The exit status of a perflab command.

The work happens deep inside Hydra (the task function, the launcher), where raising
would make Hydra print its own multi-line report; instead the code records what went
wrong here and the CLI turns it into one line and an exit code after Hydra returns.
"""

from __future__ import annotations

EXIT_OK = 0
# a trial failed, crashed, hung or was invalid (its record says why)
EXIT_FAILED = 1
# bad input: a config value, an override, a factory that cannot be built
EXIT_USAGE = 2
# Ctrl-C (128 + SIGINT, the shell's convention)
EXIT_INTERRUPTED = 130

_pending: list[tuple[int, str]] = []


def report(code: int, message: str) -> None:
    _pending.append((code, message))


def worst() -> tuple[int, str] | None:
    """The most severe outcome reported (usage errors before failures), if any."""
    if not _pending:
        return None
    return max(_pending, key=lambda item: item[0])
