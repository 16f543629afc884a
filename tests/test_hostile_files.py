"""Hostile files and directories around a sweep: a local helper module edited between two
sessions outside git, JSON nested 100,000 levels deep, an experiment.json from a newer
perflab, a finished record destroyed by another trial, output directories that are
broken symbolic links, a lock file that is a directory, and a disk that fills while
perflab-report writes. Each must give one clear line and the right exit code, never a
traceback and never a silent mix of two experiments (docs/resilience.md)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import console_scripts
import pytest
from sweeps import make_sweep

from perflab.analysis.sweep import Experiment
from perflab.errors import ConfigError, RecordError
from perflab.experiment import codeprint, resume
from perflab.formats.profile_json import load_profile
from perflab.formats.records import check_writable, load_record
from perflab.formats.summary import SummaryError, load_summary
from perflab.formats.sweepdir import (
    LOCK_FILE,
    RUN_MARKERS,
    SWEEP_MARKERS,
    SweepLock,
    check_output_dir,
)
from perflab.formats.trial_parts import Invocation

# A sweep of one variant, three rounds of ~0.2 s trials of MODEL (my_model.py, in the
# directory the command runs in), each in a fresh process, on the CPU: ~6 s
SWEEP = (
    "model=custom",
    "model._target_=my_model.build",
    "model.input.shape=[1]",
    "model.target.kind=none",
    "data=memory",
    "mode=infer",
    "profile=off",
    "trial.warmup_steps=2",
    "trial.warmup_s=0",
    "trial.min_steps=5",
    "trial.min_s=0",
    "schedule.min_rounds=3",
    "schedule.max_rounds=3",
    "schedule.sentinel=false",
    "schedule.isolation=process",
    "hydra.sweep.dir=sweep",
    "device=cpu",
)
# the user's model, in the directory the command runs in, and a local helper it imports
MODEL = """\
import os
from pathlib import Path

import torch

from helper_mod import WIDTH


def build(victims: str = "") -> torch.nn.Module:
    # a misbehaving model: it deletes r000.json and truncates r001.json in the directory
    # ``victims``, once they exist
    first, second = Path(victims, "r000.json"), Path(victims, "r001.json")
    if victims and first.exists():
        os.unlink(first)
    if victims and second.exists():
        second.write_text('{"schema_version": 5, "sta')
    return torch.nn.Linear(WIDTH, WIDTH)
"""
# 100,000 nested arrays: json recurses once per level
DEEP = "[" * 100_000 + "]" * 100_000
# the nesting perflab reads at most (perflab.formats.json_file.MAX_DEPTH)
MAX_DEPTH = 100


def perflab(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return console_scripts.run("perflab", "-m", *args, cwd=cwd, timeout=300)


def user_project(root: Path) -> Path:
    """A directory outside any git work tree holding the model and its helper."""
    project = root / "project"
    project.mkdir()
    if subprocess.run(["git", "rev-parse"], cwd=project, capture_output=True).returncode == 0:
        pytest.skip("the temporary directory is inside a git work tree")
    (project / "my_model.py").write_text(MODEL)
    (project / "helper_mod.py").write_text("WIDTH = 1\n")
    return project


def as_if_perflab_unchanged(sweep: Path) -> None:
    """Store the current hash of perflab's own sources in the sweep's fingerprint: a test
    of what a resume does with the sweep's files must not fail because perflab's source
    tree (an editable install someone is working on) changed between its two sessions."""
    path = sweep / "experiment.json"
    data = json.loads(path.read_text())
    data["fingerprint"]["code"]["perflab"] = codeprint.code_fingerprint([], ".")["perflab"]
    path.write_text(json.dumps(data))


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def analysis(sweep: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perflab.report", str(sweep)],
        capture_output=True,
        text=True,
        timeout=300,
    )


# --- (5) the local modules the model imports are in the code fingerprint -----------------


@pytest.mark.heavy
@pytest.mark.slow
def test_an_edited_helper_of_the_model_outside_git_refuses_the_resume_naming_it(tmp_path):
    project = user_project(tmp_path)
    first = perflab(project, *SWEEP)
    assert first.returncode == 0, first.stderr
    (project / "helper_mod.py").write_text("WIDTH = 1  # edited: another experiment\n")
    second = perflab(project, *SWEEP)
    assert second.returncode == 2, second.stderr
    line = one_line(second.stderr)
    assert line.startswith("perflab: error: hydra.sweep.dir=sweep: holds a different experiment")
    assert "code: the source of helper_mod (imported by my_model) changed" in line


def test_the_import_walk_follows_local_modules_only_and_is_bounded(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from .inner import x\n")
    (tmp_path / "pkg" / "inner.py").write_text("import deepest\nx = 1\n")
    (tmp_path / "deepest.py").write_text("y = 2\n")
    (tmp_path / "model.py").write_text(
        "import json, os.path\nimport numpy\nimport perflab.formats.records\nimport pkg\n"
        "def build():\n    from helper import z\n"
    )
    (tmp_path / "helper.py").write_text("z = 3\n")
    imports = codeprint.code_fingerprint(["model.build"], str(tmp_path))["imports"]
    # the standard library, site-packages and perflab are not the user's local code
    assert {name: entry["by"] for name, entry in imports.items()} == {
        "pkg": "model",
        "pkg.inner": "pkg",
        "deepest": "pkg.inner",
        "helper": "model",
    }
    monkeypatch.setattr(codeprint, "MAX_IMPORT_DEPTH", 1)
    shallow = codeprint.code_fingerprint(["model.build"], str(tmp_path))["imports"]
    assert sorted(shallow) == ["helper", "pkg"]
    monkeypatch.setattr(codeprint, "MAX_IMPORTED", 1)
    assert len(codeprint.code_fingerprint(["model.build"], str(tmp_path))["imports"]) == 1


# --- (8) JSON nested 100,000 deep is a corrupt file, never a RecursionError ---------------


@pytest.mark.slow
def test_a_deeply_nested_record_is_skipped_by_the_report_and_the_analysis(tmp_path):
    sweep = tmp_path / "sweep"
    make_sweep(sweep)
    (sweep / "0" / "trials" / "r003.json").write_text(DEEP)
    for name, result in [
        ("perflab-report", console_scripts.run("perflab-report", str(sweep), timeout=300)),
        ("analysis", analysis(sweep)),
    ]:
        assert result.returncode == 0, (name, result.stderr)
        assert "Traceback" not in result.stderr, (name, result.stderr)
        [warning] = [line for line in result.stderr.splitlines() if "r003.json" in line]
        assert warning.startswith("perflab: warning: skipping"), (name, warning)
        assert f"nested deeper than {MAX_DEPTH} levels" in warning, (name, warning)


@pytest.mark.heavy
@pytest.mark.slow
def test_a_deeply_nested_record_is_measured_again_by_a_resume(tmp_path):
    project = user_project(tmp_path)
    assert perflab(project, *SWEEP).returncode == 0
    record = project / "sweep" / "0" / "trials" / "r001.json"
    record.write_text(DEEP)
    as_if_perflab_unchanged(project / "sweep")
    resumed = perflab(project, *SWEEP)
    assert resumed.returncode == 0, resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert "perflab: warning: skipping sweep/0/trials/r001.json" in resumed.stderr
    assert load_record(record).status == "ok"  # measured again in its round's place


@pytest.mark.slow
def test_a_deeply_nested_experiment_json_is_one_line_and_exit_2(tmp_path):
    sweep = tmp_path / "sweep"
    make_sweep(sweep)
    (sweep / "experiment.json").write_text(DEEP)
    report = console_scripts.run("perflab-report", str(sweep), timeout=300)
    assert report.returncode == 2
    assert f"{sweep / 'experiment.json'}: unreadable" in one_line(report.stderr)
    result = analysis(sweep)
    assert result.returncode == 2
    assert f"nested deeper than {MAX_DEPTH} levels" in one_line(result.stderr)
    with pytest.raises(ValueError, match=f"nested deeper than {MAX_DEPTH} levels"):
        Experiment.load(sweep)  # what the resume check reads it with (exit 2 there)


def test_every_reader_of_perflab_json_bounds_its_nesting(tmp_path):
    from perflab.formats import json_file
    from perflab.formats.json_file import NestedTooDeep, read_json

    assert json_file.MAX_DEPTH == MAX_DEPTH
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    with pytest.raises(RecordError, match=r"deep.json: .*nested deeper than 100 levels"):
        load_record(deep)
    with pytest.raises(SummaryError, match=r"deep.json: .*nested deeper than 100 levels"):
        load_summary(deep)
    assert load_profile(deep) is None
    # under the recursion limit, but deeper than any file perflab writes: still refused
    # (what reads the values later recurses once per level too)
    barely = tmp_path / "barely.json"
    barely.write_text('{"a": ' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1))
    with pytest.raises(NestedTooDeep):
        read_json(barely)
    fine = tmp_path / "fine.json"
    fine.write_text("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert read_json(fine) is not None


# --- (10) experiment.json has a schema_version ---------------------------------------------


@pytest.mark.slow
def test_experiment_json_is_versioned_and_a_newer_version_is_refused(tmp_path):
    sweep = tmp_path / "sweep"
    plan = make_sweep(sweep)
    data = json.loads((sweep / "experiment.json").read_text())
    assert next(iter(data)) == "schema_version" and data["schema_version"] == 2
    # a file of perflab before schema_version was written reads as version 1
    del data["schema_version"]
    (sweep / "experiment.json").write_text(json.dumps(data))
    assert Experiment.load(sweep).plan == plan
    (sweep / "experiment.json").write_text(json.dumps({"schema_version": 3, **data}))
    with pytest.raises(ValueError, match=r"schema_version=3 is not supported by this perflab"):
        Experiment.load(sweep)
    for result in (console_scripts.run("perflab-report", str(sweep)), analysis(sweep)):
        assert result.returncode == 2
        line = one_line(result.stderr)
        assert f"{sweep / 'experiment.json'}: unreadable" in line
        assert "schema_version=3 is not supported by this perflab (reads 1, 2)" in line
    fp = resume.fingerprint({}, Invocation(cwd=str(tmp_path)))
    with pytest.raises(ConfigError, match=r"experiment.json is unreadable \(schema_version=3"):
        resume.previous(sweep, plan, fp)


# --- (12) a finished record destroyed by another trial fails the sweep ---------------------


@pytest.mark.slow
def test_a_record_destroyed_by_another_trial_makes_the_sweep_exit_1_naming_it(tmp_path):
    project = user_project(tmp_path)
    # two variants: the second deletes the first's round-0 record, then truncates its
    # round-1 record (each trial builds the model in a fresh process)
    victims = project / "sweep" / "0" / "trials"
    result = perflab(
        project,
        *SWEEP,
        f"+model.args.victims='','{victims}'",
        "+schedule.treatments={model.args.victims:''}",
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[-1].startswith("perflab: finished trial records were destroyed"), lines[-1]
    assert "0/trials/r000.json: gone" in lines[-1]
    assert "0/trials/r001.json: not a readable perflab record" in lines[-1]
    assert "run the same command again to measure them again" in lines[-1]


# --- (13) broken output directories, a lock that is a directory, a disk that fills ---------


def test_a_broken_symbolic_link_as_the_output_directory_is_refused(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    cases = {
        "dangling": f"{tmp_path / 'dangling'} is a symbolic link to {tmp_path / 'nowhere'}, "
        "which does not exist",
        "dangling/below": f"{tmp_path / 'dangling'} is a symbolic link to",
        "loop": f"{tmp_path / 'loop'} is a symbolic link loop",
        "loop/below": f"{tmp_path / 'loop'} is a symbolic link loop",
    }
    for name, why in cases.items():
        for field, markers in (("hydra.sweep.dir", SWEEP_MARKERS), ("hydra.run.dir", RUN_MARKERS)):
            with pytest.raises(ConfigError) as refused:
                check_output_dir(tmp_path / name, field, markers)
            message = str(refused.value)
            assert message.startswith(f"{field}={tmp_path / name}: {why}"), message
            assert "allowed: a new or empty directory" in message
        # perflab-report --out and report.dir: checked for writing only, the same way
        with pytest.raises(ConfigError, match=f"^--out={tmp_path / name}: {why}"):
            check_writable(tmp_path / name, "--out")


@pytest.mark.slow
def test_broken_output_directories_and_a_lock_directory_are_one_line_and_exit_2(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "locked" / LOCK_FILE).mkdir(parents=True)
    cases = [
        (["-m", "hydra.sweep.dir=dangling"], "hydra.sweep.dir=dangling: "),
        (["-m", "hydra.sweep.dir=loop"], "hydra.sweep.dir=loop: "),
        (["hydra.run.dir=dangling"], "hydra.run.dir=dangling: "),
        (["-m", "hydra.sweep.dir=locked"], f"its {LOCK_FILE} is a directory"),
    ]
    args = [a for a in SWEEP if not a.startswith("hydra.sweep.dir=")]
    for argv, message in cases:
        result = console_scripts.run("perflab", *argv, *args, cwd=tmp_path, timeout=120)
        assert result.returncode == 2, (argv, result.stderr)
        line = one_line(result.stderr)
        assert line.startswith("perflab: error: ") and message in line, line
    assert not (tmp_path / "nowhere").exists()


def test_a_lock_file_that_is_a_directory_or_a_link_is_refused_naming_the_field(tmp_path):
    (tmp_path / "a" / LOCK_FILE).mkdir(parents=True)
    with pytest.raises(ConfigError) as refused:
        SweepLock(tmp_path / "a").acquire()
    message = str(refused.value)
    assert message.startswith(f"hydra.sweep.dir={tmp_path / 'a'}: its {LOCK_FILE} is a directory")
    assert "allowed: " in message
    # a link: the holder's note would truncate and overwrite whatever it points to
    (tmp_path / "b").mkdir()
    (tmp_path / "precious").write_text("someone's file")
    (tmp_path / "b" / LOCK_FILE).symlink_to(tmp_path / "precious")
    with pytest.raises(ConfigError, match=f"its {LOCK_FILE} is a symbolic link"):
        SweepLock(tmp_path / "b").acquire()
    assert (tmp_path / "precious").read_text() == "someone's file"


def test_a_disk_that_fills_while_perflab_report_writes_exits_74_naming_the_folder(
    tmp_path, monkeypatch, capsys
):
    from perflab.report.cli import main as report_main

    sweep, out = tmp_path / "sweep", tmp_path / "published"
    make_sweep(sweep)
    real_replace = os.replace

    def disk_full(src: Path, dst: Path) -> None:
        """The last step of every whole-file write into ``out`` fails as a full disk does
        (a rename that needs a new directory block gets ENOSPC too)."""
        if Path(str(dst)).parent == out:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(SystemExit) as exited:
        report_main([str(sweep), "--out", str(out)])
    assert exited.value.code == 74
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"perflab-report: stopped: no space left on the disk of {out}")
    assert not list(out.glob(".*.tmp"))  # nothing half-written left behind


def test_a_real_full_disk_under_perflab_report_exits_74(tmp_path, monkeypatch, capsys):
    """The same on a 2 MB tmpfs, filled up (needs root and a kernel that lets it mount;
    skipped otherwise). The free-space floor checked before writing is lowered to 0 so
    that the write itself is what meets the full disk."""
    from perflab.formats import records
    from perflab.report.cli import main as report_main

    sweep, disk = tmp_path / "sweep", tmp_path / "disk"
    make_sweep(sweep)
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)]
    if os.geteuid() != 0 or subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (disk / "published").mkdir()
        with open(disk / "filler", "wb", buffering=0) as filler:
            with pytest.raises(OSError):  # ENOSPC, once full
                for _ in range(64):
                    filler.write(b"\0" * 2**16)
        monkeypatch.setattr(records, "MIN_FREE_BYTES", 0)
        with pytest.raises(SystemExit) as exited:
            report_main([str(sweep), "--out", str(disk / "published")])
        assert exited.value.code == 74
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"perflab-report: stopped: no space left on the disk of {disk}")
        assert not list((disk / "published").glob(".*.tmp"))
    finally:
        # lazily: detached even while a file on it is still open
        subprocess.run(["umount", "--lazy", str(disk)], capture_output=True)
