"""Warm workers (schedule.isolation=worker), device=cpu: one process serves a variant's
trials of a generation and keeps its built workload, is replaced at the generation's end
or when a trial fails, and every record, the summary and the report say which process
ran what and what it cost."""

from __future__ import annotations

import gc
import json
import os
import signal
import time
from pathlib import Path

import pytest
from test_experiment import FAST, perflab, sweep_dir
from tiny import TINY

from perflab.analysis import stats
from perflab.analysis.sweep import ScheduleSettings
from perflab.analysis.variants import parts_written
from perflab.formats.records import load_record
from perflab.formats.trial_parts import CostParts, TrialWorker
from perflab.measure.trial import uncounted
from perflab.process.isolation import Worker
from perflab.process.trial_request import RUN_TRIAL, TrialRequest
from perflab.report.time_section import rounds

# kept by a worker between calls (module state survives in the process, not across)
CALLS = 0


def count_calls(_: object) -> tuple[int, int]:
    global CALLS
    CALLS += 1
    return os.getpid(), CALLS


def crashes(_: object) -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def hangs(_: object) -> None:
    time.sleep(60)


def freeze_count(_: object) -> int:
    return gc.get_freeze_count()


@pytest.mark.slow
def test_a_worker_keeps_its_state_between_calls_and_a_crash_or_hang_replaces_it():
    worker = Worker()
    try:
        first = worker.call(f"{__name__}:count_calls", None, timeout_s=120)
        second = worker.call(f"{__name__}:count_calls", None, timeout_s=120)
        assert first.kind == second.kind == "ok"
        assert first.value[0] == second.value[0] != os.getpid()
        assert (first.value[1], second.value[1]) == (1, 2) and worker.calls == 2

        crashed = worker.call(f"{__name__}:crashes", None, timeout_s=120)
        assert crashed.kind == "crashed" and "SIGSEGV" in crashed.message
        assert not worker.running
        fresh = worker.call(f"{__name__}:count_calls", None, timeout_s=120)
        assert fresh.value[0] != first.value[0] and fresh.value[1] == 1

        start = time.monotonic()
        hung = worker.call(f"{__name__}:hangs", None, timeout_s=0.5)
        assert hung.kind == "timeout" and time.monotonic() - start < 10
        assert not worker.running
    finally:
        worker.close()
    assert not worker.running


@pytest.mark.slow
def test_a_warm_worker_freezes_what_its_earlier_trials_left_alive(tmp_path, make_config):
    # device=cpu. The second trial's collection, before it measures, freezes the workload
    # the first one built: neither its own nor one inside a timed step walks it again
    cfg = make_config(*TINY)
    worker = Worker()
    frozen = []
    try:
        for trial in range(2):
            request = TrialRequest(
                cfg,
                {},
                str(tmp_path / f"r{trial:03d}.json"),
                round=trial,
                worker=TrialWorker(isolation="worker", id=0, trial=trial),
            )
            assert worker.call(RUN_TRIAL, request, timeout_s=120).value == "ok"
            frozen.append(worker.call(f"{__name__}:freeze_count", None, timeout_s=120).value)
    finally:
        worker.close()
    assert frozen[1] > frozen[0] > 0


def test_the_uncounted_part_is_the_span_less_the_parts_after_the_start():
    parts = CostParts(start=0.5, build=0.1, warmup=0.2, timed=0.3)
    assert uncounted(parts, 0.65) == pytest.approx(0.05)
    assert uncounted(parts, 0.599) == 0.0  # parts rounded to the us never make it negative
    # records from before it existed: the summary leaves it out instead of summing 0
    assert "other" not in parts_written([{"start": 0.1, "timed": 0.2}])
    assert parts_written([{"timed": 0.2}, {"timed": 0.2, "other": 0.01}])[-1] == "other"
    assert (rounds(1), rounds(2)) == ("1 round", "2 rounds")


def test_a_generation_spans_trials_per_worker_rounds_capped_at_a_third_of_max_rounds():
    before = {"metric": "latency", "confidence": 0.95, "delta": 0.01, "min_rounds": 10}
    before |= {"max_rounds": 30, "target_half_width": 0.02, "time_budget_s": 240.0}
    worker = {**before, "isolation": "worker", "trials_per_worker": 4}

    def rounds_per_unit(schedule: dict) -> int:
        return ScheduleSettings.from_dict(schedule).rounds_per_unit

    assert rounds_per_unit(worker) == 4
    assert rounds_per_unit({**worker, "max_rounds": 9}) == 3
    assert rounds_per_unit({**worker, "max_rounds": 2}) == 1
    assert rounds_per_unit({**worker, "isolation": "process"}) == 1
    assert rounds_per_unit(before) == 1  # an experiment from before workers


def test_the_units_of_a_comparison_are_whole_generations():
    base = {r: 100.0 for r in range(7)}
    var = {r: 100.0 / (1.1 if r < 2 else 1.0) for r in range(7)}
    del var[3]  # a failed trial: its round drops out of its generation
    d, units = stats.paired_units(base, var, 2)
    assert units == [[0, 1], [2], [4, 5], [6]]
    assert d[0] == stats.paired_log_ratios([100.0], [100.0 / 1.1])[0] and d[1:] == [0, 0, 0]


def test_the_variance_split_names_the_worker_part():
    # two workers, three trials each; the workers differ by 10 %, the trials barely
    steps = [[0.0, 0.001], [0.001, 0.0], [0.0005, 0.0005]]
    trials = steps + [[x + 0.1 for x in t] for t in steps]
    split = stats.variance_split(trials, ["a", "a", "a", "b", "b", "b"])
    assert split.worker is not None and split.worker > 0.002
    assert split.between - split.worker < 1e-4
    assert "worker-to-worker" in split.advice
    assert stats.variance_split(trials).worker is None


def _records(root: Path, job: str) -> list:
    return [load_record(p) for p in sorted((root / job / "trials").glob("r*.json"))]


@pytest.mark.heavy
@pytest.mark.slow
def test_a_sweep_with_warm_workers_builds_once_per_generation_and_says_so(tmp_path):
    result = perflab(
        tmp_path,
        "+experiment=spin_ratio",
        *FAST,
        "schedule.min_rounds=6",
        "schedule.max_rounds=6",
        "schedule.isolation=worker",
        "schedule.trials_per_worker=2",
    )
    assert result.returncode == 0, result.stderr + result.stdout
    root = sweep_dir(tmp_path)
    pids = set()
    for job in ("0", "1", "sentinel"):
        records = _records(root, job)
        assert [(r.worker.id, r.worker.trial) for r in records] == [
            (g, t) for g in range(3) for t in range(2)
        ]
        for first, later in zip(records[::2], records[1::2], strict=True):
            assert first.worker.pid == later.worker.pid
            assert first.cost_s.first_call > 0 and first.cost_s.build > 0
            assert later.cost_s.first_call == later.cost_s.build == 0
            # the first call the later trial reports is its worker's
            assert first.samples.first_call_ns == later.samples.first_call_ns
            pids.add(first.worker.pid)
        assert all(r.cost_s.timed > 0 and r.cost_s.warmup > 0 for r in records)
        assert all(r.cost_s.other is not None for r in records)
    assert len(pids) == 9  # three generations of three workers
    summary = json.loads((root / "summary.json").read_text())
    iso = summary["isolation"]
    assert (iso["mode"], iso["trials_per_worker"], iso["workers"], iso["trials"]) == (
        "worker",
        2,
        9,
        18,
    )
    assert iso["cost_s"]["timed"] > 0 and set(iso["cost_s"]) == {
        "start",
        "build",
        "first_call",
        "warmup",
        "timed",
        "checks",
        "other",
    }
    [comparison] = summary["comparisons"]
    assert (comparison["rounds"], comparison["units"], comparison["rounds_per_unit"]) == (6, 3, 2)
    assert all(v["workers"] == 3 and "worker" in v["variance"] for v in summary["variants"])
    report = (root / "report.md").read_text()
    section = report.split("## Where the time went")[1].split("\n## ")[0]
    assert "2 rounds before a fresh one replaced it, 9 workers in all" in section
    assert "| warm-up |" in section and "| first call |" in section
    assert "served 2 rounds" in report.split("## Method")[1]
    assert "time per trial (18 trials, warm workers serving 2 rounds each): start" in result.stdout


@pytest.mark.slow
def test_fresh_processes_remain_a_choice(tmp_path):
    result = perflab(
        tmp_path,
        "+experiment=spin_ratio",
        *FAST,
        "schedule.isolation=process",
    )
    assert result.returncode == 0, result.stderr + result.stdout
    root = sweep_dir(tmp_path)
    records = _records(root, "0") + _records(root, "1")
    assert {r.worker.isolation for r in records} == {"process"}
    assert len({r.worker.pid for r in records}) == len(records) == 6
    assert all(r.cost_s.first_call > 0 for r in records)
    summary = json.loads((root / "summary.json").read_text())
    assert summary["isolation"]["mode"] == "process" and "workers" not in summary["isolation"]
    assert "units" not in summary["comparisons"][0]
    assert "each trial in a fresh process" in (root / "report.md").read_text()
    assert "time per trial (9 trials, a fresh process each): start" in result.stdout
