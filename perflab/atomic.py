"""Files written whole or not at all.

A reader (or a user after a crash or a full disk) must find the old file or the complete
new one, never a truncated one: a 0-byte plot once stayed behind when the disk filled
during a report. Write to a temporary name in the same directory, then rename: a rename
within one file system is atomic on POSIX.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replaced_whole(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; on success it replaces ``path``,
    on any error it is removed and ``path`` is left as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_whole(path: Path, text: str) -> None:
    with replaced_whole(path) as tmp:
        tmp.write_text(text)
