"""perflab.run from Python: overrides from keyword arguments, functions shipped by value,
the typed result and its claims, errors before the budget, a clean stop.

Device: cpu. The end-to-end runs use the spin workload, whose true step time is known
(model.step_us): they assert the pipeline and a ground-truth ratio, never that a real
optimization is faster."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from sweeps import make_sweep

import perflab
from perflab.analysis.summarize import analyze_dir
from perflab.api import expect
from perflab.api.overrides import as_overrides
from perflab.api.result import ExperimentError, Result, Undecided, load_result
from perflab.errors import ConfigError
from perflab.formats.summary import Summary, write_summary
from perflab.formats.sweepdir import SUMMARY_FILE
from perflab.process import shipped

ROOT = Path(__file__).resolve().parent.parent


def test_keyword_arguments_are_the_command_lines_overrides():
    assert as_overrides(
        ("amp=off,bf16",),
        {
            "batch_size": [32, 64],
            "compile": True,
            "schedule__max_rounds": 6,
            "experiment": "amp",
            "schedule.treatments": {"model.step_us": 2100},
            "model.checkpoint": None,
        },
    ) == [
        "amp=off,bf16",
        "batch_size=32,64",
        "compile=true",
        "schedule.max_rounds=6",
        "+experiment=amp",
        "schedule.treatments={model.step_us:2100}",
        "model.checkpoint=null",
    ]


def test_a_bad_override_or_value_names_itself():
    with pytest.raises(ConfigError, match=r"overrides\[0\]=amp"):
        as_overrides(("amp",), {})
    with pytest.raises(ConfigError, match="batch_size=.*non-empty list"):
        as_overrides((), {"batch_size": []})
    with pytest.raises(ConfigError, match="model.fn=.*a function"):
        as_overrides((), {"model.fn": object()})


def test_an_importable_function_goes_by_its_name():
    assert as_overrides((), {"model.loss": os.path.join}) == ["model.loss=posixpath.join"]


def test_a_function_of_the_caller_is_shipped_by_value(tmp_path, monkeypatch):
    """A function another process cannot import (here: defined inside this test) reaches
    a fresh interpreter by value, under a name that changes with its code."""
    monkeypatch.setenv(shipped.SHIPPED_DIR_VARIABLE, str(tmp_path))
    scale = 3

    def triple(x: int) -> int:
        return scale * x

    (override,) = as_overrides((), {"model.fn": triple})
    name = override.removeprefix("model.fn=")
    assert name.startswith("perflab.process.shipped.triple_")
    code = f"from perflab.workloads import locate; print(locate({name!r})(14))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, shipped.SHIPPED_DIR_VARIABLE: str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "42"
    scale = 4  # a captured value changed: another function, another name
    assert as_overrides((), {"model.fn": triple}) != [override]


def test_a_function_that_cannot_be_shipped_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(shipped.SHIPPED_DIR_VARIABLE, str(tmp_path))
    lock = threading.Lock()

    def holds_a_lock() -> bool:
        return lock.locked()

    with pytest.raises(ConfigError) as caught:
        as_overrides((), {"step": holds_a_lock})
    message = str(caught.value)
    assert message.startswith("step=") and "importable" in message and "\n" not in message


def _result(tmp_path: Path, **sweep: object) -> Result:
    make_sweep(tmp_path, **sweep)  # type: ignore[arg-type]
    write_summary(tmp_path / SUMMARY_FILE, Summary.from_dict(analyze_dir(tmp_path)))
    return load_result(tmp_path)


def test_the_result_finds_comparisons_by_label_or_knob(tmp_path):
    result = _result(tmp_path)
    assert result.verdicts == {"amp=bf16": "FASTER"}
    assert result.comparison("amp=bf16") is result.comparison(amp="bf16")
    with pytest.raises(
        LookupError, match="no comparison for amp=fp16; the comparisons: 'amp=bf16'"
    ):
        result.comparison(amp="fp16")
    frame = result.to_frame()
    assert list(frame["verdict"]) == ["FASTER"] and frame.loc[0, "speedup"] > 1.2
    assert "amp=bf16 vs amp=off: FASTER 1.2" in str(result)


def test_claims_pass_fail_or_stay_undecided_on_the_interval(tmp_path):
    result = _result(tmp_path)  # FASTER, about 1.25x with a narrow interval
    assert result.check_faster("amp=bf16", by=0.1).outcome == expect.PASSED
    assert result.check_faster("amp=bf16", by=0.5).outcome == expect.FAILED
    assert result.check_not_slower("amp=bf16").outcome == expect.PASSED
    assert result.check_equivalent("amp=bf16").outcome == expect.FAILED
    with pytest.raises(AssertionError, match="faster by at least 50.0%: FAILED"):
        result.assert_faster("amp=bf16", by=0.5)
    check = result.assert_faster("amp=bf16", by=0.1)
    assert "false-positive rate" in check.rates and "power" in check.rates


def test_an_inconclusive_claim_is_undecided_never_a_pass_or_a_fail(tmp_path):
    result = _result(tmp_path, speedup=1.02, rounds=4, seed=6)
    check = result.check_faster("amp=bf16", by=0.02)
    assert check.outcome == expect.UNDECIDED and "rounds" in check.reason
    with pytest.raises(Undecided, match="UNDECIDED"):
        result.assert_faster("amp=bf16", by=0.02)


def test_bad_input_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ExperimentError) as caught:
        perflab.run(amp="sometimes", sweep_dir=tmp_path / "sweep", quiet=True)
    assert caught.value.returncode == 2
    assert str(caught.value).startswith("amp=sometimes") and "allowed" in str(caught.value)
    assert not (tmp_path / "sweep" / SUMMARY_FILE).exists()


@pytest.mark.heavy
@pytest.mark.slow
def test_a_known_ratio_measured_from_python(tmp_path):
    """Spin steps of 2000 us against 2100 us: the variant is 5 % faster, by construction."""
    result = perflab.run(
        experiment="spin_ratio",
        preset="quick",
        profile="off",
        schedule__treatments={"model.step_us": 2100},
        sweep_dir=tmp_path / "sweep",
        quiet=True,
    )
    c = result.comparison(model__step_us=2000)
    assert c.verdict == "FASTER" and c.estimate is not None
    assert c.estimate.ci_low < 2100 / 2000 * 1.02 and c.estimate.ci_high > 2100 / 2000 * 0.98
    assert result.check_faster(model__step_us=2000, by=0.02).outcome == expect.PASSED
    assert result.report.is_file()


@pytest.mark.heavy
@pytest.mark.slow
def test_a_timeout_stops_cleanly_and_returns_the_partial_summary(tmp_path):
    result = perflab.run(
        experiment="spin_ratio",
        preset="quick",
        profile="off",
        schedule__min_rounds=16,
        timeout_s=12,
        sweep_dir=tmp_path / "sweep",
        quiet=True,
    )
    assert result.returncode == 130 and isinstance(result.summary, Summary)
    assert result.summary.stop_reason == "interrupted" and 0 < result.summary.rounds < 16


PLUGIN_TEST = """
import perflab

def test_five_percent_faster(perflab_run):
    result = perflab_run("+experiment=spin_ratio", "preset=quick", "profile=off",
                         "schedule.treatments={model.step_us:2100}", budget_s=60)
    result.assert_faster(model__step_us=2000, by=0.02)

def test_an_impossible_claim_fails(perflab_run):
    result = perflab_run("+experiment=spin_ratio", "preset=quick", "profile=off",
                         "schedule.treatments={model.step_us:2100}", budget_s=60)
    result.assert_faster(model__step_us=2000, by=0.5)
"""


@pytest.mark.slow
@pytest.mark.heavy
def test_the_pytest_plugin_passes_a_known_effect_and_fails_an_impossible_claim(tmp_path):
    """The plugin as a user's test suite meets it: installed with perflab, idle until a
    test asks for perflab_run."""
    (tmp_path / "test_spin.py").write_text(textwrap.dedent(PLUGIN_TEST))
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_spin.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "1 failed, 1 passed" in out.stdout, out.stdout[-3000:]
    assert "faster by at least 50.0%: FAILED" in out.stdout
    assert "false-positive rate" in out.stdout


@pytest.mark.slow
@pytest.mark.heavy
def test_the_notebook_example_runs_as_written(tmp_path):
    """examples/notebook.py, cell after cell, in a fresh interpreter as a notebook runs it."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "notebook.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "model.fn=" in out.stdout and "faster by at least 5.0%" in out.stdout


def test_a_shipped_function_is_labelled_by_its_own_name():
    from perflab.config.plan import label_text

    assert label_text("model.fn=perflab.process.shipped.attention_5a4993d4564f") == (
        "model.fn=attention_5a4993d4564f"
    )
    assert label_text("model.fn=my_step.attention_ref") == "model.fn=my_step.attention_ref"
