"""Upper bounds and one-line refusals of what used to fail late.

Every numeric config field has an upper bound (perflab/config/bounds.py's MAXIMA): a value
above it is refused in one line, exit 2, when the config is validated, before a sweep
starts or a trial runs. Also here: an interpolation in Hydra's output directories that
does not resolve, Hydra's multi-line blocklist message kept whole, and a single run's
broken dataset factory refused (exit 2) as a sweep refuses it.

Every perflab command below passes device=cpu; all but the single-run factory tests are
refusals that run no trial.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from pathlib import Path

import console_scripts
import pytest

from perflab.config import schema
from perflab.config.bounds import MAXIMA
from perflab.errors import ConfigError, format_value

REPO = Path(__file__).resolve().parent.parent

# The inputs of the hostile pass: each once passed validation and failed late
ISSUE_INPUTS = [
    "profiling.active=100000000000000000000",  # grew the profiling trial to 6 GiB
    "data.augment_passes=100000000000000000000",  # every trial ran into its timeout
    "trial.timeout_s=1e20",  # OverflowError after the sweep had started
    "schedule.settle_s=1e20",  # OverflowError after the sweep had started
    "threads=100000000000000000000",  # every trial failed
]


# --- the table against the schema -------------------------------------------------------


def numeric_fields(cls: type, prefix: str = "") -> dict[str, str]:
    """Every int, float and list[int] field of a config dataclass, by its path."""
    found = {}
    for f in dataclasses.fields(cls):
        nested = getattr(schema, str(f.type), None)
        if dataclasses.is_dataclass(nested):
            found.update(numeric_fields(nested, f"{prefix}{f.name}."))
        elif str(f.type).removesuffix(" | None") in ("int", "float", "list[int]"):
            found[f"{prefix}{f.name}"] = str(f.type)
    return found


# every model option's numeric fields, and the first option that has each
MODEL_FIELDS = {
    path: (name, kind)
    for name, cls in reversed(schema.MODEL_SCHEMAS.items())
    for path, kind in numeric_fields(cls, "model.").items()
}
MODEL_OF = {path: name for path, (name, _) in MODEL_FIELDS.items()}
# path -> its declared type, for every numeric field of every model option too
FIELDS = {
    **numeric_fields(schema.PerflabConfig),
    **{path: kind for path, (_, kind) in MODEL_FIELDS.items()},
}


def test_every_numeric_field_has_a_bound_and_every_bound_a_field():
    assert sorted(set(FIELDS) - MAXIMA.keys()) == [], "give these a bound in MAXIMA"
    assert sorted(MAXIMA.keys() - set(FIELDS)) == [], "no such fields"
    assert all(m.why for m in MAXIMA.values())


def test_the_defaults_of_every_field_are_within_their_bounds():
    defaults = {
        f"{prefix}{f.name}": f.default
        for prefix, cls in [
            ("", schema.PerflabConfig),
            ("trial.", schema.TrialConfig),
            ("schedule.", schema.ScheduleConfig),
            ("data.", schema.DataConfig),
            ("profiling.", schema.ProfilingConfig),
            ("scaleout.", schema.ScaleOutConfig),
            ("scaleout.slurm.", schema.SlurmConfig),
            *[("model.", cls) for cls in schema.MODEL_SCHEMAS.values()],
        ]
        for f in dataclasses.fields(cls)
        if type(f.default) in (int, float)
    }
    assert {p: v for p, v in defaults.items() if not MAXIMA[p].allows(v)} == {}


def just_above(path: str) -> str:
    """The smallest override of ``path`` its bound refuses, as typed on the command line."""
    bound, kind = MAXIMA[path], FIELDS[path].removesuffix(" | None")
    if kind == "float":
        value: int | float = float(bound.limit) * (1.5 if bound.inclusive else 1)
    else:
        value = int(bound.limit) + (1 if bound.inclusive else 0)
    return f"{path}=[{value}]" if kind == "list[int]" else f"{path}={value!r}"


@pytest.mark.parametrize("path", sorted(MAXIMA))
def test_a_value_above_each_bound_is_refused_naming_field_bound_and_reason(make_config, path):
    model = [f"model={MODEL_OF[path]}"] if path in MODEL_OF else []
    override = just_above(path)
    with pytest.raises(ConfigError) as caught:
        make_config(*model, override)
    message = str(caught.value)
    assert caught.value.field == path
    assert message.startswith(f"{path}=") and ": too large; allowed: " in message, message
    assert MAXIMA[path].allowed() in message and "\n" not in message


@pytest.mark.parametrize("override", ISSUE_INPUTS)
def test_the_issues_absurd_values_are_refused_when_the_config_is_validated(make_config, override):
    path = override.partition("=")[0]
    with pytest.raises(ConfigError, match=rf"^{re.escape(path)}=.*: too large; allowed: <= "):
        make_config(override)


def test_a_size_is_named_rather_than_the_shape_derived_from_it(make_config):
    with pytest.raises(ConfigError) as caught:
        make_config("model.image_size=1000000")  # convnet: input.shape follows it
    assert caught.value.field == "model.image_size"


def test_a_shape_is_refused_by_its_largest_size(make_config):
    with pytest.raises(ConfigError, match=r"^model\.input\.shape=\[3, 10000000000000000000\]: "):
        make_config("model.input.shape=[3,10000000000000000000]")


@pytest.mark.slow
def test_nan_and_inf_are_refused_in_every_float_field(make_config):
    for path in [p for p, kind in FIELDS.items() if kind.startswith("float")]:
        for value in ("nan", "inf", "-inf"):
            with pytest.raises(ConfigError, match=r": not finite; allowed: a finite number"):
                make_config(f"{path}={value}")


def test_the_configuration_reference_lists_every_bound():
    text = (REPO / "docs" / "configuration.md").read_text()
    section = text.split("## Upper bounds", 1)[1].split("\n## ", 1)[0]
    rows = {
        line.split("|")[1].strip().strip("`"): line
        for line in section.splitlines()
        if line.startswith("| `")
    }
    for path, bound in MAXIMA.items():
        assert path in rows, f"{path} missing from docs/configuration.md's Upper bounds"
        limit = int(bound.limit) if float(bound.limit).is_integer() else bound.limit
        assert f"{'<=' if bound.inclusive else '<'} {limit}" in rows[path].replace("`", "")


# --- the command ------------------------------------------------------------------------


def perflab(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*console_scripts.command("perflab"), *args],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("perflab: error: "), result.stderr
    return lines[0].removeprefix("perflab: error: ")


def no_trials(directory: Path) -> None:
    assert not [p for p in directory.rglob("*.json") if p.parent.name == "trials"]


@pytest.mark.slow
def test_a_sweep_with_an_absurd_value_stops_before_it_starts(tmp_path):
    sweep = tmp_path / "s"
    args = ["-m", "device=cpu", "batch_size=1,2", ISSUE_INPUTS[0], f"hydra.sweep.dir={sweep}"]
    line = one_error_line(perflab(tmp_path, *args))
    assert line.startswith("profiling.active=100000000000000000000: too large; allowed: <= 50 ")
    no_trials(tmp_path)


@pytest.mark.slow
def test_a_single_run_with_an_absurd_value_stops_before_its_trial(tmp_path):
    result = perflab(tmp_path, "device=cpu", "threads=100000000000000000000")
    assert one_error_line(result).startswith("threads=100000000000000000000: too large; ")
    no_trials(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("multirun", "field"), [(["-m", "batch_size=1,2"], "hydra.sweep.dir"), ([], "hydra.run.dir")]
)
def test_an_output_dir_whose_interpolation_does_not_resolve_is_named(tmp_path, multirun, field):
    value = "${oc.env:PERFLAB_TEST_SURELY_UNSET}/x"
    env = {k: v for k, v in os.environ.items() if k != "PERFLAB_TEST_SURELY_UNSET"}
    result = subprocess.run(
        [*console_scripts.command("perflab"), *multirun, "device=cpu", f"{field}={value}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = one_error_line(result)
    assert line.startswith(f"{field}={value}: "), line
    assert "PERFLAB_TEST_SURELY_UNSET" in line and "; allowed: a directory path" in line, line
    assert not list(tmp_path.iterdir())  # nothing written: no outputs/, no multirun/


# --- Hydra's blocklist message, whole ---------------------------------------------------


def test_a_multi_line_instantiation_error_is_said_whole_on_one_line():
    from hydra.errors import InstantiationException

    from perflab.config.compose import instantiation_problem

    exc = InstantiationException(
        "Target 'x.y' is blocklisted because it allows\nconfig data to control executable\n"
        "behavior.\nfull_key: model"
    )
    assert instantiation_problem(exc) == (
        "Target 'x.y' is blocklisted because it allows config data to control executable behavior."
    )


BLOCKLIST = "hydra._internal.target_policy"  # Hydra 1.3.8's blocklist of targets


@pytest.mark.parametrize("field", ["model._target_", "data.dataset"])
def test_a_blocklisted_factory_is_refused_with_hydras_whole_reason(make_config, field):
    pytest.importorskip(BLOCKLIST)
    from perflab.workloads import build_model
    from perflab.workloads.data import build_dataset

    # os.system is never called: the blocklist refuses it before any call
    if field == "model._target_":
        with pytest.raises(ConfigError) as caught:
            build_model(make_config("model=custom", "model._target_=os.system"))
    else:
        with pytest.raises(ConfigError) as caught:
            cfg = make_config()
            build_dataset("os.system", {}, cfg.model.input, cfg.model.target, 8, 0, 0)
    message = str(caught.value)
    assert message.startswith(f"{field}=os.system: Target 'os.system' is blocklisted because it ")
    assert "HYDRA_INSTANTIATE_ALLOWLIST_OVERRIDE." in message and "\n" not in message


# --- a single run's dataset factory, checked as a sweep checks it -----------------------

EXITS = "tests.exits_at_import"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("dataset", "env", "problem"),
    [
        ("nosuch_module.build", {}, "no importable module"),
        (f"{EXITS}.x", {"PERFLAB_TEST_EXIT_HOW": "sys.exit"}, "exited with code 3 while importing"),
        (f"{EXITS}.x", {"PERFLAB_TEST_EXIT_HOW": "os._exit"}, "exited with code 3 while importing"),
    ],
)
@pytest.mark.slow
def test_a_single_runs_broken_dataset_factory_is_bad_input(tmp_path, dataset, env, problem):
    # run from the repository, where tests.exits_at_import is importable
    run_dir = tmp_path / "run"
    result = perflab(
        REPO, "device=cpu", f"data.dataset={dataset}", f"hydra.run.dir={run_dir}", **env
    )
    line = one_error_line(result)
    assert line.startswith(f"data.dataset={format_value(dataset)}: "), line
    assert problem in line and "; allowed: " in line, line
    no_trials(run_dir)
