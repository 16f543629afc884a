"""Bad input everywhere: generated invalid overrides, config values and perflab-report
arguments must each end in exit code 2 and one line on stderr that names the field (or
the override), never a traceback, and nothing may be measured.

The entry points run in this process (a subprocess costs an interpreter start per
example): perflab.cli.main with a patched sys.argv, and perflab.report.cli.main. What
would measure is replaced by stubs. A single run's stub first does in this process what
a trial process does before measuring (resolve the settings on this machine, bind the
model and dataset factories: trial.check_settings, the checks a sweep runs on every
variant before its first round); an input that passes them too would have been measured,
and the example fails as "not rejected" rather than running a trial.

Values come from the schema: every field of the dataclasses in perflab/config/schema.py gets
junk of the wrong type for its declared type, so a new field is fuzzed without touching
this file; a field of a type this file has no junk for fails test_every_field_is_fuzzed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import math
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hydra.core.global_hydra import GlobalHydra
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from sweeps import make_sweep

from perflab import cli, exits
from perflab.config import bounds, rules, vocabulary
from perflab.config import schema as config
from perflab.errors import ConfigError, PerflabError, format_value, printable
from perflab.experiment import runner
from perflab.formats.trial_parts import Invocation
from perflab.measure import resolve
from perflab.measure import sizes as size_rules

# Device-agnostic: the inputs are what a user types, device=auto included, and each must be
# refused the same way on any machine (the whole file passed on the H100 as it does here).
pytestmark = pytest.mark.device_agnostic

# Deterministic and database-free: CI sees the same examples on every run, and a failure
# reproduces from the test alone. Budgets keep this file well under a minute on 2 cores.
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class NotRejected(Exception):
    """The input reached what would measure: validation let it through."""


# --- running the commands in this process -----------------------------------------------


@dataclasses.dataclass
class Result:
    code: Any  # the exit code, or why there was none
    stderr: str


def _checked(request: Any) -> list[str]:
    """trial.check_settings, with a ConfigError turned into what the parent raises when
    a trial process reports one (request.run_in_process, schedule.check_all)."""
    from perflab.measure.preflight import check_settings

    try:
        return check_settings(request)
    except ConfigError as exc:
        raise PerflabError(str(exc)) from exc


def _single_trial(
    cfg: config.PerflabConfig, config_dict: dict[str, Any], job_dir: Path, choices: Any
) -> Path:
    from perflab.process.trial_request import TrialRequest

    invocation = Invocation(argv=list(sys.argv), cwd=str(Path.cwd()))
    _checked(TrialRequest(cfg, config_dict, "", invocation, choices=choices))
    raise NotRejected("a trial would have run")


def _sweep_checks(runs: dict[str, Any]) -> dict[str, list[str]]:
    return {name: _checked(run.request) for name, run in runs.items()}


def _measured(*args: Any, **kwargs: Any) -> Any:
    raise NotRejected("the sweep would have measured")


def run_perflab(
    args: Sequence[str], workdir: Path, single_run: Callable[..., Path] = _single_trial
) -> Result:
    """``perflab ARGS`` in this process, with every path to a measurement stubbed
    (``single_run``: what stands for a single run's trial)."""
    stderr = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level  # Hydra configures logging per run
    GlobalHydra.instance().clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(workdir)
        mp.setenv("HYDRA_FULL_ERROR", "1")
        mp.setattr(sys, "argv", ["perflab", *args])
        mp.setattr(sys, "path", list(sys.path))  # check_settings adds the working dir
        mp.setattr(exits, "_pending", [])
        mp.setattr(cli, "run_single", single_run)
        mp.setattr(runner, "check_all", _sweep_checks)
        mp.setattr(runner, "run_experiment", _measured)
        mp.setattr("perflab.experiment.scaleout.launch_groups", _measured)
        try:
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                cli.main()
            code: Any = 0
        except SystemExit as exc:
            code = exc.code
        except NotRejected as exc:
            code = f"not rejected ({exc})"
        finally:
            GlobalHydra.instance().clear()
            root.handlers[:] = handlers
            root.setLevel(level)
    return Result(code, stderr.getvalue())


def run_report(args: Sequence[str]) -> Result:
    from perflab.report.cli import main

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            main(list(args))
        code: Any = 0
    except SystemExit as exc:
        code = exc.code
    return Result(code, stderr.getvalue())


def assert_one_line(result: Result, args: Sequence[str], prog: str, names: Sequence[str]) -> None:
    """Exit 2; stderr is exactly one line, perflab's error, naming one of ``names``."""
    shown = " ".join(args)
    assert result.code == 2, f"{prog} {shown}: exit {result.code}; stderr: {result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"{prog} {shown}: {len(lines)} lines:\n{result.stderr}"
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    wanted = [printable(n) for n in names if n]
    assert any(n in lines[0] for n in wanted), f"{lines[0]!r} names none of {wanted}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def no_trials(workdir: Path) -> None:
    """No record where a run (outputs/DAY/TIME) or a sweep (multirun/DAY/TIME/VARIANT)
    writes its trials."""
    written = [*workdir.glob("outputs/*/*/trials/*"), *workdir.glob("multirun/*/*/*/trials/*")]
    assert not written, f"trial records were written: {written}"


# --- the schema ----------------------------------------------------------------------------

# String fields with a fixed vocabulary, and the constant in perflab/config/schema.py that holds it
ENUMS: dict[str, tuple[str, ...]] = {
    "mode": vocabulary.MODES,
    "device": vocabulary.DEVICES,
    "amp": vocabulary.AMP_VALUES,
    "compile": vocabulary.COMPILE_VALUES,
    "fused": vocabulary.FUSED_VALUES,
    "matmul_precision": vocabulary.MATMUL_PRECISIONS,
    "optimizer": vocabulary.OPTIMIZERS,
    "data.source": vocabulary.DATA_SOURCES,
    "schedule.metric": vocabulary.METRICS,
    "schedule.isolation": vocabulary.ISOLATIONS,
    "model.input.dtype": vocabulary.INPUT_DTYPES,
    "model.target.kind": vocabulary.TARGET_KINDS,
    "scaleout.executor": vocabulary.EXECUTORS,
    # model=hf (model.input.task follows model.task, another value is refused)
    "model.task": vocabulary.HF_TASKS,
    "model.attn": vocabulary.HF_ATTENTION,
    "model.input.task": vocabulary.HF_TASKS,
}
# String fields naming a factory "module.function"
FACTORIES = {"model._target_", "data.dataset", "data.collate", "step", "model.fn", "model.inputs"}
# String fields with a small grammar of their own (perflab.workloads.outputs): what is not
# junk. model.output: a field name or a position; model.loss: a choice or a factory path.
SELECTORS: dict[str, Callable[[str], bool]] = {
    "model.output": lambda s: s.isidentifier() or s.lstrip("-").isdigit(),
    "model.loss": lambda s: s in rules.LOSS_CHOICES or bool(FACTORY_PATH.fullmatch(s)),
}
# String fields where any text is a value (only a wrong type is junk)
FREE_TEXT = {
    "schedule.label",
    "report.dir",
    "scaleout.slurm.partition",
    "scaleout.slurm.account",
    "scaleout.slurm.qos",
    "scaleout.slurm.constraint",
    # a path: any text parses; a missing or unsafe file is refused (tests/test_workloads.py)
    "model.checkpoint",
    # model=hf: an architecture transformers does not know is refused by the settings
    # check, a directory without config.json when the config is validated (tests/test_hf.py)
    "model.arch",
    "model.path",
}
# Built-in models: their fields are fuzzed under model=NAME (custom needs a factory first,
# function a function: model.fn has no default)
MODELS = [name for name in config.MODEL_SCHEMAS if name not in ("custom", "function")]


@dataclasses.dataclass(frozen=True)
class Field:
    path: str  # model.input.shape
    kind: str  # the annotation as written in perflab/config/schema.py: int, str | None, list[int]
    base: tuple[str, ...] = ()  # overrides that make the field exist (model=mlp)


def schema_fields(cls: Any, prefix: str = "", base: tuple[str, ...] = ()) -> list[Field]:
    """Every leaf field of a config dataclass, walking into nested config dataclasses."""
    found = []
    for f in dataclasses.fields(cls):
        nested = getattr(config, str(f.type), None)
        if dataclasses.is_dataclass(nested):
            found += schema_fields(nested, f"{prefix}{f.name}.", base)
        elif not (cls is config.PerflabConfig and f.name == "model"):  # a config group
            found.append(Field(f"{prefix}{f.name}", str(f.type), base))
    return found


FIELDS = schema_fields(config.PerflabConfig) + [
    f
    for name in MODELS
    for f in schema_fields(config.MODEL_SCHEMAS[name], "model.", (f"model={name}",))
]
FIELD_PATHS = {f.path for f in FIELDS}
# typed nodes: trial, model.input, scaleout.slurm, ...
NODES = {p.rsplit(".", i)[0] for p in FIELD_PATHS for i in range(1, p.count(".") + 1)}
GROUPS = {"model", "data", "preset", "experiment", "hydra"}


def is_known_key(key: str) -> bool:
    """A field, a node or a config group (and Hydra's own settings): a generated key
    that is none of these is an unknown key."""
    key = key.lstrip("+~").strip()
    known = key in FIELD_PATHS or key in NODES or key.split("@")[0] in GROUPS
    return known or key.startswith("hydra")


# --- junk values, written as they are on the command line -----------------------------------

# text a user could pass in argv (no NUL), short or very long, any script
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30) | st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"), min_size=500, max_size=3000
)
# inside '...' Hydra treats \ and ' specially and still resolves ${...}: leave them out
QUOTABLE = st.text(st.characters(codec="utf-8", exclude_characters="\x00'\\$"), max_size=40)
WORD = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
FRACTIONAL = st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not x.is_integer())
BOOLISH = {"yes", "y", "on", "true", "no", "n", "off", "false"}
FACTORY_PATH = re.compile(r"[^\W\d]\w*(\.[^\W\d]\w*)+")


def _parses(convert: Callable[[str], Any], text: str) -> bool:
    try:
        convert(text)
    except (ValueError, OverflowError):
        return False
    return True


def quoted(keep: Callable[[str], bool] = lambda s: True) -> st.SearchStrategy[str]:
    return QUOTABLE.filter(keep).map(lambda s: f"'{s}'")


def not_int(s: str) -> bool:
    return not _parses(int, s)


def not_finite_float(s: str) -> bool:
    return not _parses(float, s) or not math.isfinite(float(s))


def not_bool(s: str) -> bool:
    return not_int(s) and s.lower() not in BOOLISH


def junk_for(field: Field) -> st.SearchStrategy[str]:
    """Values of the wrong type (or outside the vocabulary) for ``field``."""
    kind, optional = field.kind.removesuffix(" | None"), field.kind.endswith(" | None")
    null = [] if optional else ["null"]
    if field.path in ENUMS:
        allowed = set(ENUMS[field.path])
        outside = lambda s: s.strip().lower() not in allowed  # noqa: E731
        return st.one_of(
            quoted(outside),
            WORD.filter(lambda w: outside(w) and w.lower() not in {"true", "false", "null"}),
            st.sampled_from(["[a]", "{a:1}", *null]),
        )
    if field.path in SELECTORS:
        valid = SELECTORS[field.path]
        return st.one_of(
            quoted(lambda s: not valid(s)),
            st.sampled_from(["a..b", ".x", "1.2", "[a.b]", "{a:1}", *null]),
        )
    if field.path in FACTORIES:
        return st.one_of(
            quoted(lambda s: not FACTORY_PATH.fullmatch(s)),
            st.sampled_from(["x", "a..b", ".x", "x.", "1.2", "[a.b]", "{a:1}", *null]),
        )
    table: dict[str, Callable[[], st.SearchStrategy[str]]] = {
        "int": lambda: st.one_of(
            quoted(not_int),
            FRACTIONAL.map(repr),
            WORD,  # a string, a boolean, null, nan or inf: never an int
            st.sampled_from(["[1]", "{a:1}", "1.0", "true", *null]),
        ),
        "float": lambda: st.one_of(
            quoted(not_finite_float),
            WORD,  # every word is text, a boolean, null, nan or inf
            st.sampled_from(["inf", "-inf", "nan", "1e400", "-1e400", "[1.5]", "{a:1}"]),
        ),
        "bool": lambda: st.one_of(
            quoted(not_bool),
            WORD.filter(lambda w: not_bool(w) and (optional or w.lower() != "null")),
            FRACTIONAL.map(repr),
            st.sampled_from(["[true]", "{a:1}", *null]),
        ),
        "str": lambda: st.sampled_from(["[a]", "{a:1}", "[1,2]", *null]),
        "list[int]": lambda: st.one_of(
            quoted(),
            WORD,
            st.sampled_from(["[a]", "[1.5]", "[true]", "[null]", "[[1]]", "{a:1}", "3", *null]),
        ),
        "list[str]": lambda: st.sampled_from(["3", "abc", "1.5", "{a:1}", *null]),
        "dict[str, Any]": lambda: st.sampled_from(["3", "abc", "1.5", "true", "[1]", *null]),
    }
    if kind not in table:
        raise KeyError(f"{field.path}: no junk for type {field.kind}")
    return table[kind]()


def out_of_range() -> st.SearchStrategy[list[str]]:
    """Values of the right type that the rules in perflab/config/schema.py refuse."""

    def ints(key: str, below: int, *base: str) -> st.SearchStrategy[list[str]]:
        return st.integers(max_value=below - 1).map(lambda v: [*base, f"{key}={v}"])

    def floats(key: str, keep: Callable[[float], bool]) -> st.SearchStrategy[list[str]]:
        values = st.floats(allow_nan=False, allow_infinity=False, width=32).filter(keep)
        return values.map(lambda v: [f"{key}={v!r}"])

    minimums = {
        "batch_size": 1,
        "num_workers": 0,
        "threads": 1,
        "seed": 0,
        "data.num_samples": 1,
        "data.augment_passes": 0,
        "trial.warmup_steps": 0,
        "trial.min_steps": 1,
        "schedule.min_rounds": 2,
        "schedule.trials_per_worker": 1,
        "profiling.wait": 0,
        "profiling.warmup": 0,
        "profiling.active": 1,
        "scaleout.max_parallel": 1,
    }
    positive = ["lr", "trial.max_s", "trial.timeout_s", "schedule.target_half_width"]
    positive += ["schedule.time_budget_s", "profiling.max_trace_mb"]
    non_negative = ["trial.warmup_s", "trial.min_s", "trial.min_event_window_us"]
    non_negative += ["trial.telemetry_interval_ms", "trial.max_memory_mb", "trial.max_log_mb"]
    model_sizes = [
        st.just(f"model={name}").flatmap(lambda base, f=f: ints(f.path, 1, base))
        for name in MODELS
        for f in schema_fields(config.MODEL_SCHEMAS[name], "model.")
        if f.kind == "int" and f.path.count(".") == 1 and f.path != "model.num_classes"
    ]
    return st.one_of(
        *[ints(key, low) for key, low in minimums.items()],
        *[floats(key, lambda v: v <= 0) for key in positive],
        *[floats(key, lambda v: v < 0) for key in non_negative],
        *model_sizes,
        floats("schedule.confidence", lambda v: not 0.5 < v < 1),
        floats("schedule.delta", lambda v: not 0 <= v < 0.5),
        st.integers(min_value=2**64).map(lambda v: [f"seed={v}"]),
        st.integers(min_value=1, max_value=2).map(lambda v: [f"trial.max_steps={v}"]),
        st.floats(min_value=0.01, max_value=0.19).map(lambda v: [f"trial.max_s={v!r}"]),
        st.lists(st.integers(max_value=0), min_size=1, max_size=4).map(
            lambda dims: [f"model.input.shape={dims}".replace(" ", "")]
        ),
        st.sampled_from(
            [
                ["model.input.shape=[]"],
                ["model.target.num_classes=0"],
                ["model=transformer", "model.heads=3"],
                ["model=transformer", "model.input.high=0"],
                ["model=mlp", "channels_last=true"],
                ["model=spin", "channels_last=true"],
                ["data=memory", "num_workers=1"],
                ["model=mlp", "model.num_classes=0"],
            ]
        ),
    )


# Inputs that once crashed or misled (and their kin): fixed, so every run has them
CURATED: list[list[str]] = [
    ["batch_size=-3"],
    ["batch_size=abc"],
    ["amp=maybe"],
    ["compile=fast"],
    ["threads=0"],
    ["trial.min_steps=0"],
    ["schedule.confidence=1.5"],
    ["device=tpu"],
    ["model=nosuch"],
    ["data.source=x"],
    ["data.dataset=x"],
    ["nosuch=1"],
    ["+nosuch=1"],
    ["++nosuch=1"],
    ["+model.args.x=1"],
    ["model=mlp", "+model.args.x=1"],
    ["model.args.x=1"],
    ["~seed"],
    ["~trial"],
    ["~data.num_samples"],
    ["~model"],
    ["~model=3"],
    ["batch_size"],
    ["=3"],
    ["=abc"],
    ["="],
    ["a..b=1"],
    ["batch_size=[1,2"],
    ["batch_size=1,2"],
    ["batch_size=range(1,3)"],
    [" batch_size=3"],
    ["x=${"],
    ["a=b=c"],
    ["mode=é"],
    ["mode=a\nb"],
    ["mode='a\nb'"],
    [""],
    ["model._target_=os.system"],
    ["model=custom", "model._target_=os.system"],
    ["model=custom", "model._target_=nosuch_module.build"],
    ["data.dataset=nosuch_module.build"],
    ["data.collate=x"],
    ["data.collate=nosuch_module.pad"],
    ["+schedule.evidence={seed:x}"],
    ["+schedule.evidence={seed:[a.b]}"],
    ["+schedule.evidence={nosuch:a.b}"],
    ["+schedule.evidence={seed:nosuch_module.check}"],
    ["model=custom"],
    ["model=3"],
    ["model=null"],
    ["model=[mlp,3]"],
    ["+experiment=3"],
    ["+experiment=nosuch"],
    ["data=1.5"],
    ["preset=true"],
    ["hydra/launcher=3"],
    ["model={a:1}"],
    ["trial=3"],
    ["schedule.treatments={a:1}"],
    ["batch_size=${nosuch}"],
    ["batch_size=${oc.env:PERFLAB_FUZZ_UNSET}"],
    ["batch_size=${batch_size}"],
    ["model.input.shape=[1,'${nosuch}']"],
    ["lr=inf"],
    ["seed=18446744073709551616"],
    # accepted once, each failed late: a profiling trial grew to 6 GiB, every trial ran
    # into its timeout, OverflowError after the sweep had started, every trial failed
    ["profiling.active=100000000000000000000"],
    ["data.augment_passes=100000000000000000000"],
    ["trial.timeout_s=1e20"],
    ["schedule.settle_s=1e20"],
    ["threads=100000000000000000000"],
    # accepted once: the batch grew a trial's memory at ~23 MB/s, the workers set off the
    # OOM killer (refused on any machine with fewer than 250 cores)
    ["batch_size=1000000000000"],
    ["num_workers=1000"],
    ["num_workers=1000", "allow_unwise=true"],
    ["--nosuch"],
    ["--cfg=bad"],
    ["--cfg"],
    ["--config-name=nosuch"],
]


def too_large() -> st.SearchStrategy[list[str]]:
    """Right-typed values above a numeric field's upper bound (perflab/config/bounds.py),
    from just above it to absurd, for every int, float and shape field of the schema."""

    def above(f: Field) -> st.SearchStrategy[list[str]]:
        bound, kind = bounds.MAXIMA[f.path], f.kind.removesuffix(" | None")
        if kind == "float":
            # an inclusive bound is allowed itself; an exclusive one (confidence < 1) is not
            limit = float(bound.limit)
            values = st.floats(limit, 1e300, exclude_min=bound.inclusive).map(repr)
        else:
            low = int(bound.limit) + (1 if bound.inclusive else 0)
            values = st.one_of(st.integers(low, low + 10), st.integers(low, 10**30)).map(str)
        if kind == "list[int]":
            values = values.map(lambda v: f"[1,{v}]")
        return values.map(lambda v: [*f.base, f"{f.path}={v}"])

    numeric = [f for f in FIELDS if f.kind.removesuffix(" | None") in ("int", "float", "list[int]")]
    return st.sampled_from(numeric).flatmap(above)


def unknown_keys() -> st.SearchStrategy[list[str]]:
    nodes = ["", "trial.", "schedule.", "data.", "profiling.", "report.", "model."]
    return (
        st.tuples(st.sampled_from(["", "+", "++"]), st.sampled_from(nodes), WORD)
        .filter(lambda t: not is_known_key(t[1] + t[2]))
        .map(lambda t: [f"{t[0]}{t[1]}{t[2]}=1"])
    )


def malformed() -> st.SearchStrategy[list[str]]:
    """Arguments that are not KEY=VALUE for a known key: no '=', or an unknown key."""
    no_equals = TEXT.filter(lambda t: "=" not in t and not t.startswith("-"))
    odd_key = st.tuples(TEXT, TEXT).filter(
        lambda t: not t[0].startswith("-") and not is_known_key(t[0])
    )
    return st.one_of(no_equals.map(lambda t: [t]), odd_key.map(lambda t: [f"{t[0]}={t[1]}"]))


def wrong_type() -> st.SearchStrategy[tuple[Field, list[str]]]:
    return st.sampled_from(FIELDS).flatmap(
        lambda f: junk_for(f).map(lambda v: (f, [*f.base, f"{f.path}={v}"]))
    )


def names_of(args: Sequence[str]) -> list[str]:
    """What a good message may name: the argument as typed (or without its +/~), its
    key, or the part of the key that does not exist (model.args for +model.args.x=1 on a
    model without args); a config group only as group= or group.*, not its bare name."""
    names, derived = [format_value(arg) for arg in args], []
    for arg in args:
        if arg.startswith("model=") and len(args) > 1:
            continue  # the base of a model-specific case, not what is wrong
        bare = arg.lstrip("+~")
        key, _, value = bare.partition("=")
        parts = key.split(".")
        derived += [arg, bare, f"{parts[0]}=", f"{parts[0]}."]
        derived += [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
        if arg.startswith("-") and value:
            derived.append(value)  # a flag's value: --config-name=nosuch
    return names + [n for n in derived if n.strip("=.") and n not in GROUPS]


# --- the tests -------------------------------------------------------------------------------


def test_every_field_is_fuzzed():
    """A new field gets junk of its type automatically; a new type, or a string field
    not classified here, fails this test instead of going unfuzzed."""
    strings = {f.path for f in FIELDS if f.kind.removesuffix(" | None") == "str"} - ENUMS.keys()
    known = FACTORIES | FREE_TEXT | SELECTORS.keys()
    assert strings <= known, f"classify: {sorted(strings - known)}"
    for f in FIELDS:
        junk_for(f)  # raises for a type with no junk
    assert {"batch_size", "trial.min_steps", "model.input.shape", "model.heads"} <= FIELD_PATHS


@pytest.mark.parametrize("args", CURATED, ids=[" ".join(a) or "''" for a in CURATED])
def test_curated_bad_input(workdir, args):
    assert_one_line(run_perflab(args, workdir), args, "perflab", names_of(args))
    no_trials(workdir)


@pytest.mark.heavy
@pytest.mark.slow
@settings(FUZZ, max_examples=60)
@given(case=wrong_type())
def test_wrong_types_from_the_schema(workdir, case):
    field, args = case
    note(f"field {field.path}: {field.kind}")
    assert_one_line(run_perflab(args, workdir), args, "perflab", [field.path, args[-1]])
    no_trials(workdir)


@pytest.mark.heavy
@pytest.mark.slow
@settings(FUZZ, max_examples=40)
@given(args=out_of_range())
def test_values_out_of_range(workdir, args):
    assert_one_line(run_perflab(args, workdir), args, "perflab", names_of(args))
    no_trials(workdir)


@pytest.mark.heavy
@pytest.mark.slow
@settings(FUZZ, max_examples=40)
@given(args=too_large())
def test_values_above_their_upper_bounds(workdir, args):
    assert_one_line(run_perflab(args, workdir), args, "perflab", names_of(args))
    no_trials(workdir)


@pytest.mark.slow  # about 5 s: out of the quick loop
@settings(FUZZ, max_examples=40)
@given(args=st.one_of(unknown_keys(), malformed()))
def test_unknown_keys_and_malformed_overrides(workdir, args):
    assert_one_line(run_perflab(args, workdir), args, "perflab", names_of(args))
    no_trials(workdir)


# Keys a sweep varies, with values that are valid for them
SWEEPS = {
    "batch_size": ["1", "2"],
    "amp": ["off", "bf16"],
    "lr": ["0.1", "0.01"],
    "mode": ["train", "infer"],
    "optimizer": ["sgd", "adamw"],
    "trial.min_steps": ["5", "6"],
}
SIMPLE = re.compile(r"[^,\[\]{}()'\"\s=]+")


def bad_sweeps() -> st.SearchStrategy[list[str]]:
    """-m KEY=a,BAD,b: one invalid value among valid ones; or a valid sweep beside an
    invalid plain override. Hydra's launcher composes every job before measuring."""
    by_key = {f.path: f for f in FIELDS}

    def one_bad(key: str) -> st.SearchStrategy[list[str]]:
        bad = junk_for(by_key[key]).filter(SIMPLE.fullmatch)
        return st.tuples(bad, st.integers(0, 2)).map(
            lambda t: [
                "-m",
                f"{key}=" + ",".join([*SWEEPS[key][: t[1]], t[0], *SWEEPS[key][t[1] :]]),
            ]
        )

    beside = st.tuples(
        st.sampled_from(sorted(SWEEPS)), st.one_of(wrong_type().map(lambda t: t[1]), out_of_range())
    ).filter(lambda t: not any(a.startswith(f"{t[0]}=") for a in t[1]))
    return st.one_of(
        st.sampled_from(sorted(SWEEPS)).flatmap(one_bad),
        beside.map(
            lambda t: [
                "-m",
                f"{t[0]}={','.join(SWEEPS[t[0]])}",
                *t[1],
            ]
        ),
        st.sampled_from(
            [
                ["-m", "model=mlp,3"],
                ["-m", "model=mlp,nosuch"],
                ["-m", "batch_size=1,2", "+nosuch=1"],
                ["-m", "batch_size=1,2", "~seed"],
                ["-m", "batch_size=1,${nosuch}"],
                ["-m", "batch_size=interval(1,2)"],
                ["-m", "batch_size=1,2", "schedule.confidence=0.9,0.95"],
            ]
        ),
    )


@pytest.mark.heavy
@pytest.mark.slow
@settings(FUZZ, max_examples=16)
@given(args=bad_sweeps())
def test_sweeps_with_one_bad_value_measure_nothing(workdir, args):
    assert_one_line(run_perflab(args, workdir), args, "perflab", names_of(args[1:]))
    no_trials(workdir)


# --- sizes ---------------------------------------------------------------------------------

# The machine the size limits are checked against here: fixed, so every run sees the same
# answers (the real figures: tests/test_sizes.py)
FUZZ_MACHINE = size_rules.Machine(cores=2, host_available=8 * 2**30, device_free=None)
SIZE_FIELDS = ["batch_size", "num_workers", "model.input.shape", "data.num_samples"]
# built-in models whose input shape follows one of their sizes
SHAPED_BY = [
    ("model=mlp", "model.in_features"),
    ("model=convnet", "model.image_size"),
    ("model=transformer", "model.seq_len"),
]


def size() -> st.SearchStrategy[int]:
    """Small, powers of two, anything up to 10**30: each order of magnitude gets its turn."""
    return st.one_of(
        st.integers(1, 64), st.integers(0, 100).map(lambda k: 2**k), st.integers(1, 10**30)
    )


def sizes() -> st.SearchStrategy[list[str]]:
    """Right-typed, positive sizes: batch_size with num_workers, data.num_samples, the
    input's shape, directly or through a built-in model's size."""
    shape = st.lists(size(), min_size=1, max_size=4).map(lambda d: str(d).replace(" ", ""))
    return st.one_of(
        st.tuples(size(), size().map(lambda w: w - 1)).map(
            lambda t: [f"batch_size={t[0]}", f"num_workers={t[1]}"]
        ),
        size().map(lambda n: [f"data.num_samples={n}"]),
        st.tuples(shape, size()).map(lambda t: [f"model.input.shape={t[0]}", f"batch_size={t[1]}"]),
        st.tuples(st.sampled_from(SHAPED_BY), size(), size()).map(
            lambda t: [t[0][0], f"{t[0][1]}={t[1]}", f"batch_size={t[2]}"]
        ),
    )


def assert_fits(cfg: config.PerflabConfig, machine: size_rules.Machine) -> None:
    """What a run the checks let through may ask of the machine: one batch's input and
    target within its free memory, no more workers than cores (allow_unwise is off), the
    workers' and the sampler's memory within it too."""
    free = machine.host_available or 0
    element = {"float32": 4, "int64": 8}[cfg.model.input.dtype]
    one_batch = cfg.batch_size * (math.prod(cfg.model.input.shape) * element + 8)
    assert one_batch <= free, f"a batch of {one_batch} bytes let through"
    assert cfg.num_workers <= machine.cores
    assert cfg.num_workers * size_rules.WORKER_BYTES <= free
    assert cfg.data.num_samples * 8 <= free  # the sampler's permutation alone


@pytest.mark.slow
@settings(FUZZ, max_examples=30)
@given(args=sizes())
def test_sizes_run_or_are_refused_in_one_line(workdir, args):
    let_through: list[config.PerflabConfig] = []

    def single_run(cfg: config.PerflabConfig, *rest: Any) -> Path:
        let_through.append(cfg)
        return _single_trial(cfg, *rest)

    args = ["device=cpu", *args]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(resolve, "machine_now", lambda device: FUZZ_MACHINE)
        result = run_perflab(args, workdir, single_run)
    if let_through and str(result.code).startswith("not rejected"):
        event("let through")  # pytest --hypothesis-show-statistics counts them
        assert_fits(let_through[0], FUZZ_MACHINE)  # it would run: exit 0 unless it fails
    else:
        event("refused")
        assert_one_line(result, args, "perflab", [*SIZE_FIELDS, *names_of(args)])
    no_trials(workdir)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report")
    make_sweep(root / "sweep")
    (root / "a-file").write_text("not a directory")
    return root


OPTIONS = ["--out", "--against", "--force", "--fail-on", "--help"]


def bad_report_args(root: Path) -> st.SearchStrategy[tuple[list[str], list[str]]]:
    """(arguments, what the one line may name) for perflab-report."""
    sweep_dir, a_file = str(root / "sweep"), str(root / "a-file")

    def junk_experiment(content: bytes) -> str:
        directory = Path(tempfile.mkdtemp(dir=root))
        (directory / "experiment.json").write_bytes(content)
        return str(directory)

    json_junk = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=6,
    ).map(lambda v: json.dumps(v).encode())
    missing = WORD.map(lambda w: str(root / "missing" / w))
    broken = st.one_of(st.binary(max_size=60), json_junk).map(junk_experiment)
    return st.one_of(
        st.one_of(missing, st.just(a_file), broken).map(lambda d: ([d], [d])),
        st.one_of(missing, broken).map(lambda d: ([sweep_dir, "--against", d], [d])),
        TEXT.filter(lambda g: g not in {"slower", "not-faster", "inconclusive", "numerics"})
        .filter(lambda g: g != "unreliable")
        .map(lambda g: ([sweep_dir, "--fail-on", g], ["--fail-on"])),
        WORD.filter(lambda w: not any(o.startswith(f"--{w}") for o in OPTIONS)).map(
            lambda w: ([sweep_dir, f"--{w}"], [f"--{w}"])
        ),
        st.sampled_from([a_file, f"{a_file}/below"]).map(
            lambda out: ([sweep_dir, "--out", out], [out])
        ),
        st.just(([], ["sweep_dir"])),
        st.just(([sweep_dir, "--fail-on"], ["--fail-on"])),
    )


@pytest.mark.slow
@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_report_bad_arguments(sweep, data):
    args, names = data.draw(bad_report_args(sweep))
    assert_one_line(run_report(args), args, "perflab-report", names)
    assert not (sweep / "sweep" / "report.md").exists()
