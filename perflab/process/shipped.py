"""Functions shipped by value to the trial processes: a step, a model or a dataset
factory defined in the script or notebook that calls ``perflab.run``.

A trial process imports the functions a config names ("package.module.function"), and
a function defined in ``__main__`` (a notebook cell, the script being run) cannot be
imported from another process. ``ship`` pickles such a function with cloudpickle, which
pickles ``__main__``'s functions by value (their code and the globals they use), into
a file named by the hash of its bytes, and returns a name every process can import:
``perflab.process.shipped.<function's name>_<hash>``. This module's ``__getattr__`` loads it back.

The name changes whenever the function's code or the values it captures change, so a
resumed sweep with an edited function is refused as a different experiment, as an
edited module is (perflab.experiment.resume).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perflab.config.plan import SHIPPED_MODULE
from perflab.errors import ConfigError

# where shipped functions are kept: content-addressed, so resuming a sweep finds them
# again; PERFLAB_SHIPPED_DIR moves it (tests; a cluster without a shared home)
SHIPPED_DIR_VARIABLE = "PERFLAB_SHIPPED_DIR"
# a shipped function's name: its own (or "fn" for a lambda) and 12 hex digits of the
# hash of its pickle
_NAME = re.compile(r"[A-Za-z_]\w*_[0-9a-f]{12}")
assert __name__ == SHIPPED_MODULE, "the plan labels shipped functions by this module's name"


def shipped_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "perflab"
    return Path(os.environ.get(SHIPPED_DIR_VARIABLE) or default / "shipped")


def importable_name(fn: Callable[..., Any]) -> str | None:
    """ "module.function" for a function another process can import by name; None for
    one it cannot (defined in __main__, inside another function, a lambda)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or not qualname.isidentifier():
        return None
    return f"{module}.{qualname}"


def ship(field: str, fn: Callable[..., Any]) -> str:
    """The name under which a trial process imports ``fn`` (``field``: the config field
    it goes to, for the message when it cannot be shipped)."""
    import cloudpickle

    try:
        data = cloudpickle.dumps(fn)
    except Exception as exc:  # cloudpickle raises whatever the captured value raises
        raise ConfigError(
            field,
            getattr(fn, "__qualname__", repr(fn)),
            "a function perflab can send to its trial processes",
            f"it could not be pickled ({type(exc).__name__}: {exc}); define it in a module "
            "importable from the working directory and pass it, or 'module.function'",
        ) from exc
    own = getattr(fn, "__name__", "")
    name = f"{own if own.isidentifier() else 'fn'}_{hashlib.sha256(data).hexdigest()[:12]}"
    path = shipped_dir() / f"{name}.pkl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # whole or absent: two sweeps may ship the same function
    return f"{SHIPPED_MODULE}.{name}"


def __getattr__(name: str) -> Any:
    """A shipped function, loaded in the process that imports it by name."""
    if not _NAME.fullmatch(name):
        raise AttributeError(name)
    path = shipped_dir() / f"{name}.pkl"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise AttributeError(
            f"{name}: no shipped function at {path} (shipped by perflab.run on another "
            f"machine or cache? set {SHIPPED_DIR_VARIABLE})"
        ) from None
    # the file is this user's own cache, written by ship() from their own function
    return pickle.loads(data)  # noqa: S301
