"""Reading the JSON files of a sweep directory with their nesting bounded.

Trial records, summary.json, experiment.json, profile.json and the lock's note are read
here, and only here. Python's json module recurses once per level of nesting, so a file
of 100,000 nested arrays (``[[[[...]]]]``, which a misbehaving trial or a bad copy can
leave in a sweep directory) raised RecursionError out of perflab-report, the analysis
and a resumed sweep, where any other corrupt file is skipped with a warning. read_json
raises NestedTooDeep instead, a ValueError, which every reader already takes for a file
that is not what it should be (a record is skipped, experiment.json refused in one line).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# The deepest nesting read. perflab's own files nest about ten levels (a record's
# config.model.args.*), and the code that reads their values later (dataclasses.asdict,
# json.dumps for a checksum, the resume check's flattening of configs) recurses once per
# level too, under Python's default recursion limit of 1000: a hundred levels is far
# beyond any file perflab writes and far below what would break those readers.
MAX_DEPTH = 100
_TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels, which no perflab file is"


class NestedTooDeep(ValueError):
    """A JSON file nested deeper than MAX_DEPTH levels: not a file perflab wrote."""


def read_json(path: Path | str) -> Any:
    """The JSON value in the file at ``path``. OSError when it cannot be read,
    ValueError when it is not JSON (UnicodeDecodeError, json.JSONDecodeError) or is
    nested deeper than MAX_DEPTH (NestedTooDeep). NaN and infinities are read, as
    records are written with them (a probe's loss can be NaN)."""
    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except RecursionError:
        raise NestedTooDeep(_TOO_DEEP) from None  # the traceback of 1000 frames says no more
    if _deeper_than(data, MAX_DEPTH):
        raise NestedTooDeep(_TOO_DEEP)
    return data


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and objects in ``value`` nest more than ``limit`` levels; walked
    with a stack of its own, as recursing here would meet the very limit it guards."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False
