"""When a sweep stops because variants failed (perflab.experiment.schedule._should_stop).

In-process, with seeded fake trials (tests/fake_trials.py): no trial process, no timing."""

from __future__ import annotations

from pathlib import Path

from fake_trials import FakeTrials

from perflab.analysis.sweep import Experiment
from perflab.config.plan import Job, Plan, build_plan
from perflab.config.schema import ScheduleConfig
from perflab.formats.records import ErrorInfo, TrialRecord, write_record
from perflab.formats.sweepdir import trial_record

# batch sizes only (+experiment=batch_scaling): no comparison, an A/A sentinel of the first
SCALING = build_plan(
    [Job(i, [f"batch_size={b}"], {"batch_size": b}) for i, b in enumerate((16, 32, 64))],
    {},
    sentinel=True,
)
# a comparison: amp against its baseline
AMP = build_plan(
    [Job(i, [f"amp={a}"], {"amp": a}) for i, a in enumerate(("off", "bf16"))], {}, sentinel=True
)


class FailingFirst(FakeTrials):
    """FakeTrials, except that variant ``fails``'s trials fail (a deterministic failure,
    such as out of memory at its batch size)."""

    def __init__(self, fails: str) -> None:
        super().__init__()
        self.fails = fails

    def __call__(self, run, round_, session, sched, lengths, workers):
        from perflab.experiment import schedule

        if run.job_dir.name != self.fails:
            return super().__call__(run, round_, session, sched, lengths, workers)
        self.calls.append((run.job_dir.name, round_))
        record = TrialRecord(
            "failed",
            {},
            {},
            "t",
            "t",
            round=round_,
            session=session,
            error=ErrorInfo("OutOfMemoryError", "simulated", ""),
        )
        write_record(trial_record(run.job_dir, round_), record)
        schedule.count(run, record, sched.metric, lengths, session)
        return record


def _run(monkeypatch, plan: Plan, sweep: Path, fake, sched: ScheduleConfig, previous=None):
    from perflab.experiment import schedule

    monkeypatch.setattr(schedule, "run_one", fake)
    runs = {
        v.name: schedule.VariantRun(None, sweep / v.dir, v.source)  # type: ignore[arg-type]
        for v in plan.variants
    }
    return schedule.run_experiment(plan, runs, sched, sweep, lambda _: None, {}, previous).summary


def test_a_scaling_sweep_goes_on_when_its_sentinels_baseline_fails(tmp_path, monkeypatch):
    """The hostile pass: batch_size=16,32,64 stopped after round 1 when batch 16 (the
    A/A sentinel's baseline) failed, and re-running said "nothing left to run"."""
    sched = ScheduleConfig(min_rounds=4, max_rounds=4, shuffle_seed=1)
    fake = FailingFirst(fails="0")
    summary = _run(monkeypatch, SCALING, tmp_path, fake, sched)
    assert summary.stop_reason != "no comparison left (failed variants)"
    assert summary.rounds == 4
    by_name = {v.name: v for v in summary.variants}
    assert by_name["1"].trials == by_name["2"].trials == 4  # measured for the scaling table
    assert by_name["0"].trials == 1  # failed first: not scheduled again
    # with nothing to compare, the stopping rule has no interval to judge and a scaling
    # sweep runs schedule.min_rounds: raising it extends the run
    more = ScheduleConfig(min_rounds=6, max_rounds=6, shuffle_seed=1)
    again = FailingFirst(fails="0")
    summary = _run(monkeypatch, SCALING, tmp_path, again, more, Experiment.load(tmp_path))
    assert summary.rounds == 6 and {r for _, r in again.calls} == {4, 5}


def test_a_sweep_whose_every_comparison_failed_still_stops(tmp_path, monkeypatch):
    sched = ScheduleConfig(min_rounds=4, max_rounds=8, shuffle_seed=1)
    summary = _run(monkeypatch, AMP, tmp_path, FailingFirst(fails="0"), sched)
    assert summary.stop_reason == "no comparison left (failed variants)"
    assert summary.rounds == 1
