"""Composing perflab's config with Hydra: the schemas and resolvers registered with
Hydra, the composed config turned once into the typed, validated one, and every Hydra or
OmegaConf error said in one line that names the field, the value and what is allowed."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import typing
from typing import Any

from hydra.errors import MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    InterpolationResolutionError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)

from perflab.config import schema as config_module
from perflab.config.devices import _default_option, by_device, cuda_defaults
from perflab.config.rules import validate
from perflab.config.schema import MODEL_SCHEMAS, DataConfig, PerflabConfig
from perflab.errors import ConfigError, PerflabError, format_value
from perflab.formats.sweepdir import RUN_MARKERS, check_output_dir


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (conf/*.yaml extends them) and the
    resolvers of the defaults by device."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("perflab.default", _default_option, replace=True)
    OmegaConf.register_new_resolver("perflab.cuda_defaults", cuda_defaults, replace=True)
    OmegaConf.register_new_resolver("perflab.by_device", by_device, replace=True)
    store = ConfigStore.instance()
    store.store(name="perflab_schema", node=PerflabConfig)
    for name, node in MODEL_SCHEMAS.items():
        store.store(group="model", name=f"{name}_schema", node=node)
    store.store(group="data", name="data_schema", node=DataConfig)
    _register_experiments(store)


def _register_experiments(store: Any) -> None:
    """Make each experiments/NAME.yaml runnable as ``perflab +experiment=NAME``.

    experiments/ ships as the package perflab.experiments, outside perflab.conf, and its
    files are registered here: one mechanism that works the same from an editable install
    (where a mapped package is not a directory inside conf/) and from a built wheel.
    """
    from importlib import resources

    from omegaconf import OmegaConf

    for entry in resources.files("perflab.experiments").iterdir():
        if entry.name.endswith(".yaml"):
            node = OmegaConf.create(entry.read_text())
            store.store(
                group="experiment", name=entry.name[: -len(".yaml")], node=node, package="_global_"
            )


def to_config(cfg: DictConfig) -> PerflabConfig:
    """Turn the composed Hydra config into the validated, typed config (once)."""
    check_keys(cfg)
    try:
        config: PerflabConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    except MissingMandatoryValue as exc:
        key = str(exc.full_key)
        allowed = (
            "a dotted path to your factory, e.g. model._target_=mypkg.build_model"
            if key.endswith("_target_")
            else "a dotted path to your function, e.g. model.fn=mypkg.ops.attention"
            if key == "model.fn"
            else "a value; this field has no default"
        )
        raise ConfigError(key, "???", allowed, "required") from exc
    except OmegaConfBaseException as exc:
        # Values checked only once resolved: ${nosuch}, ${oc.env:UNSET}, or an
        # interpolation that resolves to the wrong type.
        key = str(exc.full_key) or "config"
        kind = _field_type(exc) or "a value of the field's type"
        allowed = f"{kind}, or an interpolation ${{...}} resolving to one"
        raise ConfigError(key, _raw_value(cfg, key), allowed, joined_lines(str(exc))) from exc
    validate(config)
    return config


def check_keys(node: DictConfig, path: str = "") -> None:
    """Refuse keys the schema lacks and schema fields deleted with ~KEY. Hydra lets
    +nosuch=1 (or +model.args.x=1 on a model without args) add a key to a typed node,
    and OmegaConf.to_object then silently drops it; a deleted field silently gets its
    default back. Either way the user's override would be ignored without a word."""
    schema = OmegaConf.get_type(node)
    if dataclasses.is_dataclass(schema):
        names = [f.name for f in dataclasses.fields(schema)]
        present = [str(k) for k in node.keys()]
        for key in present:
            if key not in names:
                raise PerflabError(no_such_field(f"{path}{key}", schema))
        for name in names:
            if name not in present:
                raise PerflabError(cannot_delete(f"{path}{name}"))
    for child_key, child in node.items_ex(resolve=False):
        if isinstance(child, DictConfig):
            check_keys(child, f"{path}{child_key!s}.")


def no_such_field(key: str, schema: Any) -> str:
    """One line for a key that a typed node lacks: the fields it has, and the nearest."""
    parent, _, name = key.rpartition(".")
    names = [f.name for f in dataclasses.fields(schema)]
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.8)
    hint = f" (did you mean {parent + '.' if parent else ''}{near[0]}?)" if near else ""
    where = parent or "perflab's config"
    return f"{key}: no such config field{hint}; allowed: the fields of {where}: {', '.join(names)}"


def cannot_delete(key: str) -> str:
    return (
        f"~{key}: a field of perflab's config cannot be deleted; "
        f"allowed: set it instead, e.g. {key}=VALUE"
    )


def _raw_value(cfg: DictConfig, key: str) -> Any:
    """The value at ``key`` as written (an interpolation stays unresolved)."""
    node: Any = OmegaConf.to_container(cfg, resolve=False)
    for part in re.findall(r"[^.\[\]]+", key):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


# where @hydra.main finds perflab's configs, and so its config groups
CONFIG_PATH = "pkg://perflab.conf"


def one_line(exc: BaseException) -> str:
    """Hydra and OmegaConf errors span several lines; say the same on one."""
    cause: BaseException | None = exc
    while cause is not None:  # a resolver of perflab's raised it: its message is the one
        if isinstance(cause, PerflabError):
            return str(cause)
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and exc.options:
        options = ", ".join(o for o in exc.options if not o.endswith("_schema"))
        group, _, name = exc.missing_cfg_file.rpartition("/")
        return f"{group}={name}: no such option; allowed: {options}"
    if isinstance(exc, OverrideParseException):
        return _parse_error(exc)
    if isinstance(exc, InterpolationResolutionError) and exc.full_key:
        return _unresolved(exc)
    text, cause = str(exc), exc.__cause__
    unknown = re.search(
        r"Could not override '(\S+)'\.\s+To append to your config use \+(\S+)", text
    )
    if unknown:
        return _cannot_override(unknown.group(1), unknown.group(2), cause)
    merging = re.search(r"override (\S+)", text)
    if merging and isinstance(cause, OmegaConfBaseException):
        override = merging.group(1)
        if override.startswith("~") and "does not support deletion" in str(cause):
            return cannot_delete(override[1:].partition("=")[0])
        kind = _field_type(cause)
        allowed = f"; allowed: {kind}" if kind else ""
        return f"{override}: {joined_lines(str(cause)).rstrip('.')}{allowed}"
    return joined_lines(text)


# Hydra's output directories: resolved by Hydra itself, after perflab's config was checked
OUTPUT_DIRS = ("hydra.run.dir", "hydra.sweep.dir")


def _unresolved(exc: InterpolationResolutionError) -> str:
    """An interpolation that does not resolve where perflab's own check cannot see it, e.g.
    hydra.sweep.dir='${oc.env:NOPE}/x': the field, the value as written, what is allowed."""
    key = str(exc.full_key)
    kind = "a directory path" if key in OUTPUT_DIRS else _field_type(exc)
    allowed = (
        f"{kind or 'a value of the field type'}, or an interpolation ${{...}} resolving to one"
    )
    return str(ConfigError(key, _written(exc), allowed, joined_lines(str(exc))))


def _written(exc: OmegaConfBaseException) -> Any:
    """The value at an OmegaConf error's key as written, its interpolations unresolved:
    the node itself, or the key looked up in the node that holds it (the whole config)."""
    child = getattr(exc, "child_node", None)
    if child is not None:
        return child._value()
    try:
        return _raw_value(exc.parent_node, str(exc.full_key))
    except (KeyError, IndexError, TypeError, ValueError):
        return "?"


def _field_type(exc: BaseException) -> str | None:
    """The type the schema declares for the key an OmegaConf error is about, as written
    in perflab/config.py (int, list[int], bool | None); a typed node: its fields."""
    schema, key = getattr(exc, "object_type", None), getattr(exc, "key", None)
    if schema is list:  # an element of a typed list, e.g. model.input.shape[0]
        element = typing.get_args(getattr(exc, "ref_type", None))
        name = getattr(element[0], "__name__", None) if element else None
        return f"list[{name}]" if name else None
    if not dataclasses.is_dataclass(schema):
        return None
    declared = next((f.type for f in dataclasses.fields(schema) if f.name == key), None)
    if declared is None:
        return None
    if dataclasses.is_dataclass(getattr(config_module, str(declared), None)):
        path = getattr(exc, "full_key", key)
        return f"the fields of {path}, set one by one: {path}.NAME=VALUE"
    return str(declared)


def _cannot_override(key: str, override: str, cause: BaseException | None) -> str:
    """KEY=VALUE on a key that is not there: the key the config lacks (for a dict value,
    a key inside it) is the cause's full_key; a free-form dict takes it with +."""
    full_key = str(getattr(cause, "full_key", "") or key)
    schema = getattr(cause, "object_type", None)
    if schema is not None and dataclasses.is_dataclass(schema):
        return no_such_field(full_key, schema)
    return f"{full_key}: not in this free-form dict yet; allowed: any key, added with +{override}"


# Hydra's override grammar, for the one line about an override it cannot parse
GRAMMAR_URL = "https://hydra.cc/docs/1.2/advanced/override_grammar/basic"


def _parse_error(exc: OverrideParseException) -> str:
    lines = [line.strip() for line in exc.message.splitlines()]
    lexer = "LexerNoViableAltException: "
    caret = re.search(r"\n( *)\^\n", exc.message)  # a caret under the override
    if exc.message.startswith(lexer) and caret:
        column = len(caret.group(1)) - len(lexer)
        where = exc.override[column : column + 1]
        detail = f"unexpected character {where!r} at position {column + 1}"
    else:
        skip = (f"Error parsing override '{exc.override}'", "See https://")
        detail = " ".join(line for line in lines if line and not line.startswith(skip))
    return (
        f"{format_value(exc.override)}: not a valid override ({detail}); allowed: KEY=VALUE, "
        f"with a value that holds spaces or special characters quoted, e.g. KEY='a b' "
        f"({GRAMMAR_URL})"
    )


def joined_lines(text: str) -> str:
    """A Hydra or OmegaConf message on one line, whole: its lines joined (a blocklisted
    target's reason spans four), less the lines that locate the key in OmegaConf's terms."""
    skip = ("full_key:", "object_type=", "reference_type=")
    keep = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(line for line in keep if not line.startswith(skip))


def instantiation_problem(exc: Exception) -> str:
    """What hydra.utils.instantiate raised, on one line and whole (its first line alone once
    cut a blocklisted target's reason off after "because it allows"), minus its advice
    about HYDRA_FULL_ERROR, plus the real cause."""
    text = joined_lines(str(exc).split(", set env var HYDRA_FULL_ERROR")[0])
    cause = exc.__cause__
    if cause is not None:
        text += f" ({type(cause).__name__}: {joined_lines(str(cause))})"
    return text


def check_overrides(argv: list[str]) -> None:
    """Refuse, in one line, the overrides Hydra 1.3 crashes on with a ValueError or
    TypeError traceback: a config group given a number, boolean or null (model=3,
    model=[mlp,3], ~model=3, and in a sweep -m model=mlp,3) and an override without a key
    (=3). Also an interval sweep, which Hydra's sweeper refuses without naming it.
    Everything else is left to Hydra, which reports it through one_line."""
    from hydra._internal.config_repository import ConfigRepository
    from hydra._internal.utils import create_config_search_path, get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser

    # Hydra's own argument parser, raising instead of printing its usage over many lines
    arguments = get_args_parser()
    arguments.exit_on_error = False
    allowed = "allowed: KEY=VALUE overrides and the options `perflab --help` lists"
    try:
        args, unknown = arguments.parse_known_args(argv)
    except argparse.ArgumentError as exc:
        raise PerflabError(f"{exc}; {allowed}") from exc
    if unknown:
        raise PerflabError(f"{' '.join(unknown)}: unrecognized arguments; {allowed}")
    parser = OverridesParser.create()
    repo = ConfigRepository(create_config_search_path(CONFIG_PATH))
    for line in args.overrides:
        try:
            [override] = parser.parse_overrides([line])
        except OverrideParseException:
            continue  # Hydra raises it again, and one_line says it
        group = override.key_or_group
        if group == "hydra.run.dir" and not args.multirun:
            _check_run_dir(override.value())
        if not group:
            raise PerflabError(f"{line}: no key; allowed: KEY=VALUE, e.g. batch_size=64")
        if args.multirun and override.is_interval_sweep():
            raise PerflabError(
                f"{line}: interval sweeps have no values to run; allowed: a list of values "
                f"({group}=a,b,c) or a range ({group}=range(START,STOP,STEP))"
            )
        if not repo.group_exists(group):
            continue
        bad = [v for v in _options(override) if not isinstance(v, str)]
        if bad:
            options = [o for o in repo.get_group_options(group) if not o.endswith("_schema")]
            raise PerflabError(
                f"{line}: {group} is a config group and takes an option name, not "
                f"{'null' if bad[0] is None else format_value(bad[0])}; "
                f"allowed: {', '.join(options)}"
            )


def _check_run_dir(value: Any) -> None:
    """A single run's directory, given on the command line, checked before Hydra creates
    it and writes its .hydra and log files there (a sweep's is checked by perflab's
    launcher, which Hydra sets up before it touches the sweep directory). The default,
    outputs/DATE/TIME, is always new."""
    if isinstance(value, str) and "${" not in value:
        check_output_dir(value, "hydra.run.dir", RUN_MARKERS)


def _options(override: Any) -> list[Any]:
    """The option names a group override selects (quoted ones as plain strings)."""
    from hydra.core.override_parser.types import Glob, QuotedString

    value = override.value()
    if override.is_sweep_override():
        if not override.is_discrete_sweep() or isinstance(value, Glob):
            return []  # interval sweeps fail in Hydra with one line; globs are names
        value = list(override.sweep_iterator())
    elif isinstance(value, dict) or (value is None and override.is_delete()):
        return []  # a dict sets fields, not the option; ~model deletes whatever is there
    values = value if isinstance(value, list) else [value]
    flat = [v for item in values for v in (item if isinstance(item, list) else [item])]
    return [v.text if isinstance(v, QuotedString) else v for v in flat]
