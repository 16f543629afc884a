"""Markdown building blocks shared by the report's sections: escaping and tables.

Labels, override values, error messages and paths come from the user (or from a file a
user can edit). Before any of them reaches the markdown, ``visible`` puts it on one line:
a newline in ``+model.args.note='a\\n# injected'`` would otherwise start a heading, and
in a table end the row."""

from __future__ import annotations

import math
import re
from typing import Any

_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")
# a pipe that no backslash escapes (an even run of backslashes escapes each other)
_BARE_PIPE = re.compile(r"(?<!\\)((?:\\\\)*)\|")


def visible(value: Any) -> str:
    """The text on one line, each control or invisible character (newline, carriage
    return, escape, the Unicode line separators) shown as Python writes it: ``\\n``."""
    text = "" if value is None else str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def esc(value: Any) -> str:
    """Escape a value for a markdown table cell or a line of text."""
    return _SPECIAL.sub(r"\\\1", visible(value))


def code(value: Any) -> str:
    """A value as an inline code span, where nothing can be escaped: on one line, its
    backticks (which would end the span) shown as quotes. Not for table cells."""
    return "`" + visible(value).replace("`", "'") + "`"


def num(value: Any, fmt: str, missing: str = "-") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    return format(value, fmt)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A table whose rows cannot be broken: every cell on one line, its bare pipes
    escaped (the cells are markdown already; a pipe escaped by esc stays as it is)."""
    lines = ["| " + " | ".join(map(_cell, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(_cell, row)) + " |" for row in rows]
    return lines


def _cell(text: str) -> str:
    return _BARE_PIPE.sub(r"\1\\|", visible(text))
