"""End to end: the installed `perflab` console script, run as a user runs it (found as
tests/console_scripts.py says), on the CPU."""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from pathlib import Path

import console_scripts
import pytest
from tiny import TINY, USER_MODEL, cpu_runs_fp16_natively

from perflab.formats.records import load_record


def perflab(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return console_scripts.run("perflab", *args, cwd=cwd)


@pytest.mark.parametrize("name", sorted(console_scripts.ENTRY_POINTS))
def test_console_script_entry_points_match_pyproject_and_run_without_the_script(name):
    # pyproject.toml's [project.scripts] is what the fallback mirrors
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    scripts = tomllib.loads(pyproject.read_text())["project"]["scripts"]
    assert console_scripts.ENTRY_POINTS == scripts
    assert console_scripts.entry_point(name) == scripts[name]
    # the fallback (pip --target: no script anywhere on the search path) runs as well
    command = console_scripts.entry_point_command(name)
    result = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert name in result.stdout


def record_path(stdout: str, cwd: Path) -> Path:
    match = re.search(r"record: (\S+)", stdout)
    assert match, stdout
    return cwd / match.group(1)


@pytest.mark.slow
def test_a_run_prints_the_summary_and_writes_its_record(tmp_path):
    result = perflab(tmp_path, *TINY)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    needles = ("p50", "p90", "p99", "samples/s", "first call", "peak memory", "warm-up", "phases")
    for needle in needles:
        assert needle in out
    assert "record: outputs/" in out  # shown relative to where the user ran perflab
    path = record_path(out, tmp_path)
    record = load_record(path)
    assert record.status == "ok"
    assert record.environment["argv"][1:] == list(TINY)
    assert record.config["model"]["hidden"] == 16
    assert (path.parent.parent / ".hydra" / "config.yaml").exists()


# Device-agnostic, the bad-input tests below: each input is refused before any trial
# process resolves a device, with the same line on any machine (and device=auto is part
# of what a user types).
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["batch_size=0"], "batch_size=0: too small; allowed: >= 1"),
        (["amp=maybe"], "amp=maybe: unknown value; allowed: off, bf16, fp16, true, false"),
        (
            ["model=nope"],
            "model=nope: no such option; allowed: convnet, custom, function, hf, mlp, spin",
        ),
        (["model=mlp", "channels_last=true"], "channels_last=true: model has no 4-D inputs"),
        (["num_workers=-1"], "num_workers=-1: too small; allowed: >= 0"),
        (["batch_size=abc"], "batch_size=abc: Value 'abc' of type 'str' could not be converted"),
        (["no_such_knob=1"], "no_such_knob: no such config field; allowed: the fields"),
        (["model=custom"], "model._target_=???: required"),
        # found by tests/test_fuzz.py; the first two were tracebacks with exit 1
        (["model=3"], "model=3: model is a config group and takes an option name, not 3"),
        (["=3"], "=3: no key; allowed: KEY=VALUE"),
        # were silently ignored: a key added to a typed node, a deleted field
        (["+model.args.x=1"], "model.args: no such config field; allowed: the fields of model:"),
        (["~seed"], "~seed: a field of perflab's config cannot be deleted"),
        # two lines (Hydra's "Error executing job") and no field named
        (["batch_size=${nosuch}"], "batch_size=${nosuch}: Interpolation key 'nosuch' not found"),
        # blamed the existing field instead of the missing key inside it
        (["schedule.treatments={a:1}"], "schedule.treatments.a: not in this free-form dict"),
        # a newline in the value printed the message over two lines
        (["mode='a\nb'"], "mode=a\\nb: unknown value; allowed: train, infer"),
        # argparse printed its usage over several lines first
        (["--cfg=bad"], "argument --cfg/-c: invalid choice: 'bad'"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, args, message):
    result = perflab(tmp_path, *args)
    assert result.returncode == 2
    assert result.stderr.startswith("perflab: error: ")
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("outputs/*/*/trials/*.json"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model=mlp,3"], "model=mlp,3: model is a config group"),  # was a traceback
        (["batch_size=1,${nosuch}"], "batch_size=${nosuch}: Interpolation key 'nosuch'"),
        (["batch_size=1,2", "+nosuch=1"], "nosuch: no such config field"),  # was ignored
        (["batch_size=interval(1,2)"], "batch_size=interval(1,2): interval sweeps have no"),
    ],
)
def test_a_sweep_with_bad_input_is_one_line_and_measures_nothing(tmp_path, args, message):
    result = perflab(tmp_path, "-m", *args)
    assert result.returncode == 2
    assert result.stderr.startswith("perflab: error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("multirun/**/trials/*.json"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # argparse printed its usage over several lines first
        (["--fail-on", "bogus"], "argument --fail-on: invalid choice: 'bogus'"),
        (["--nosuch"], "unrecognized arguments: --nosuch"),
        # were an OSError traceback
        (["--out", "a-file"], "--out=a-file: "),
        (["--out", "a-file/below"], "--out=a-file/below: "),
    ],
)
def test_perflab_report_bad_arguments_are_one_line(tmp_path, monkeypatch, capsys, args, message):
    from sweeps import make_sweep

    from perflab.report.cli import main as report_main

    make_sweep(tmp_path / "sweep")
    (tmp_path / "a-file").write_text("")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        report_main(["sweep", *args])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.startswith("perflab-report: error: ")
    assert message in err and len(err.strip().splitlines()) == 1
    if "--out" in args:
        assert "a-file is not a directory; allowed: a writable directory" in err
    assert not (tmp_path / "sweep" / "report.md").exists()


@pytest.mark.slow
def test_fp16_autocast_on_cpu_is_refused_before_measuring(tmp_path):
    if cpu_runs_fp16_natively():
        pytest.skip("this CPU runs fp16 autocast natively")
    result = perflab(tmp_path, *TINY, "amp=fp16")  # TINY: device=cpu
    assert result.returncode == 2, result.stderr
    assert "amp=fp16: unwise on this cpu" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("outputs/*/*/trials/*.json"))


@pytest.mark.slow
def test_a_failing_trial_exits_1_and_keeps_a_failed_record(tmp_path):
    result = perflab(tmp_path, *TINY, "model.num_classes=2", "model.target.num_classes=50")
    assert result.returncode == 1
    record = load_record(record_path(result.stdout, tmp_path))
    assert record.status == "failed" and record.error is not None


USER_MODULE = """
import os, signal
import torch
from torch import nn
from torch.utils.data import TensorDataset


def build(width, out=3):
    return nn.Sequential(nn.Linear(5, width), nn.ReLU(), nn.Linear(width, out))


def pairs(n):
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 5, generator=g), torch.randint(0, 3, (n,), generator=g))


class Crash(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 3)

    def forward(self, x):
        os.kill(os.getpid(), signal.SIGSEGV)


def crash():
    return Crash()
"""


@pytest.mark.slow
def test_user_model_and_dataset_from_the_working_directory(tmp_path):
    (tmp_path / "usermod.py").write_text(textwrap.dedent(USER_MODULE))
    result = perflab(
        tmp_path,
        *USER_MODEL,
        "model._target_=usermod.build",
        "+model.args.width=7",
        "data.dataset=usermod.pairs",
        "+data.dataset_args.n=32",
    )
    assert result.returncode == 0, result.stderr + result.stdout
    record = load_record(record_path(result.stdout, tmp_path))
    assert record.status == "ok" and record.probe.output_shape == [4, 3]
    assert record.config["model"]["args"] == {"width": 7}


@pytest.mark.slow
def test_user_factory_with_wrong_arguments_is_a_config_error(tmp_path):
    (tmp_path / "usermod.py").write_text(textwrap.dedent(USER_MODULE))
    result = perflab(tmp_path, *USER_MODEL, "model._target_=usermod.build")
    assert result.returncode == 2
    assert "model._target_=usermod.build:" in result.stderr and "width" in result.stderr


@pytest.mark.slow
def test_a_crashing_trial_process_still_leaves_a_failed_record(tmp_path):
    (tmp_path / "usermod.py").write_text(textwrap.dedent(USER_MODULE))
    result = perflab(tmp_path, *USER_MODEL, "model._target_=usermod.crash")
    assert result.returncode == 1
    path = record_path(result.stdout, tmp_path)
    record = load_record(path)
    assert record.status == "failed" and "SIGSEGV" in record.error.message
    assert json.loads(path.read_text())["config"]["model"]["_target_"] == "usermod.crash"
