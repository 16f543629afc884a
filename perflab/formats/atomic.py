"""Files written whole or not at all.

A reader (or a user after a crash or a full disk) must find the old file or the complete
new one, never a truncated one: a 0-byte plot once stayed behind when the disk filled
during a report. Write to a temporary name in the same directory, then rename: a rename
within one file system is atomic on POSIX.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path


def temporary_beside(path: Path) -> tuple[int, Path]:
    """A new, empty temporary file in ``path``'s directory (a hidden name from ``path``'s),
    open for writing: its descriptor and path.

    Created with mode 0666 less the umask, as open() creates a file: the result is
    renamed over ``path`` and keeps this mode, and tempfile.mkstemp's 0600 made every
    record, summary and report readable by its owner alone while console.log, written
    with open(), was readable by all (0644 under the usual umask)."""
    for _ in range(tempfile.TMP_MAX):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary name", str(path.parent))


@contextlib.contextmanager
def replaced_whole(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; on success it replaces ``path``,
    on any error it is removed and ``path`` is left as it was."""
    path = Path(path)
    fd, tmp = temporary_beside(path)
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
