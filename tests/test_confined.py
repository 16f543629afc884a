"""Nothing outside the sweep directory is read into a report, a published folder or an
export: every path one of perflab's files names (profile.json's trace and memory
snapshot, experiment.json's job directories, groups.json's groups) and every link in the
sweep is resolved and must stay inside it; a refusal names the file.

No torch and no timing: the sweeps are tests/sweeps.py's fixed records."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

import pytest
from console_scripts import command
from sweeps import make_sweep

from perflab.analysis.sweep import Experiment, load_trials
from perflab.errors import OutsideSweep
from perflab.formats.profile_json import MemorySnapshot, Overhead, TraceFile, write_profile
from perflab.formats.sweepdir import (
    EXPERIMENT_FILE,
    GROUPS_FILE,
    PROFILE_FILE,
    TRACE_DIR,
    TRACE_FILE,
    inside,
    relative_name,
)
from perflab.profile.capture import profile_of
from perflab.report import load, write_report
from perflab.report.artifacts import publish
from perflab.report.merge import load_groups

SECRET = b"the bytes of a file outside the sweep"


def _secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_bytes(SECRET)
    return path


def _with_profile(sweep: Path, trace: str, snapshot: str | None = None) -> None:
    """Variant 1's profile.json written as a profiling trial writes it (no operators),
    naming ``trace`` (and a memory snapshot ``snapshot``), with a real trace file where
    perflab puts it."""
    profile_dir = sweep / "1" / "profile"
    (profile_dir / TRACE_DIR).mkdir(parents=True, exist_ok=True)
    (profile_dir / TRACE_DIR / TRACE_FILE).write_bytes(gzip.compress(b"a real trace"))
    profile = profile_of(
        variant={},
        device="cpu",
        rows=[],
        trace_file=TraceFile(trace=trace, trace_bytes=32),
        overhead=Overhead(unprofiled_step_s=0.01, profiled_step_s=0.011, ratio=1.1),
        profiled_steps=3,
        memory_snapshot=MemorySnapshot(file=snapshot, note=""),
    )
    write_profile(profile_dir / PROFILE_FILE, profile)


def _published_bytes(out: Path) -> list[bytes]:
    return [p.read_bytes() for p in out.rglob("*") if p.is_file()]


def test_inside_follows_links_and_refuses_what_leads_out(tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "0").mkdir(parents=True)
    secret = _secret(tmp_path)
    (sweep / "0" / "link").symlink_to(secret)
    (sweep / "0" / "ok").symlink_to(sweep / "0")  # a link that stays inside is fine
    assert inside(sweep, sweep / "0" / "ok") == (sweep / "0").resolve()
    for path in (sweep / "0" / "link", sweep / ".." / "secret.txt", Path("/etc/passwd")):
        with pytest.raises(OutsideSweep, match="leads out of the sweep directory"):
            inside(sweep, path)
    assert relative_name("0") and relative_name("groups/a=1")
    for bad in ("", "/etc", "../x", "a/../../x", None, 3, ["0"], "a\0b"):
        assert not relative_name(bad)


@pytest.mark.parametrize(
    "trace",
    ["../../../secret.txt", "SECRET_ABSOLUTE", f"{TRACE_DIR}/../../../../secret.txt"],
)
def test_a_trace_named_outside_the_sweep_is_neither_copied_nor_linked(tmp_path, trace, capsys):
    sweep, out = tmp_path / "sweep", tmp_path / "published"
    secret = _secret(tmp_path)
    make_sweep(sweep)
    trace = str(secret) if trace == "SECRET_ABSOLUTE" else trace
    _with_profile(sweep, trace)
    report = load(sweep)
    path = write_report(report, out)
    assert SECRET not in _published_bytes(out)
    text = path.read_text()
    assert "not published: 1/profile/profile.json" in text
    assert "neither linked nor copied" in capsys.readouterr().err
    # the report in the sweep directory links nothing outside it either
    files = publish(load(sweep), sweep)
    assert "1" not in files.traces and files.refused


def test_a_trace_replaced_by_a_link_out_of_the_sweep_is_not_copied(tmp_path):
    sweep, out = tmp_path / "sweep", tmp_path / "published"
    secret = _secret(tmp_path)
    make_sweep(sweep)
    _with_profile(sweep, f"{TRACE_DIR}/{TRACE_FILE}")
    trace = sweep / "1" / "profile" / TRACE_DIR / TRACE_FILE
    trace.unlink()
    trace.symlink_to(secret)
    report = load(sweep)
    files = publish(report, out)
    assert files.traces == {} and SECRET not in _published_bytes(out)
    assert "leads out of the sweep directory" in files.refused[0]
    assert str(secret) in files.refused[0]  # where it led


def test_a_memory_snapshot_named_outside_the_sweep_is_not_copied(tmp_path):
    sweep, out = tmp_path / "sweep", tmp_path / "published"
    secret = _secret(tmp_path)
    make_sweep(sweep)
    _with_profile(sweep, f"{TRACE_DIR}/{TRACE_FILE}", snapshot="../../../secret.txt")
    files = publish(load(sweep), out)
    assert files.snapshots == {} and SECRET not in _published_bytes(out)
    assert "1" in files.traces  # the variant's own trace is still published
    assert secret.read_bytes() == SECRET


def test_a_profile_json_that_is_a_link_out_is_skipped_and_named(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    make_sweep(sweep)
    foreign = tmp_path / "foreign-profile.json"
    foreign.write_text(json.dumps({"schema_version": 1, "trace": "x"}))
    (sweep / "1" / "profile").mkdir(parents=True)
    (sweep / "1" / "profile" / PROFILE_FILE).symlink_to(foreign)
    report = load(sweep)
    assert report.profiles["1"] is None
    assert report.skipped == ["1/profile/profile.json: leads out of the sweep"]
    assert "leads out of the sweep directory" in capsys.readouterr().err


def test_records_reached_through_a_link_out_of_the_sweep_are_skipped(tmp_path, capsys):
    sweep, elsewhere = tmp_path / "sweep", tmp_path / "elsewhere"
    plan = make_sweep(sweep)
    make_sweep(elsewhere, speedup=0.5)
    # one record, then a whole job directory, replaced by links to another sweep's
    record = sweep / "0" / "trials" / "r000.json"
    record.unlink()
    record.symlink_to(elsewhere / "0" / "trials" / "r000.json")
    os.rename(sweep / "1", tmp_path / "moved")
    (sweep / "1").symlink_to(elsewhere / "1")
    skipped: list[str] = []
    trials = load_trials(sweep, plan, skipped)
    assert 0 not in trials["0"] and trials["1"] == {}
    assert len(skipped) == 1 + 8 and all("leads out of the sweep" in s for s in skipped)
    assert "0/trials/r000.json" in capsys.readouterr().err


@pytest.mark.parametrize("job_dir", ["../elsewhere/0", "/tmp", "", "a/../../b"])
def test_an_experiment_json_whose_job_directory_leads_out_is_refused(tmp_path, job_dir):
    sweep = tmp_path / "sweep"
    make_sweep(sweep)
    data = json.loads((sweep / EXPERIMENT_FILE).read_text())
    data["plan"]["variants"][0]["dir"] = job_dir
    (sweep / EXPERIMENT_FILE).write_text(json.dumps(data))
    with pytest.raises(ValueError, match="allowed: a relative path inside the sweep"):
        Experiment.load(sweep)
    done = subprocess.run(
        [*command("perflab-report"), str(sweep), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "dir=" in done.stderr and EXPERIMENT_FILE in done.stderr


@pytest.mark.slow
def test_perflab_report_out_never_copies_a_file_profile_json_points_at(tmp_path):
    """The hostile pass's case as a user would hit it: a profile.json naming a file outside
    the sweep, then `perflab-report SWEEP --out DIR`."""
    sweep, out = tmp_path / "sweep", tmp_path / "published"
    _secret(tmp_path)
    make_sweep(sweep)
    _with_profile(sweep, "../../../secret.txt")
    done = subprocess.run(
        [*command("perflab-report"), str(sweep), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert SECRET not in _published_bytes(out)
    assert "1/profile/profile.json" in done.stderr and "neither linked nor copied" in done.stderr
    assert "not published: 1/profile/profile.json" in (out / "report.md").read_text()


def _grouped(root: Path, dirs: list[str]) -> Path:
    """A grouped sweep's index naming each of ``dirs`` as a group's directory."""
    root.mkdir(parents=True)
    groups = [{"key": f"g{i}", "dir": d, "state": "done"} for i, d in enumerate(dirs)]
    (root / GROUPS_FILE).write_text(json.dumps({"groups": groups}))
    return root


def test_a_groups_index_naming_a_directory_outside_is_refused(tmp_path):
    make_sweep(tmp_path / "elsewhere")
    for bad in ("../../elsewhere", str(tmp_path / "elsewhere")):
        sweep = _grouped(tmp_path / f"sweep{len(bad)}", [bad])
        with pytest.raises(Exception, match="not a relative path inside groups/"):
            load_groups(sweep)


def test_a_group_directory_that_is_a_link_out_is_not_read(tmp_path):
    make_sweep(tmp_path / "elsewhere")
    sweep = _grouped(tmp_path / "sweep", ["a"])
    (sweep / "groups").mkdir()
    (sweep / "groups" / "a").symlink_to(tmp_path / "elsewhere")
    [(entry, report)] = load_groups(sweep)
    assert report is None and "leads out of the sweep directory" in entry.state


def test_a_record_that_is_a_loop_of_links_is_skipped_not_a_traceback(tmp_path):
    sweep = tmp_path / "sweep"
    plan = make_sweep(sweep)
    record = sweep / "0" / "trials" / "r001.json"
    record.unlink()
    record.symlink_to(sweep / "0" / "trials" / "loop.json")
    (sweep / "0" / "trials" / "loop.json").symlink_to(record)
    skipped: list[str] = []
    trials = load_trials(sweep, plan, skipped)
    assert 1 not in trials["0"] and "cannot be resolved" in skipped[0]


def test_an_experiment_json_that_is_a_link_to_another_sweeps_is_refused(tmp_path):
    sweep, elsewhere = tmp_path / "sweep", tmp_path / "elsewhere"
    make_sweep(sweep)
    make_sweep(elsewhere)
    (sweep / EXPERIMENT_FILE).unlink()
    (sweep / EXPERIMENT_FILE).symlink_to(elsewhere / EXPERIMENT_FILE)
    with pytest.raises(ValueError, match="leads out of the sweep directory"):
        Experiment.load(sweep)


@pytest.mark.parametrize(
    "spoil, named",
    [
        (lambda p: p.pop("overhead"), "overhead"),
        (lambda p: p.update(families_us={"gemm": "12"}), "families_us"),
        (lambda p: p.update(top_ops=[{"name": 3}]), "top_ops[0]"),
        (lambda p: p.update(profiled_steps=0), "profiled_steps"),
        # a path that is no string is refused here, before anything follows it
        (lambda p: p.update(trace=["a list"]), "trace"),
        (lambda p: p.update(device="tpu"), "device"),
        (lambda p: p.update(schema_version=3), "schema_version=3"),
    ],
)
def test_a_profile_json_without_what_the_report_reads_is_skipped_and_named(tmp_path, spoil, named):
    """The hostile pass fed perflab-report a profile.json of the right version holding
    only "trace": a KeyError out of the report. Now it is an unreadable file, named."""
    sweep = tmp_path / "sweep"
    make_sweep(sweep)
    _with_profile(sweep, f"{TRACE_DIR}/{TRACE_FILE}")
    path = sweep / "1" / "profile" / PROFILE_FILE
    profile = json.loads(path.read_text())
    spoil(profile)
    path.write_text(json.dumps(profile))
    report = load(sweep)
    assert report.profiles["1"] is None
    assert report.skipped[0].startswith(f"1/profile/{PROFILE_FILE}: {named}")
    assert "skipped an unreadable file: 1/profile/profile.json" in write_report(report).read_text()


@pytest.mark.parametrize(
    "resumed", ["abc", [{"at_round": 1}], [{"at_round": "1", "trials_kept": 3, "at": "x"}]]
)
def test_an_experiment_json_with_unreadable_sessions_is_refused(tmp_path, resumed):
    """Sessions place the records of a resumed sweep: a hostile "resumed" is refused as
    an unreadable experiment.json, not a crash in the analysis."""
    make_sweep(tmp_path)
    data = json.loads((tmp_path / EXPERIMENT_FILE).read_text())
    data["resumed"] = resumed
    (tmp_path / EXPERIMENT_FILE).write_text(json.dumps(data))
    with pytest.raises(ValueError, match="resumed: not a list"):
        Experiment.load(tmp_path)
