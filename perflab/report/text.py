"""Markdown building blocks shared by the report's sections: escaping and tables."""

from __future__ import annotations

import math
import re
from typing import Any

_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")


def esc(value: Any) -> str:
    """Escape a value for a markdown table cell or a line of text."""
    text = "" if value is None else str(value)
    return _SPECIAL.sub(r"\\\1", text).replace("\n", " ")


def num(value: Any, fmt: str, missing: str = "-") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    return format(value, fmt)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines
