"""Frozen dataclasses to and from JSON objects, every value checked against its field's
type annotation on the way in (perflab.formats.summary's model of summary.json).

A dataclass's fields are the object's keys, in order. Two field kinds shape the object
beyond that, both declared with the helpers below:

- ``inline(marker)``: a nested dataclass whose keys sit in the parent's object itself
  (summary.json's comparison holds its estimate's keys); present when ``marker`` is;
- ``written_when(predicate)``: a key written only when it applies (by default: when its
  value is not None), read as None when absent.

Decoding never converts a value (an int where a float is allowed stays an int), so an
object decoded and encoded again is the same JSON, byte for byte.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar, Union

T = TypeVar("T")

_INLINE = "perflab.inline"
_WHEN = "perflab.written_when"


class SchemaError(ValueError):
    """A JSON value that does not fit its field: the message names the field by its path
    (``comparisons[0].speedup``), its value and the problem."""


def read_version(
    data: Any, current: int, supported: tuple[int, ...], absent: int | None = 1
) -> int:
    """The schema_version of a file's JSON object (``absent`` when it has none; None:
    it must have one); SchemaError for a version this perflab does not read, saying
    when a newer perflab wrote it. One rule for every versioned file."""
    version = data.get("schema_version", absent) if isinstance(data, dict) else absent
    if type(version) is not int or version not in supported:
        newer = type(version) is int and version > current
        raise SchemaError(
            f"schema_version={version!r} is not supported by this perflab (reads "
            f"{', '.join(map(str, supported))})" + ("; upgrade perflab to read it" if newer else "")
        )
    return version


def inline(marker: str, absent: dict[str, Any] | None = None) -> Any:
    """A nested dataclass written inline, present when the object holds ``marker``; an
    optional one (``absent`` given) is None otherwise and then writes ``absent``."""
    metadata = {_INLINE: (marker, absent)}
    if absent is None:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=None, metadata=metadata)


def written_when(applies: Callable[[Any], bool] | None = None) -> Any:
    """A key written only when ``applies(obj)`` (default: its value is not None)."""
    return dataclasses.field(default=None, metadata={_WHEN: applies})


# --- writing ----------------------------------------------------------------------------


def encode(obj: Any) -> dict[str, Any]:
    """The dataclass as its JSON object."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if _INLINE in f.metadata:
            out.update(encode(value) if value is not None else f.metadata[_INLINE][1])
        elif _WHEN not in f.metadata or _applies(f, obj, value):
            out[f.name] = _plain(value)
    return out


def _applies(f: dataclasses.Field[Any], obj: Any, value: Any) -> bool:
    applies = f.metadata[_WHEN]
    return bool(applies(obj)) if applies is not None else value is not None


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


# --- reading ----------------------------------------------------------------------------


def decode(cls: type[T], data: Any, where: str = "") -> T:
    """An instance of the dataclass ``cls`` from its JSON object: SchemaError for a
    missing key, a key it does not have, or a value of the wrong type."""
    if not isinstance(data, dict):
        raise SchemaError(_bad(where or "(the object)", data, "not an object"))
    rest = dict(data)
    values = {f.name: _field(cls, f, rest, where) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if rest:
        raise SchemaError(f"{_path(where, next(iter(rest)))}: not a known field")
    return cls(**values)


def _field(cls: type, f: dataclasses.Field[Any], rest: dict[str, Any], where: str) -> Any:
    """The value of one field, its keys taken out of ``rest``."""
    kind = _hints(cls)[f.name]
    if _INLINE in f.metadata:
        return _inline(kind, f.metadata[_INLINE], rest, where)
    if f.name in rest:
        return _value(kind, rest.pop(f.name), _path(where, f.name))
    if _WHEN in f.metadata:
        return None
    raise SchemaError(f"{_path(where, f.name)}: missing")


def _inline(kind: Any, spec: tuple[str, Any], rest: dict[str, Any], where: str) -> Any:
    marker, absent = spec
    inner = _member(kind)
    if marker in rest:
        names = [f.name for f in dataclasses.fields(inner)]
        return decode(inner, {k: rest.pop(k) for k in names if k in rest}, where)
    if absent is None or any(rest.get(k) != v for k, v in absent.items()):
        raise SchemaError(f"{_path(where, marker)}: missing")
    for key in absent:
        del rest[key]
    return None


def _value(kind: Any, value: Any, path: str) -> Any:
    """``value`` checked against the annotation ``kind`` (recursively)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        return _value(_member(kind), value, path)
    if origin is list:
        if not isinstance(value, list):
            raise SchemaError(_bad(path, value, "not a list"))
        if args[0] in _SCALARS:
            return _scalars(args[0], value, path)
        return [_value(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise SchemaError(_bad(path, value, "not an object"))
        return {k: _value(args[1], v, f"{path}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(kind):
        return decode(kind, value, path)  # type: ignore[arg-type]
    if not _SCALARS[kind](value):
        raise SchemaError(_bad(path, value, _PROBLEMS[kind]))
    return value


# JSON's scalars: bool is no int here (Python's bool is); a float field takes an int as
# JSON writes a whole float (and keeps it an int, so it is written back the same); NaN
# and infinities are not numbers summary.json holds (null stands for them)
_SCALARS: dict[Any, Callable[[Any], bool]] = {
    str: lambda v: isinstance(v, str),
    bool: lambda v: type(v) is bool,
    int: lambda v: type(v) is int,
    float: lambda v: type(v) is int or (type(v) is float and math.isfinite(v)),
}
_PROBLEMS = {
    str: "not a string",
    bool: "not true or false",
    int: "not an integer",
    float: "not a finite number",
}


def _scalars(kind: Any, values: list[Any], path: str) -> list[Any]:
    """A list of one scalar type, checked in one pass: a record's per-sample readings run
    to thousands, and a path built per entry cost more than the check."""
    ok = _SCALARS[kind]
    if all(ok(v) for v in values):
        return list(values)
    i = next(i for i, v in enumerate(values) if not ok(v))
    raise SchemaError(_bad(f"{path}[{i}]", values[i], _PROBLEMS[kind]))


def _member(kind: Any) -> Any:
    """The one type of ``X | None`` other than None (``kind`` itself if not a union)."""
    members = [a for a in typing.get_args(kind) if a is not type(None)]
    return members[0] if members else kind


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _path(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _bad(path: str, value: Any, problem: str) -> str:
    """The problem as "path=value: problem", the value as Python shows it, cut short."""
    shown = repr(value)
    return f"{path}={shown if len(shown) <= 60 else shown[:57] + '...'}: {problem}"
