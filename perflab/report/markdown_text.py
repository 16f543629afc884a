"""Markdown building blocks shared by the report's sections: escaping and tables.

Labels, override values, error messages and paths come from the user (or from a file a
user can edit). Before any of them reaches the markdown, ``visible`` puts it on one line:
a newline in ``+model.args.note='a\\n# injected'`` would otherwise start a heading, and
in a table end the row.

Tables are read where GitHub renders them, in a content column of 890 px: a table wider
than that runs off its right edge, taking the columns on the right out of sight
(tests/test_report_width.py estimates every table's width). ``tables_within`` splits a
table whose columns depend on the run (one per step phase) into narrower ones."""

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


# GitHub's markdown column, px; a table cell's padding (13 px each side) and border, px;
# the width of a character of 14 px text, px (of a bold one: headers)
COLUMN_PX = 890
CELL_PX = 27
CHAR_PX = 7.5
BOLD_CHAR_PX = 8.0
# a line break inside a table cell (GitHub renders the tag; no user value holds it, as
# esc escapes every "<")
BR = "<br>"
_ESCAPE = re.compile(r"\\(.)")


def _text_px(cell: str, char_px: float) -> float:
    """A rough width of a cell's text on one line (its longest line), escapes removed."""
    return max(len(_ESCAPE.sub(r"\1", line)) for line in cell.split(BR)) * char_px


def tables_within(header: list[str], rows: list[list[str]], keep: int = 1) -> list[str]:
    """One table, or, when its text would not fit the content column on one line per
    cell, as few as hold the others, each with the first ``keep`` columns and a share of
    the others, in order (shares of about equal counts where they fit; at least one
    column each); separated by a blank line."""
    widths = [
        max([_text_px(header[i], BOLD_CHAR_PX), *(_text_px(r[i], CHAR_PX) for r in rows)]) + CELL_PX
        for i in range(len(header))
    ]
    room = COLUMN_PX - sum(widths[:keep])
    groups: list[list[int]] = []
    for i in range(keep, len(header)):
        if groups and sum(widths[j] for j in groups[-1]) + widths[i] <= room:
            groups[-1].append(i)
        else:
            groups.append([i])
    others = list(range(keep, len(header)))
    size = -(-len(others) // max(len(groups), 1))
    even = [others[i : i + size] for i in range(0, len(others), size)]
    if len(even) == len(groups) and all(sum(widths[j] for j in g) <= room for g in even):
        groups = even
    lines: list[str] = []
    for group in groups or [[]]:
        columns = [*range(keep), *group]
        if lines:
            lines.append("")
        lines += table([header[i] for i in columns], [[r[i] for i in columns] for r in rows])
    return lines


def _cell(text: str) -> str:
    return _BARE_PIPE.sub(r"\1\\|", visible(text))
