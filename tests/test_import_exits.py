"""A user's module that ends its process while being imported (tests/exits_at_import.py):
in the sweep's pre-check it is named in one line and exit 2, in a trial it is a failed
record and the sweep goes on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import console_scripts
import pytest

from perflab.errors import ConfigError
from perflab.formats.records import load_record
from perflab.formats.trial_parts import Invocation
from perflab.measure.preflight import check_settings
from perflab.process.trial_request import TrialRequest

MODULE = "tests.exits_at_import"
# two variants, the baseline's model imports cleanly, and the A/A sentinel (a copy of the
# baseline: its comparison keeps the sweep going once the other variant failed); short
# trials on the CPU
SWEEP = (
    "model=custom",
    "model._target_=tests.faulty.build,tests.exits_at_import.build",
    "+schedule.treatments={model._target_:tests.faulty.build}",
    "model.input.shape=[1]",
    "model.target.kind=none",
    "data=memory",
    "mode=infer",
    "profile=off",
    "schedule.min_rounds=3",
    "schedule.max_rounds=3",
    "trial.warmup_steps=2",
    "trial.warmup_s=0",
    "trial.min_steps=5",
    "trial.min_s=0",
    "device=cpu",
)
HOW = ["sys.exit", "os._exit"]


def sweep(tmp_path: Path, how: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*console_scripts.command("perflab"), "-m", *SWEEP, f"hydra.sweep.dir={tmp_path / 's'}"],
        cwd=tmp_path,
        env={**os.environ, "PERFLAB_TEST_EXIT_HOW": how, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def request(make_config, field_name: str) -> TrialRequest:
    base = ("model=custom", "model.input.shape=[1]", "model.target.kind=none")
    if field_name == "model._target_":
        cfg = make_config(*base, f"model._target_={MODULE}.build")
    else:
        cfg = make_config(*base, "model._target_=tests.faulty.build", f"data.dataset={MODULE}.x")
    return TrialRequest(cfg, {}, "", Invocation(cwd=str(Path(__file__).resolve().parent.parent)))


@pytest.mark.parametrize(
    ("code", "said"),
    [("3", "exited with code 3"), ("0", "exited with code 0"), ("bye", "exited with code 1 (bye)")],
)
@pytest.mark.parametrize("field_name", ["model._target_", "data.dataset"])
def test_sys_exit_at_import_is_a_config_error_of_the_factory(
    make_config, monkeypatch, field_name, code, said
):
    monkeypatch.setenv("PERFLAB_TEST_EXIT_HOW", "sys.exit")
    monkeypatch.setenv("PERFLAB_TEST_EXIT_CODE", code)
    monkeypatch.setattr(sys, "path", list(sys.path))  # check_settings adds the working dir
    monkeypatch.delitem(sys.modules, MODULE, raising=False)  # imported afresh
    with pytest.raises(ConfigError) as caught:
        check_settings(request(make_config, field_name))
    target = f"{MODULE}.build" if field_name == "model._target_" else f"{MODULE}.x"
    assert str(caught.value) == (
        f"{field_name}={target}: {said} while importing it; allowed: a factory whose module "
        "imports without ending the process"
    )


@pytest.mark.slow
@pytest.mark.parametrize("how", HOW)
def test_an_exit_at_import_stops_the_pre_check_in_one_line(tmp_path, how):
    result = sweep(tmp_path, how)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"perflab: error: model._target_={MODULE}.build: exited with code 3 while importing "
        "it; allowed: a factory whose module imports without ending the process"
    ]
    assert not list((tmp_path / "s").glob("*/trials/*"))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sys.exit", "os._exit"])
def test_an_exit_at_import_in_a_trial_is_a_failed_record_and_the_sweep_goes_on(tmp_path, how):
    # the pre-check imports the module first and passes; every trial's import exits
    result = sweep(tmp_path, how, PERFLAB_TEST_EXIT_AFTER_FIRST=str(tmp_path / "imported"))
    assert result.returncode == 1, result.stderr
    trials = tmp_path / "s"
    rounds = ["r000.json", "r001.json", "r002.json"]
    for kept in ("0", "sentinel"):
        assert sorted(p.name for p in (trials / kept / "trials").glob("r*.json")) == rounds
    assert [p.name for p in (trials / "1" / "trials").glob("r*.json")] == ["r000.json"]
    failed = load_record(trials / "1" / "trials" / "r000.json")
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.message.splitlines()[0].endswith("exited with code 3"), failed.error
