"""perflab's console scripts as the tests run them.

Found the way an installed package's scripts are found, never assumed to lie beside
``sys.executable``: under ``pip install --target DIR`` they land in ``DIR/bin``, with a
``--user`` install in the user's scripts directory, and 43 tests failed on the H100 for
that (tests/fixtures/h100/README.md). In order: the scripts directory of this interpreter
(where pip puts them in a venv, even one that is not activated), then PATH, then the
entry point itself, run by this interpreter: the same perflab the tests import.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
from functools import cache
from pathlib import Path

# pyproject.toml's [project.scripts], for a perflab imported from a source tree without
# installed metadata (tests/test_cli.py checks that the two agree)
ENTRY_POINTS = {"perflab": "perflab.cli:main", "perflab-report": "perflab.report.cli:main"}


def entry_point(name: str) -> str:
    """``module:function`` behind console script ``name``, from the installed metadata."""
    for ep in importlib.metadata.entry_points(group="console_scripts", name=name):
        if ep.value.startswith("perflab."):
            return ep.value
    return ENTRY_POINTS[name]


def entry_point_command(name: str) -> list[str]:
    """Run the entry point as the generated script does: argv[0] is the script's name
    (perflab's messages and resume hints use it) and the return value is the exit code."""
    module, _, function = entry_point(name).partition(":")
    code = (
        f"import sys; from {module} import {function}; "
        f"sys.argv[0] = {name!r}; sys.exit({function}())"
    )
    return [sys.executable, "-c", code]


@cache
def command(name: str) -> tuple[str, ...]:
    """The argv prefix that runs console script ``name``."""
    places = [sysconfig.get_path("scripts"), os.environ.get("PATH", "")]
    found = shutil.which(name, path=os.pathsep.join(p for p in places if p))
    return (found,) if found else tuple(entry_point_command(name))


def run(
    name: str, *args: str, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``name ARGS`` in ``cwd``, its output captured as text."""
    return subprocess.run(
        [*command(name), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
