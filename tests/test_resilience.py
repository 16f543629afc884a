"""Nothing lost when things go wrong: faults injected into real sweeps (the installed
`perflab` command, every trial in its own process), interrupts, resume, unreadable files
and unwritable output directories."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import console_scripts
import faulty
import pytest
from fake_trials import FakeTrials
from processes import alive

from perflab.analysis.summarize import analyze
from perflab.analysis.sweep import (
    Experiment,
    ScheduleSettings,
    load_trials,
    read_records,
    read_sweep,
)
from perflab.errors import ConfigError
from perflab.experiment import resume
from perflab.formats.records import MIN_FREE_BYTES, check_writable, load_record
from perflab.formats.summary import Summary
from perflab.formats.sweepdir import EXPERIMENT_FILE
from perflab.formats.trial_parts import Invocation
from perflab.process.isolation import run_isolated

PERFLAB = console_scripts.command("perflab")
# The model of tests/faulty.py on short trial settings, on the CPU: its oom fault raises
# the error a full GPU would, without a GPU
BASE = (*faulty.ARGS, "device=cpu")  # last: the resume hint the tests read starts with ARGS
FAULTY = (*BASE, "trial.min_s=0")  # ~0.1 s per trial
ROUNDS = ("schedule.min_rounds=3", "schedule.max_rounds=3")


def perflab(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PERFLAB, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def records(sweep: Path) -> dict[str, dict[str, str]]:
    """job dir -> record file -> status, for every record on disk."""
    out: dict[str, dict[str, str]] = {}
    for path in sorted(sweep.glob("*/trials/r*.json")):
        out.setdefault(path.parent.parent.name, {})[path.name] = load_record(path).status
    return out


def left_in_group(pgid: int, wait_s: float = 10.0) -> list[str]:
    """Live processes (zombies aside) still in a process group, after up to wait_s."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                alive.append(stat.parent.name)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


# --- faults inside trials ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.heavy
def test_every_kind_of_failed_trial_is_recorded_and_the_sweep_goes_on(tmp_path):
    sweep = tmp_path / "sweep"
    result = perflab(
        tmp_path,
        *FAULTY,
        *ROUNDS,
        "trial.timeout_s=4",
        # the warm-up rule may run to its cap (5 s by default): past the timeout
        "trial.warmup_max_s=1",
        "+model.args.fault=none,raise,oom,segfault,sigkill,hang",
        "+schedule.treatments={model.args.fault:none}",
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 1, result.stderr
    # every variant's record, with the cause; a failed variant is not scheduled again
    dirs = {"raise": "1", "oom": "2", "segfault": "3", "sigkill": "4", "hang": "5"}
    on_disk = records(sweep)
    assert on_disk["0"] == on_disk["sentinel"] == {f"r{r:03d}.json": "ok" for r in range(3)}
    for fault, job in dirs.items():
        assert on_disk[job] == {"r000.json": "timeout" if fault == "hang" else "failed"}
    error = {f: load_record(sweep / j / "trials" / "r000.json").error for f, j in dirs.items()}
    assert (error["raise"].type, error["raise"].message) == ("RuntimeError", "injected fault")
    assert error["oom"].type == "OutOfMemoryError" and "Traceback" in error["oom"].traceback
    assert error["segfault"].message == "trial process killed by signal SIGSEGV"
    assert error["sigkill"].message == "trial process killed by signal SIGKILL"
    assert error["hang"].message == "no result after 4 s; killed"
    # the summary, the console and the report say what failed and why
    summary = json.loads((sweep / "summary.json").read_text())
    why = {v["label"]: v["failed"].get("0") for v in summary["variants"]}
    assert "lower batch_size" in why["model.args.fault=oom"]
    assert why["model.args.fault=hang"].startswith("timeout: ")
    assert "FAILED trials in model.args.fault=segfault: 1" in result.stdout
    assert "trials failed in: model.args.fault=raise;" in result.stderr
    report = (sweep / "report.md").read_text()
    section = report.split("## Failures and notes")[1].split("## ")[0]
    for fault, job in dirs.items():
        assert f"model.args.fault={fault}, round 1 ({job}/trials/r000.json)" in section
    assert "SIGSEGV" in section and "OutOfMemoryError" in section

    # unreadable files in the sweep directory: skipped and named, never a crash
    bad = {
        "0/trials/r007.json": '{"schema_version": 1, "status": "ok", "conf',  # truncated
        "0/trials/r008.json": "not json at all",
        "1/trials/r009.json": '{"hello": "world"}',  # foreign
        "sentinel/trials/r010.json": '{"schema_version": 99, "status": "ok"}',  # future
    }
    for name, text in bad.items():
        (sweep / name).write_text(text)
    report_run = console_scripts.run("perflab-report", str(sweep), timeout=120)
    assert report_run.returncode == 0, report_run.stderr
    notes = (sweep / "report.md").read_text().split("## Failures and notes")[1]
    for name in bad:
        assert f"perflab: warning: skipping {sweep / name}: " in report_run.stderr
        assert f"skipped an unreadable file: {name}: ".replace("_", "\\_") in notes
    assert "schema\\_version=99 is not supported" in notes


# --- interrupts and resume -----------------------------------------------------------

SLOW = (  # trials of ~0.6 s, so that an interrupt lands inside one
    *BASE,
    "trial.min_s=0.5",
    "schedule.min_rounds=3",
    "schedule.max_rounds=3",
    "+model.args.step_us=2000,2100",
    "+schedule.treatments={model.args.step_us:2000}",
)


def interrupt_mid_trial(tmp_path: Path, sweep: Path, to_group: bool, sig: int) -> tuple:
    """Start a sweep, wait until its 4th trial (round 2's first) is running, signal it.
    Returns (completed process, trials started, process group)."""
    started = tmp_path / "started.log"
    proc = subprocess.Popen(
        [*PERFLAB, "-m", *SLOW, f"+model.args.started_log={started}"]
        + [f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell job has
    )
    deadline = time.monotonic() + 120
    while not started.exists() or len(started.read_text().split()) < 4:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    time.sleep(0.1)  # inside the trial's timed block, ~0.5 s from its end
    if to_group:
        os.killpg(proc.pid, sig)  # what Ctrl-C in a terminal does
    else:
        proc.send_signal(sig)  # `kill PID`: the trial process gets nothing
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), started, proc.pid


def assert_interrupted_cleanly(result, started: Path, pgid: int, sweep: Path) -> None:
    assert result.returncode == 130, result.stderr
    assert "interrupted; finished trials and their records are kept" in result.stderr
    assert "resume with: perflab -m model=custom" in result.stderr
    assert f"hydra.sweep.dir={sweep}" in result.stderr
    assert not left_in_group(pgid)  # no fork server left behind
    # nor a trial process (each leads a process group of its own)
    assert not alive({int(pid) for pid in started.read_text().split()}, wait_s=10)
    # the 3 trials of round 1 are kept; the interrupted 4th left no record at all
    assert len(started.read_text().split()) == 4
    assert records(sweep) == {j: {"r000.json": "ok"} for j in ("0", "1", "sentinel")}
    summary = json.loads((sweep / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted" and summary["rounds"] == 1
    assert "**Incomplete**" in (sweep / "report.md").read_text()


@pytest.mark.slow
@pytest.mark.heavy
def test_ctrl_c_mid_trial_then_the_same_command_resumes_to_a_complete_experiment(tmp_path):
    sweep = tmp_path / "sweep"
    result, started, pgid = interrupt_mid_trial(tmp_path, sweep, True, signal.SIGINT)
    assert_interrupted_cleanly(result, started, pgid, sweep)
    first = {p: p.stat().st_mtime_ns for p in sweep.glob("*/trials/r*.json")}

    again = perflab(
        tmp_path, *SLOW, f"+model.args.started_log={started}", f"hydra.sweep.dir={sweep}"
    )
    assert again.returncode == 0, again.stderr
    assert "resuming: 3 finished trial(s) on disk, up to round 1, are kept" in again.stdout
    assert all(p.stat().st_mtime_ns == t for p, t in first.items())  # kept, not re-run
    full = {"r000.json": "ok", "r001.json": "ok", "r002.json": "ok"}
    assert records(sweep) == {j: full for j in ("0", "1", "sentinel")}
    experiment = json.loads((sweep / EXPERIMENT_FILE).read_text())
    assert experiment["rounds"] == 3 and experiment["stop_reason"] in (
        "max rounds",
        "precision reached",
    )
    assert [r["at_round"] for r in experiment["resumed"]] == [1]
    assert experiment["resumed"][0]["trials_kept"] == 3 and len(experiment["round_s"]) == 3
    summary = json.loads((sweep / "summary.json").read_text())
    assert [(v["label"], v["trials"], v["ok"]) for v in summary["variants"]] == [
        ("model.args.step_us=2000", 3, 3),
        ("model.args.step_us=2100", 3, 3),
        ("model.args.step_us=2000 (A/A copy)", 3, 3),
    ]
    assert "resumed at round 2 (3 finished trials kept" in (sweep / "report.md").read_text()

    # another experiment in the same directory is refused before anything runs
    other = perflab(
        tmp_path,
        *SLOW,
        "trial.min_steps=6",
        f"+model.args.started_log={started}",
        f"hydra.sweep.dir={sweep}",
    )
    assert other.returncode == 2
    [line] = other.stderr.strip().splitlines()
    assert line.startswith(f"perflab: error: hydra.sweep.dir={sweep}: holds a different ")
    assert "(trial.min_steps: 5 -> 6)" in line and "or a new hydra.sweep.dir" in line

    # raised limits continue a finished experiment; a corrupt record is measured again
    (sweep / "1" / "trials" / "r001.json").write_text("{truncated")
    more = perflab(
        tmp_path,
        *SLOW,
        "schedule.max_rounds=4",
        "schedule.target_half_width=0.0001",
        f"+model.args.started_log={started}",
        f"hydra.sweep.dir={sweep}",
    )
    assert more.returncode == 0, more.stderr
    assert f"skipping {sweep / '1' / 'trials' / 'r001.json'}" in more.stderr
    full["r003.json"] = "ok"
    assert records(sweep) == {j: full for j in ("0", "1", "sentinel")}
    assert len(started.read_text().split()) == 4 + 6 + 1 + 3


@pytest.mark.slow
def test_sigterm_to_the_sweep_alone_behaves_like_ctrl_c(tmp_path):
    sweep = tmp_path / "sweep"
    result, started, pgid = interrupt_mid_trial(tmp_path, sweep, False, signal.SIGTERM)
    assert_interrupted_cleanly(result, started, pgid, sweep)


def _interrupted(_: object) -> None:
    raise KeyboardInterrupt


def _terminated(_: object) -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def _killed(_: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_trial_process_stopped_by_sigint_or_sigterm_interrupts_instead_of_failing():
    with pytest.raises(KeyboardInterrupt):
        run_isolated(_interrupted, None, timeout_s=120)
    with pytest.raises(KeyboardInterrupt):
        run_isolated(_terminated, None, timeout_s=120)
    # SIGKILL is the OOM killer or a hard kill: the trial failed
    outcome = run_isolated(_killed, None, timeout_s=120)
    assert outcome.kind == "crashed" and "SIGKILL" in outcome.message


def test_resume_replays_the_shuffled_order_and_completes_the_partial_round(tmp_path, monkeypatch):
    from perflab.config.plan import Job, build_plan
    from perflab.config.schema import ScheduleConfig
    from perflab.experiment import schedule

    jobs = [Job(i, [f"amp={a}"], {"amp": a}) for i, a in enumerate(("off", "bf16", "true"))]
    plan = build_plan(jobs, {}, sentinel=True)
    sched = ScheduleConfig(min_rounds=5, max_rounds=5, shuffle_seed=3)

    def run(sweep: Path, fake: FakeTrials, previous=None) -> Summary:
        monkeypatch.setattr(schedule, "run_one", fake)
        runs = {
            v.name: schedule.VariantRun(None, sweep / v.dir, v.source)  # type: ignore[arg-type]
            for v in plan.variants
        }
        return schedule.run_experiment(
            plan, runs, sched, sweep, lambda _: None, {"x": 1}, previous
        ).summary

    whole = FakeTrials()
    assert run(tmp_path / "whole", whole).rounds == 5
    assert len(whole.calls) == 20 and len(set(whole.calls[:4])) == 4
    first = FakeTrials(interrupt_at=9)  # round 3, its second trial
    summary = run(tmp_path / "cut", first)
    assert summary.stop_reason == "interrupted" and summary.rounds == 2
    assert first.calls == whole.calls[:9]
    previous = Experiment.load(tmp_path / "cut")
    second = FakeTrials()
    summary = run(tmp_path / "cut", second, previous)
    assert first.calls + second.calls == whole.calls  # the same order, nothing run twice
    assert summary.rounds == 5 and [v.trials for v in summary.variants] == [5] * 4
    experiment = Experiment.load(tmp_path / "cut")
    assert experiment.resumed[0].at_round == 2 and experiment.resumed[0].trials_kept == 9
    again = FakeTrials()
    run(tmp_path / "cut", again, experiment)  # finished: nothing runs
    assert again.calls == [] and len(Experiment.load(tmp_path / "cut").resumed) == 1


# --- what "the same experiment" means ------------------------------------------------


def _experiment(tmp_path: Path) -> tuple[Experiment, dict]:
    from sweeps import SCHEDULE, make_sweep

    plan = make_sweep(tmp_path)
    config = {"batch_size": 8, "trial": {"min_steps": 20}, "schedule": {"max_rounds": 10}}
    fp = resume.fingerprint({"0": config, "1": config}, Invocation(cwd="/w", git_commit="abc"))
    old = Experiment(plan, ScheduleSettings.from_dict(SCHEDULE), "max rounds", 8, 1.0, fp)
    return old, fp


def test_the_same_experiment_may_change_only_its_stopping_limits_and_outputs(tmp_path):
    old, fp = _experiment(tmp_path)
    plan = old.plan
    assert resume.differences(old, plan, fp) == []
    config = {"batch_size": 8, "trial": {"min_steps": 20}, "schedule": {"max_rounds": 40}}
    config |= {"report": {"dir": "reports/x"}, "profile": False}
    extended = resume.fingerprint(
        {"0": config, "1": config}, Invocation(cwd="/w", git_commit="abc")
    )
    assert resume.differences(old, plan, extended) == []
    changed = {**config, "batch_size": 16}
    other = resume.fingerprint({"0": config, "1": changed}, Invocation(cwd="/w", git_commit="abc"))
    assert resume.differences(old, plan, other) == ["batch_size: 8 -> 16"]
    moved = resume.fingerprint({"0": config, "1": config}, Invocation(cwd="/w", git_commit="def"))
    moved["machine"]["torch"] = "9.9"
    assert resume.differences(old, plan, moved) == [
        f"torch: {fp['machine']['torch']} -> 9.9",
        "git_commit: abc -> def",
    ]


def test_a_directory_that_cannot_be_resumed_is_refused_with_one_line(tmp_path):
    old, fp = _experiment(tmp_path)
    assert resume.previous(tmp_path / "new", old.plan, fp) is None
    (tmp_path / EXPERIMENT_FILE).write_text(json.dumps(old.to_dict()))
    assert resume.previous(tmp_path, old.plan, fp) == old
    (tmp_path / EXPERIMENT_FILE).write_text("{")
    with pytest.raises(ConfigError, match=r"hydra.sweep.dir=.*: its experiment.json is unreadable"):
        resume.previous(tmp_path, old.plan, fp)
    (tmp_path / EXPERIMENT_FILE).unlink()
    with pytest.raises(ConfigError, match=r"has trial records \(0/trials/r000.json\) but no"):
        resume.previous(tmp_path, old.plan, fp)


def test_fingerprints_of_older_perflabs_are_read_and_code_changes_named(tmp_path):
    old, fp = _experiment(tmp_path)
    # before 2026-11-23 the code was not hashed
    uncoded = replace(old, fingerprint={k: v for k, v in fp.items() if k != "code"})
    assert resume.differences(uncoded, old.plan, fp) == [
        "code: not fingerprinted by the perflab that started this directory"
    ]
    # before 2026-11-26 no imports were followed: read as none
    code = {k: v for k, v in fp["code"].items() if k != "imports"}
    assert resume.differences(replace(old, fingerprint={**fp, "code": code}), old.plan, fp) == []
    imports = {"helper": {"by": "my_model", "hash": "a"}, "gone": {"by": "my_model", "hash": "b"}}
    before = replace(old, fingerprint={**fp, "code": {**fp["code"], "imports": imports}})
    now = {**fp, "code": {**fp["code"], "imports": {"helper": {"by": "my_model", "hash": "c"}}}}
    assert resume.differences(before, old.plan, now) == [
        "code: the source of gone (imported by my_model) changed",
        "code: the source of helper (imported by my_model) changed",
    ]


def test_a_fingerprint_of_the_wrong_shape_is_refused_naming_the_field(tmp_path):
    old, fp = _experiment(tmp_path)
    bad = {**fp, "machine": {**fp["machine"], "torch": 3}}
    (tmp_path / EXPERIMENT_FILE).write_text(json.dumps(replace(old, fingerprint=bad).to_dict()))
    with pytest.raises(ConfigError, match=r"unreadable \(fingerprint.machine.torch=3: not a str"):
        resume.previous(tmp_path, old.plan, fp)
    (tmp_path / EXPERIMENT_FILE).write_text(json.dumps(replace(old, fingerprint={}).to_dict()))
    with pytest.raises(ConfigError, match=r"has no fingerprint \(written by a perflab that"):
        resume.previous(tmp_path, old.plan, fp)


def test_unreadable_records_are_skipped_and_named_by_the_analysis(tmp_path, capsys):
    from sweeps import make_sweep

    make_sweep(tmp_path)
    (tmp_path / "0" / "trials" / "r003.json").write_text('{"schema_version": 99}')
    (tmp_path / "1" / "trials" / "r004.json").write_text('{"schema_version": 1, "status": "ok"')
    records = read_sweep(tmp_path)
    trials, skipped = records.trials, records.skipped
    assert 3 not in trials["0"] and 4 not in trials["1"] and len(trials["sentinel"]) == 8
    assert skipped[0].startswith("0/trials/r003.json: schema_version=99 is not supported")
    assert skipped[1].startswith("1/trials/r004.json: not a readable perflab record")
    assert capsys.readouterr().err.count("perflab: warning: skipping") == 2
    assert analyze(records.experiment, trials).variants[0].trials == 7  # and no crash
    # a later read by the same command (a resumed sweep's, at its end) names them no more
    again = read_records(tmp_path, records.experiment, records)
    assert again.skipped == skipped and again.trials == trials
    assert capsys.readouterr().err == ""
    assert load_trials(tmp_path, records.experiment.plan) == trials  # a new command: named
    assert capsys.readouterr().err.count("perflab: warning: skipping") == 2


# --- unwritable or full output directories ---------------------------------------------


def test_check_writable_refuses_a_path_under_a_file_and_a_full_disk(tmp_path, monkeypatch):
    check_writable(tmp_path / "new" / "dir", "hydra.sweep.dir")  # creatable: fine
    assert not (tmp_path / "new").exists()  # and nothing created by the check
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"hydra.sweep.dir=.*/file/x: .*file is not a directory"):
        check_writable(tmp_path / "file" / "x", "hydra.sweep.dir")
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1, 1, 0))  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"report.dir=.*: only 0.0 MB free on its disk"):
        check_writable(tmp_path, "report.dir")
    assert MIN_FREE_BYTES == 50 * 2**20


@pytest.mark.skipif(os.geteuid() == 0, reason="permission bits do not stop root")
def test_check_writable_refuses_a_read_only_directory(tmp_path):
    (tmp_path / "ro").mkdir(mode=0o555)
    with pytest.raises(ConfigError, match=r"cannot write in .*ro \(Permission denied\)"):
        check_writable(tmp_path / "ro" / "sweep", "hydra.sweep.dir")


FULL_DISK = (  # perflab's CLI with shutil.disk_usage saying the disk is full
    "import shutil, sys; "
    "shutil.disk_usage = lambda p: shutil._ntuple_diskusage(10**12, 10**12 - 10**6, 10**6); "
    "sys.argv[0] = 'perflab'; from perflab.cli import main; main()"
)


@pytest.mark.slow
def test_a_full_disk_or_an_unwritable_directory_stops_before_measuring(tmp_path):
    (tmp_path / "file").write_text("")
    cases = [
        # checked before Hydra creates it (perflab.experiment.launcher.prepare)
        (["-m", "hydra.sweep.dir=file/sweep"], "hydra.sweep.dir=file/sweep: "),
        (["hydra.run.dir=file/run"], "cannot write the results: [Errno 20]"),
        (["-m", "hydra.sweep.dir=sweep"], "hydra.sweep.dir=sweep: only 1.0 MB free on its disk"),
        (["hydra.run.dir=run"], "/run: only 1.0 MB free on its disk"),
    ]
    for i, (args, message) in enumerate(cases):
        cmd = [sys.executable, "-c", FULL_DISK] if i >= 2 else [*PERFLAB]
        result = subprocess.run(
            [*cmd, *args, *FAULTY], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 2, (args, result.stderr)
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("perflab: error: ") and message in line, line
    assert not list(tmp_path.glob("**/r*.json")) and not list(tmp_path.glob("**/000.json"))
