"""A resumed sweep pairs a round only within one session (perflab.analysis.sessions).

The hostile pass's case: one variant's directory lost, the same command run again on a
machine that had become slower. Every round of that variant then ran in the new session
and its baseline's in the old one; paired, they read SLOWER 0.604x at rc 0 where the
intact run was INCONCLUSIVE. device=cpu throughout, no trial process: the schedule runs
with tests/fake_trials.py's seeded records, and the end-to-end test with the faulty
model's busy-wait on the CPU."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import faulty
import pytest
from console_scripts import command
from fake_trials import FakeTrials

from perflab.analysis import sessions, stats
from perflab.analysis.sweep import Experiment, ResumedSession, load_trials
from perflab.analysis.verdicts import compare
from perflab.config.plan import Job, build_plan
from perflab.config.schema import ScheduleConfig
from perflab.formats.records import Samples, TrialRecord
from perflab.formats.summary import NO_DATA, load_summary

PLAN = build_plan(
    [Job(i, [f"amp={a}"], {"amp": a}) for i, a in enumerate(("off", "bf16"))], {}, sentinel=True
)


def _run(monkeypatch, sweep: Path, fake: FakeTrials, sched: ScheduleConfig, previous=None):
    from perflab.experiment import schedule

    monkeypatch.setattr(schedule, "run_one", fake)
    runs = {
        v.name: schedule.VariantRun(None, sweep / v.dir, v.source)  # type: ignore[arg-type]
        for v in PLAN.variants
    }
    return schedule.run_experiment(PLAN, runs, sched, sweep, lambda _: None, {}, previous).summary


def test_a_variant_measured_again_in_a_slower_session_is_not_paired_with_the_old_one(
    tmp_path, monkeypatch
):
    sched = ScheduleConfig(min_rounds=6, max_rounds=6, shuffle_seed=3)
    first = _run(monkeypatch, tmp_path, FakeTrials(), sched)
    assert first.comparisons[0].verdict != "SLOWER"
    shutil.rmtree(tmp_path / "1")  # the variant's directory lost
    again = FakeTrials(scale=1.6)  # and the machine 60 % slower
    summary = _run(monkeypatch, tmp_path, again, sched, Experiment.load(tmp_path))
    assert sorted(again.calls) == [("1", r) for r in range(6)]  # only the lost trials
    [c] = summary.comparisons
    assert c.verdict == NO_DATA and c.across_sessions == list(range(6))
    assert any(h.startswith(sessions.UNPAIRED) and "rounds 1-6" in h for h in summary.health)
    assert summary.sentinel is not None  # the A/A pair ran in one session: still paired
    records = load_trials(tmp_path, PLAN)
    assert {t.session for t in records["1"].values()} == {1}
    assert {t.session for t in records["0"].values()} == {0}


def test_more_rounds_in_the_resumed_session_are_paired_and_decide(tmp_path, monkeypatch):
    sched = ScheduleConfig(min_rounds=6, max_rounds=6, shuffle_seed=3)
    _run(monkeypatch, tmp_path, FakeTrials(), sched)
    shutil.rmtree(tmp_path / "1")
    more = ScheduleConfig(min_rounds=6, max_rounds=12, shuffle_seed=3)
    again = FakeTrials(scale=1.6)  # slower for every variant of the new rounds alike
    summary = _run(monkeypatch, tmp_path, again, more, Experiment.load(tmp_path))
    [c] = summary.comparisons
    assert c.across_sessions == list(range(6))
    assert c.estimate is not None and c.estimate.rounds == 6  # rounds 7-12, one session
    assert 0.98 < c.estimate.speedup < 1.02  # the fake's own noise, not the session's 1.6x


def test_a_round_split_by_an_interruption_is_paired_where_it_can_be(tmp_path, monkeypatch):
    sched = ScheduleConfig(min_rounds=5, max_rounds=5, shuffle_seed=3)
    cut = FakeTrials(interrupt_at=7)  # round 3 (index 2) partly done
    assert _run(monkeypatch, tmp_path, cut, sched).stop_reason == "interrupted"
    summary = _run(monkeypatch, tmp_path, FakeTrials(), sched, Experiment.load(tmp_path))
    records = load_trials(tmp_path, PLAN)
    split = {r for r in range(5) if records["0"][r].session != records["1"][r].session}
    [c] = summary.comparisons
    assert split <= {2} and (c.across_sessions or []) == sorted(split)
    assert c.estimate is not None and c.estimate.rounds == 5 - len(split)


def _record(round_: int, cost_ms: float, session: int | None, started: str) -> TrialRecord:
    return TrialRecord(
        "ok",
        {},
        {"batch_size": 1},
        started,
        started,
        round=round_,
        session=session,
        samples=Samples(1, [int(cost_ms * 1e6)] * 5, {}, [], 1, 0.1, "min_reached"),
    )


def test_a_record_without_a_session_is_placed_by_its_start_time():
    resumed = [ResumedSession(3, 9, "2026-11-26T10:00:00+00:00")]
    before = _record(0, 1.0, None, "2026-11-26T09:59:59.500+00:00")
    after = _record(3, 1.0, None, "2026-11-26T10:00:00.250+00:00")
    assert sessions.of_record(before, resumed) == 0
    assert sessions.of_record(after, resumed) == 1
    assert sessions.of_record(_record(0, 1.0, 4, "?"), resumed) == 4
    assert sessions.of_record(_record(0, 1.0, None, "not a time"), resumed) == 0


def test_paired_units_split_a_worker_generation_at_a_resume():
    base = {r: 1.0 for r in range(8)}
    variant = {r: 1.0 for r in range(8)}
    # generations of 4 rounds; the sweep resumed at round 6, both variants alike
    ran = {r: 0 if r < 6 else 1 for r in range(8)}
    d, units = stats.paired_units(base, variant, 4, stats.Sessions(ran, ran))
    assert units == [[0, 1, 2, 3], [4, 5], [6, 7]]
    # round 5's variant trial ran in the second session: round 5 is not paired
    late = {**ran, 5: 1}
    _, units = stats.paired_units(base, variant, 4, stats.Sessions(ran, late))
    assert units == [[0, 1, 2, 3], [4], [6, 7]]


def test_compare_leaves_out_rounds_across_sessions_also_from_the_unpaired_interval():
    base = {r: 1.0 + 0.01 * (r % 3) for r in range(10)}
    slow = {r: 1.6 * c for r, c in base.items()}
    ran = {r: 0 for r in range(10)}
    sessions_ = stats.Sessions(ran, {r: 1 for r in range(10)})
    blind = compare(base, slow, 0.95, 0.01)
    assert blind is not None and blind.verdict == "SLOWER"  # paired blindly
    assert compare(base, slow, 0.95, 0.01, 1, sessions_) is None  # nothing in one session


@pytest.mark.heavy
@pytest.mark.slow
def test_the_hostile_case_end_to_end_reads_no_verdict_from_two_sessions(tmp_path):
    """The real command twice, the second time with the variant's directory gone and
    every step 2 ms slower (tests/faulty.py's hold_while file stands in for the machine)."""
    sweep = tmp_path / "sweep"
    args = [
        *faulty.ARGS,
        "trial.min_s=0",
        "schedule.min_rounds=4",
        "schedule.max_rounds=4",
        "+model.args.step_us=1000,1100",
        "+schedule.treatments={model.args.step_us:1000}",
        "device=cpu",
        f"hydra.sweep.dir={sweep}",
    ]
    first = subprocess.run([*command("perflab"), "-m", *args], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    shutil.rmtree(sweep / "1")
    slower = {**os.environ, "FAULTY_EXTRA_US": "2000"}
    second = subprocess.run(
        [*command("perflab"), "-m", *args], capture_output=True, text=True, env=slower
    )
    assert second.returncode == 0, second.stderr
    assert "resuming: 8 finished trial(s)" in second.stdout
    assert sessions.UNPAIRED in second.stdout  # the console says so
    summary = load_summary(sweep / "summary.json")
    [c] = summary.comparisons
    assert c.verdict == NO_DATA and c.across_sessions == [0, 1, 2, 3]
    assert sessions.UNPAIRED in (sweep / "report.md").read_text()
