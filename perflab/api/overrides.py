"""Python values as the command line's overrides: what ``perflab.run``'s keyword
arguments mean, in the vocabulary of ``perflab -m``.

    run("amp=off,bf16", batch_size=[32, 64], preset="quick", step=my_step)
    # perflab -m amp=off,bf16 batch_size=32,64 preset=quick step=<my_step, shipped>
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from perflab.errors import ConfigError
from perflab.process.shipped import importable_name, ship

# keyword arguments that are not a field: experiment=NAME is the command line's
# +experiment=NAME (a ready-made study, perflab/experiments)
EXPERIMENT = "experiment"


def field_name(keyword: str) -> str:
    """``schedule__max_rounds`` -> ``schedule.max_rounds`` (a keyword cannot hold a dot;
    ``**{"schedule.max_rounds": 6}`` works as well)."""
    return keyword.replace("__", ".")


def as_overrides(positional: Sequence[str], keywords: Mapping[str, Any]) -> list[str]:
    """The overrides of a ``perflab -m`` command line: the positional ones as written,
    then one per keyword argument."""
    for i, override in enumerate(positional):
        if not isinstance(override, str) or "=" not in override:
            raise ConfigError(
                f"overrides[{i}]", override, 'an override as on the command line, "field=value"'
            )
    out = list(positional)
    for keyword, value in keywords.items():
        if keyword == EXPERIMENT:
            out.append(f"+experiment={value}")
            continue
        field = field_name(keyword)
        out.append(f"{field}={_value(field, value)}")
    return out


def _value(field: str, value: Any) -> str:
    """One keyword's value as the command line writes it: a list or tuple is a sweep
    (``batch_size=[32, 64]`` is ``batch_size=32,64``); a literal list is a string
    (``model.input.shape="[16,32]"``)."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise ConfigError(field, value, "a value, or a non-empty list of values to sweep")
        return ",".join(_scalar(field, v) for v in value)
    return _scalar(field, value)


def _scalar(field: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float, str)):
        return str(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_scalar(field, v)}" for k, v in value.items()) + "}"
    if callable(value):
        return _function(field, value)
    raise ConfigError(
        field, value, "a number, text, true/false, None, a function, or a list of these"
    )


def _function(field: str, fn: Callable[..., Any]) -> str:
    """A function by the name its trial process imports it by: its own where it has one
    (a module on the path), else shipped by value (perflab.process.shipped)."""
    return importable_name(fn) or ship(field, fn)
