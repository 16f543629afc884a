"""A fingerprint of the code a sweep's trials run, so a resumed sweep never mixes trials of
old and new code.

The host, versions and git commit (perflab.experiment.resume.MACHINE_KEYS) miss the common case: the
user edits the model's module, without git or without committing, and runs the same
command again. The trials measured before and after the edit then sat in one experiment
while the report said ``git_dirty: False``. The fingerprint hashes what runs:

- ``perflab``: perflab's own source files (an editable install changes without a new
  version);
- ``modules``: for every function the config names (``model._target_``,
  ``data.dataset``, ``data.collate``, a ``model.loss`` function, the
  ``schedule.evidence`` checks: perflab.config.user_code) outside perflab, the source of
  its top-level package (or its module file), found on the working directory and
  sys.path without importing it (importing the user's package here could import torch,
  which the sweep process never does);
- ``imports``: the local modules those modules import, transitively: every module their
  ``import`` statements name (read with ``ast``, found the same way, never imported)
  whose source lies outside the standard library, site-packages and perflab, each with
  the module that imports it. A model file beside its helper (``my_model.py`` importing
  ``helper_mod.py``) is hashed as a module file alone, so an edited helper, outside git,
  once let a resume mix two models (p50 2.45 ms, then 3.1-3.7 ms) in one experiment;
- ``worktree``: when the working directory is in a git work tree, the uncommitted
  changes to its Python files (``git diff HEAD``) and its untracked Python files that
  git does not ignore.

Python sources only: the configs are in the fingerprint already (composed, whole), and
everything else in a work tree (records, reports, sweep directories, published reports
a sweep rewrites) changes as the sweep runs.

Only hashes are kept; a difference names what changed.
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
import sys
import sysconfig
from collections import deque
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

from perflab.config.user_code import user_code

# perflab's own package directory (found without importing perflab's face, which names
# StepContext and so torch's types)
PERFLAB_DIR = Path(__file__).resolve().parent.parent

# a package bigger than this is not hashed file by file: only the factory's module is
MAX_FILES = 2000
MAX_BYTES = 64 * 2**20
# untracked files hashed at most (their contents; beyond, only their names)
MAX_UNTRACKED = 500
# what counts as code in a work tree (git pathspecs)
CODE = ("*.py", "*.pyx", "*.pyi")
# The walk over the factories' local imports stops after this many modules and this many
# imports away from a factory's module: a model's own helpers are a handful of files a
# few imports away, and the walk runs at the start of every sweep, so a large local tree
# on the path (a vendored library beside the model) must not make it slow.
MAX_IMPORTED = 200
MAX_IMPORT_DEPTH = 8


def code_fingerprint(factories: Iterable[str], cwd: str) -> dict[str, Any]:
    """Hashes of the code the trials run: perflab's, the user's factories' and the
    working tree's uncommitted state (None where there is no git)."""
    user = sorted({f for f in factories if f and not f.startswith("perflab.")})
    search = [cwd, *sys.path]
    return {
        "perflab": _hash_files(_sources(PERFLAB_DIR), PERFLAB_DIR),
        "modules": {target: _module_hash(target, cwd) for target in user},
        "imports": local_imports([t.rpartition(".")[0] for t in user], search),
        "worktree": _worktree_hash(cwd),
    }


def factories(config: dict[str, Any]) -> list[str]:
    """The functions a composed config names (perflab.config.user_code: model._target_,
    data.dataset, data.collate, a model.loss function, the schedule.evidence checks)."""
    return list(user_code(config).values())


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


def local_imports(modules: list[str], search: list[str]) -> dict[str, dict[str, str]]:
    """Every local module that ``modules`` import, directly or through each other, as
    {name: {"by": the module importing it, "hash": its source's}}: breadth first, at most
    MAX_IMPORTED modules and MAX_IMPORT_DEPTH imports deep. Found by path on ``search``
    (as _find_source finds a factory), never with importlib.util.find_spec: that imports
    a dotted name's parent packages, running the user's code (and torch) in the sweep
    process."""
    found: dict[str, dict[str, str]] = {}
    queue: deque[tuple[str, Path, int]] = deque()
    for module in modules:
        located = _find_source(module, search)
        if located is not None:
            queue.append((module, located[1], 0))
    seen = set(modules)
    while queue and len(found) < MAX_IMPORTED:
        importer, source, depth = queue.popleft()
        if depth >= MAX_IMPORT_DEPTH:
            continue
        for name in _imported_names(source, importer):
            if name in seen or len(found) >= MAX_IMPORTED:
                continue
            seen.add(name)
            path = _local_source(name, search)
            if path is not None:
                found[name] = {"by": importer, "hash": _hash_files([path], path.parent)}
                queue.append((name, path, depth + 1))
    return found


def _imported_names(source: Path, module: str) -> Iterator[str]:
    """The dotted names the ``import`` statements of ``source`` (the file of ``module``)
    may load, anywhere in it (inside functions too), relative ones made absolute:
    ``import a.b`` loads a and a.b; ``from a import b`` loads a, and a.b if b is a
    submodule. A file that cannot be read or parsed names none (its own hash still
    says when it changes)."""
    try:
        tree = ast.parse(source.read_bytes(), filename=str(source))
    except (OSError, SyntaxError, ValueError):
        return
    package = module if source.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _with_parents(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            if base is None:
                continue
            yield from _with_parents(base)
            for alias in node.names:
                if alias.name != "*":
                    yield f"{base}.{alias.name}"


def _absolute(name: str | None, level: int, package: str) -> str | None:
    """The absolute name of ``from {"." * level}{name} import ...`` written in
    ``package``; None when it leads above the top-level package."""
    if level == 0:
        return name
    parts = package.split(".") if package else []
    if level - 1 >= len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _with_parents(name: str) -> Iterator[str]:
    """a, a.b, a.b.c for "a.b.c": importing a module runs its packages' __init__ too."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        yield ".".join(parts[:i])


def _local_source(name: str, search: list[str]) -> Path | None:
    """The source file of the module ``name`` when it is the user's local code: found on
    ``search``, and neither in the standard library, in site-packages nor in perflab
    (their versions are in the fingerprint, and perflab's sources are hashed whole)."""
    top = name.partition(".")[0]
    if top in sys.stdlib_module_names or top == "perflab":
        return None  # known without looking: a builtin has no file to find
    located = _find_source(name, search)
    if located is None:
        return None
    path = located[1].resolve()
    installed = any(part in ("site-packages", "dist-packages") for part in path.parts)
    return None if installed or any(root in path.parents for root in _installed_roots()) else path


@cache
def _installed_roots() -> tuple[Path, ...]:
    """The standard library's directories, and perflab's."""
    paths = sysconfig.get_paths()
    roots = [Path(paths[key]).resolve() for key in ("stdlib", "platstdlib") if key in paths]
    return (*roots, PERFLAB_DIR)


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
