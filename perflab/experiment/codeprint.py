"""A fingerprint of the code a sweep's trials run, so a resumed sweep never mixes trials of
old and new code.

The host, versions and git commit (perflab.experiment.resume.MACHINE_KEYS) miss the common case: the
user edits the model's module, without git or without committing, and runs the same
command again. The trials measured before and after the edit then sat in one experiment
while the report said ``git_dirty: False``. The fingerprint hashes what runs:

- ``perflab``: perflab's own source files (an editable install changes without a new
  version);
- ``modules``: for every factory the config names (``model._target_``,
  ``data.dataset``) outside perflab, the source of its top-level package (or its module
  file), found on the working directory and sys.path without importing it (importing
  the user's package here could import torch, which the sweep process never does);
- ``worktree``: when the working directory is in a git work tree, the uncommitted
  changes to its Python files (``git diff HEAD``) and its untracked Python files that
  git does not ignore.

Python sources only: the configs are in the fingerprint already (composed, whole), and
everything else in a work tree (records, reports, sweep directories, published reports
a sweep rewrites) changes as the sweep runs.

Only hashes are kept; a difference names what changed.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import perflab

# a package bigger than this is not hashed file by file: only the factory's module is
MAX_FILES = 2000
MAX_BYTES = 64 * 2**20
# untracked files hashed at most (their contents; beyond, only their names)
MAX_UNTRACKED = 500
# what counts as code in a work tree (git pathspecs)
CODE = ("*.py", "*.pyx", "*.pyi")


def code_fingerprint(factories: Iterable[str], cwd: str) -> dict[str, Any]:
    """Hashes of the code the trials run: perflab's, the user's factories' and the
    working tree's uncommitted state (None where there is no git)."""
    user = sorted({f for f in factories if f and not f.startswith("perflab.")})
    return {
        "perflab": _hash_files(
            _sources(Path(perflab.__file__).parent), Path(perflab.__file__).parent
        ),
        "modules": {target: _module_hash(target, cwd) for target in user},
        "worktree": _worktree_hash(cwd),
    }


def factories(config: dict[str, Any]) -> list[str]:
    """The factories a composed config names (model._target_, data.dataset)."""
    model, data = config.get("model") or {}, config.get("data") or {}
    return [str(v) for v in (model.get("_target_"), data.get("dataset")) if v]


def _sources(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _hash_files(files: list[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError as exc:  # unreadable: its state is that it cannot be read
            digest.update(f"unreadable: {exc.strerror}".encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _module_hash(target: str, cwd: str) -> str | None:
    """The hash of the source behind "package.module.function", or None if no source
    file can be found (a compiled or namespace-less module: nothing to fingerprint)."""
    module = target.rpartition(".")[0]
    found = _find_source(module, [cwd, *sys.path])
    if found is None:
        return None
    package_dir, module_file = found
    if package_dir is not None:
        files = _sources(package_dir)
        if len(files) <= MAX_FILES and sum(_size(f) for f in files) <= MAX_BYTES:
            return _hash_files(files, package_dir)
    return _hash_files([module_file], module_file.parent)


def _find_source(module: str, search: list[str]) -> tuple[Path | None, Path] | None:
    """(the top-level package's directory or None, the module's file) for a dotted
    module name, looked up on ``search`` as the import system would find a source file."""
    parts = module.split(".")
    for entry in search:
        base = Path(entry or ".")
        candidates = [
            base.joinpath(*parts).with_suffix(".py"),
            base.joinpath(*parts, "__init__.py"),
        ]
        for candidate in candidates:
            if candidate.is_file():
                top = base / parts[0]
                return (top if top.is_dir() else None), candidate
    return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _worktree_hash(cwd: str) -> str | None:
    """The uncommitted state of the Python files of the git work tree holding ``cwd``:
    changes to tracked ones, untracked ones git does not ignore. None outside a work tree
    (or without git)."""
    diff = _git(cwd, "diff", "HEAD", "--no-color", "--no-ext-diff", "--binary", "--", *CODE)
    if diff is None:
        return None
    listed = _git(cwd, "ls-files", "--others", "--exclude-standard", "-z", "--", *CODE)
    untracked = sorted((listed or b"").split(b"\0"))
    top = _git(cwd, "rev-parse", "--show-toplevel")
    root = Path(top.decode().strip()) if top else Path(cwd)
    digest = hashlib.sha256(diff)
    for i, name in enumerate(n for n in untracked if n):
        digest.update(b"\0" + name + b"\0")
        path = root / name.decode(errors="surrogateescape")
        if i < MAX_UNTRACKED and path.is_file() and _size(path) <= MAX_BYTES:
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def _git(cwd: str, *args: str) -> bytes | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None
