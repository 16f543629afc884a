"""How perflab was invoked: the command line, the working directory and its git state.
Read in the launching process and carried to every trial in its request; the machine
itself is read in the trial process (perflab.measure.environment)."""

from __future__ import annotations

import os
import subprocess
import sys

from perflab.formats.trial_parts import Invocation


def _git(cwd: str, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def read_invocation(cwd: str | None = None) -> Invocation:
    """The command line and the git state of the user's working directory."""
    cwd = cwd or os.getcwd()
    commit = _git(cwd, "rev-parse", "HEAD")
    dirty = None if commit is None else bool(_git(cwd, "status", "--porcelain"))
    return Invocation(argv=list(sys.argv), cwd=cwd, git_commit=commit, git_dirty=dirty)
