"""What a trial may use: its memory (trial.max_memory_mb) and its log (trial.max_log_mb),
bounded while it runs by the process that waits for it (perflab.process.isolation.Limits)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from test_resilience import BASE, perflab
from unbounded import CHUNK, MiB

from perflab.config.schema import TrialConfig
from perflab.errors import ConfigError, DiskFull
from perflab.experiment.launcher import _output_lost
from perflab.formats.records import load_record
from perflab.formats.trial_parts import Invocation
from perflab.process.isolation import (
    Limits,
    Worker,
    machine_memory_bytes,
    run_isolated,
    tree_rss_bytes,
    trim_log,
)
from perflab.process.trial_request import DEFAULT_MEMORY_SHARE, _memory_cap


def test_a_trial_over_its_memory_cap_is_killed_with_a_message_naming_the_cap():
    limits = Limits(max_memory_bytes=600 * MiB, memory_setting="trial.max_memory_mb=600")
    start = time.monotonic()
    outcome = run_isolated("unbounded:grows", None, timeout_s=120, limits=limits)
    assert outcome.kind == "memory_cap", outcome
    assert time.monotonic() - start < 30
    assert "over its cap of 600 MiB (trial.max_memory_mb=600); killed" in outcome.message
    assert "Raise trial.max_memory_mb" in outcome.message
    used = int(outcome.message.split("used ")[1].split(" MiB")[0].replace(",", ""))
    assert 600 < used < 600 + 600  # sampled every 0.1 s: caught soon after the cap


def test_the_memory_cap_counts_the_processes_a_trial_started():
    limits = Limits(max_memory_bytes=700 * MiB, memory_setting="trial.max_memory_mb=700")
    outcome = run_isolated("unbounded:child_grows", None, timeout_s=120, limits=limits)
    assert outcome.kind == "memory_cap", outcome


def test_a_worker_over_its_memory_cap_is_replaced():
    worker = Worker()
    try:
        limits = Limits(max_memory_bytes=600 * MiB, memory_setting="trial.max_memory_mb=600")
        outcome = worker.call("unbounded:grows", None, timeout_s=120, limits=limits)
        assert outcome.kind == "memory_cap" and not worker.running
        assert worker.call("os:getenv", "HOME", timeout_s=120).kind == "ok"  # a fresh one
    finally:
        worker.close()


def test_a_log_keeps_its_first_bytes_and_says_how_many_it_dropped(tmp_path):
    log, cap, total = tmp_path / "r000.log", 256 * 1024, 4 * MiB
    limits = Limits(log=log, max_log_bytes=cap)
    outcome = run_isolated("unbounded:prints", total, timeout_s=60, log=log, limits=limits)
    assert outcome.kind == "ok", outcome
    text = log.read_text()
    kept, marker = text[:cap], text[cap:]
    assert kept == ("y" * (CHUNK - 1) + "\n") * (cap // CHUNK)
    assert marker.startswith("\n[perflab: ") and marker.endswith("]\n")
    assert marker.count("\n") == 2  # one line
    dropped = int(marker.split("perflab: ")[1].split(" more bytes")[0].replace(",", ""))
    assert dropped == total - cap
    assert "trial.max_log_mb=0.25" in marker and "raise trial.max_log_mb" in marker


def test_a_log_is_cut_back_while_the_trial_runs_not_only_after(tmp_path):
    log, cap, total = tmp_path / "r000.log", 1 * MiB, 32 * MiB
    limits = Limits(log=log, max_log_bytes=cap)
    outcome = run_isolated(
        "unbounded:prints_and_watches", total, timeout_s=60, log=log, limits=limits
    )
    assert outcome.kind == "ok", outcome
    # 32 MiB over ~1 s, cut every 0.1 s: never more than a few MiB on disk
    assert outcome.value < total / 2
    assert log.stat().st_size < cap + 300


def test_trim_log_cuts_to_the_cap_and_leaves_a_small_log_alone(tmp_path):
    log = tmp_path / "x.log"
    assert trim_log(log, 10) == 0  # no log yet
    log.write_bytes(b"a" * 100)
    assert trim_log(log, 200) == 0 and log.stat().st_size == 100
    assert trim_log(log, 40) == 60 and log.read_bytes() == b"a" * 40


def test_tree_rss_reads_this_process_and_a_child():
    alone = tree_rss_bytes(os.getpid())
    assert alone is not None and alone > 10 * MiB
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        assert tree_rss_bytes(os.getpid()) > alone  # type: ignore[operator]
    finally:
        child.kill()
        child.wait()
    assert tree_rss_bytes(2**22 + 1) is None  # no such process


def test_the_default_memory_cap_is_a_share_of_the_machine():
    machine = machine_memory_bytes()
    assert machine is not None and machine > 256 * MiB
    cap, setting = _memory_cap(None)
    assert cap == round(machine * DEFAULT_MEMORY_SHARE)
    assert setting.startswith("trial.max_memory_mb=null: 80% of the machine's ")
    assert _memory_cap(0) == (0, "trial.max_memory_mb=0")  # no cap
    assert _memory_cap(512) == (512 * MiB, "trial.max_memory_mb=512")


@pytest.mark.parametrize(("field", "value"), [("max_memory_mb", -1.0), ("max_log_mb", -0.5)])
def test_negative_caps_are_refused_naming_the_field(field, value):
    from perflab.config.rules import _validate_trial

    with pytest.raises(ConfigError, match=f"trial.{field}={value}"):
        _validate_trial(TrialConfig(**{field: value}))


def test_a_full_disk_names_a_trial_log_that_is_the_largest_file(tmp_path):
    sweep = tmp_path / "sweep"
    trials = sweep / "0" / "trials"
    trials.mkdir(parents=True)
    (trials / "r000.json").write_text("{}")
    with open(trials / "r001.log", "wb") as f:
        f.truncate(57 * MiB)  # sparse: its size without the disk space
    message = _output_lost(sweep, DiskFull("no space left on the disk (...)"))
    assert f"the largest file written is {trials / 'r001.log'} (57.0 MiB)" in message
    assert "trial.max_log_mb caps such logs" in message
    # a result that is the largest file is not named: it is not the trial's doing
    with open(sweep / "summary.json", "wb") as f:
        f.truncate(90 * MiB)
    assert "largest file" not in _output_lost(sweep, DiskFull("no space left"))


# The model of tests/unbounded.py on short trials; its leaking variant goes over the cap
UNBOUNDED = tuple(a.replace("tests.faulty.build", "tests.unbounded.build") for a in BASE)


@pytest.mark.slow
def test_a_sweep_records_a_trial_over_its_memory_cap_and_caps_every_log(tmp_path):
    sweep = tmp_path / "sweep"
    result = perflab(
        tmp_path,
        *UNBOUNDED,
        "trial.min_s=0",
        "schedule.min_rounds=3",
        "schedule.max_rounds=3",
        "trial.steady_tolerance=0",  # the warm-up ends after its 2 steps
        "trial.max_memory_mb=1200",
        "trial.max_log_mb=0.25",
        "+model.args.print_kb=64",
        "+model.args.leak_mb=0,256",
        "+schedule.treatments={model.args.leak_mb:0}",
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 1, result.stderr
    leaked = load_record(sweep / "1" / "trials" / "r000.json")
    assert leaked.status == "failed" and leaked.error.type == "MemoryCapExceeded"
    assert "over its cap of 1,200 MiB (trial.max_memory_mb=1200)" in leaked.error.message
    assert not (sweep / "1" / "trials" / "r001.json").exists()  # not scheduled again
    for job in ("0", "sentinel"):
        for r in range(3):
            assert load_record(sweep / job / "trials" / f"r{r:03d}.json").status == "ok"
            log = sweep / job / "trials" / f"r{r:03d}.log"
            assert log.stat().st_size < 256 * 1024 + 300
            assert log.read_text().splitlines()[-1].startswith("[perflab: ")
    summary = json.loads((sweep / "summary.json").read_text())
    why = {v["label"]: v["failed"].get("0") for v in summary["variants"]}
    assert "MemoryCapExceeded" in why["model.args.leak_mb=256"]
    assert "FAILED trials in model.args.leak_mb=256" in result.stdout


def test_the_caps_may_change_when_a_sweep_resumes():
    from perflab.experiment import resume

    before = {"batch_size": 8, "trial": {"min_steps": 20, "max_log_mb": 10.0}}
    after = {"batch_size": 8, "trial": {"min_steps": 20, "max_log_mb": 50.0}}
    after["trial"]["max_memory_mb"] = 4096.0  # type: ignore[index]
    invocation = Invocation(cwd="/w", git_commit="abc")
    first = resume.fingerprint({"0": before}, invocation)["configs"]
    assert resume.fingerprint({"0": after}, invocation)["configs"] == first
