"""A stand-in for perflab.experiment.schedule.run_one in sweep tests (device=cpu, no
trial process): seeded ok records, every call logged, an interruption on request."""

from __future__ import annotations

from perflab.formats.records import Samples, TrialRecord, write_record
from perflab.formats.sweepdir import trial_record


class FakeTrials:
    """Stands in for schedule.run_one: writes a seeded ok record, logs (variant, round),
    and raises KeyboardInterrupt instead of running the trial number ``interrupt_at``.
    ``scale``: a factor on the step times of every trial it runs (a machine that became
    slower between two sessions)."""

    def __init__(self, interrupt_at: int | None = None, scale: float = 1.0) -> None:
        self.calls: list[tuple[str, int]] = []
        self.interrupt_at = interrupt_at
        self.scale = scale

    def __call__(self, run, round_: int, session: int, sched, lengths, workers):
        from perflab.experiment import schedule

        if len(self.calls) == self.interrupt_at:
            self.interrupt_at = None
            raise KeyboardInterrupt
        self.calls.append((run.job_dir.name, round_))
        steps = [
            int(self.scale * (1_000_000 + 1000 * ((7 * len(self.calls) + i) % 5)))
            for i in range(10)
        ]
        record = TrialRecord(
            "ok",
            {},
            {"batch_size": 1},
            "t",
            "t",
            round=round_,
            session=session,
            samples=Samples(1, steps, {}, [], 1, 0.1, "min_reached"),
        )
        write_record(trial_record(run.job_dir, round_), record)
        schedule.count(run, record, sched.metric, lengths, session)
        return record
