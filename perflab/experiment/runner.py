"""One sweep, measured: the same steps for a whole sweep (the Hydra launcher) and for each
group of a sweep split by ``scaleout.group_by`` (a submitit job).

    resume check -> settings check -> rounds -> profiles -> report

What differs between the two callers stays with them: the launcher composes the jobs,
prints the console table, publishes the report and sets the exit code; a group's job
answers with its result for groups.json. Everything between is here, once, so the two
cannot drift apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab.analysis.summarize import Analysis
from perflab.config.plan import Plan
from perflab.config.schema import ScheduleConfig
from perflab.errors import DiskFull, RecordError, no_space
from perflab.experiment import resume
from perflab.experiment.schedule import VariantRun, check_all, run_experiment, run_profiles
from perflab.formats.records import load_record
from perflab.formats.summary import Summary
from perflab.formats.sweepdir import trial_record
from perflab.formats.trial_parts import Invocation

Say = Callable[[str], None]


@dataclass
class SweepSetup:
    """What one sweep (or one group of a split sweep) measures, and where."""

    plan: Plan
    # one trial request per variant, and its job directory
    runs: dict[str, VariantRun]
    schedule: ScheduleConfig
    sweep_dir: Path
    # each job's composed config (by variant source) and the command's invocation: what
    # a later session must match to resume here (perflab.experiment.resume.fingerprint)
    configs: dict[str, dict[str, Any]]
    invocation: Invocation
    # run one profiled trial per variant after the rounds
    profile: bool
    # check every variant's settings on this machine first (False: the launcher already
    # checked them here before submitting the group)
    check: bool = True
    # a second copy of the report (report.dir); None: the sweep directory's only
    publish: Path | None = None


@dataclass
class SweepResult:
    summary: Summary
    # the rounds or the profiles were stopped by Ctrl-C, SIGTERM or SIGHUP
    interrupted: bool
    # the sweep's report.md, and its published copy (SweepSetup.publish)
    report: Path
    published: Path | None
    # seconds spent in the rounds, the profiles and the report
    phases_s: dict[str, float]
    # finished trials' records destroyed while the sweep ran (destroyed_records)
    destroyed: list[str] = field(default_factory=list)


def run_sweep(
    setup: SweepSetup, say: Say, checked: Callable[[], None] = lambda: None
) -> SweepResult:
    """Measure a sweep and write its summary and report; ``checked`` runs once every
    variant has passed its settings check, before the first trial."""
    fingerprint = resume.fingerprint(setup.configs, setup.invocation)
    # the same experiment may resume in this directory; another one is refused (exit 2)
    previous = resume.previous(setup.sweep_dir, setup.plan, fingerprint)
    if setup.check:
        for warning in sorted({w for ws in check_all(setup.runs).values() for w in ws}):
            say(f"perflab: warning: {warning}")
    checked()
    start = time.monotonic()
    analysis = run_experiment(
        setup.plan, setup.runs, setup.schedule, setup.sweep_dir, say, fingerprint, previous
    )
    summary = analysis.summary
    rounds_s = time.monotonic() - start
    interrupted = summary.stop_reason == "interrupted"
    if setup.profile and not interrupted:
        try:
            run_profiles(setup.plan, setup.runs, say)
        except KeyboardInterrupt:
            interrupted = True
            say("perflab: profiling interrupted; the timed rounds are complete")
    profiles_s = time.monotonic() - start - rounds_s
    destroyed = destroyed_records(setup)
    report, published = _write_reports(setup.sweep_dir, analysis, setup.publish)
    phases = {
        "experiment": rounds_s,
        "profiles": profiles_s,
        "report": time.monotonic() - start - rounds_s - profiles_s,
    }
    rounded = {k: round(v, 3) for k, v in phases.items()}
    return SweepResult(summary, interrupted, report, published, rounded, destroyed)


def destroyed_records(setup: SweepSetup) -> list[str]:
    """The records of the sweep's finished trials that are gone or unreadable at its end,
    each as "JOB/trials/rNNN.json: why" (relative to the sweep directory). Every trial
    the sweep ran or kept left a readable record (a resumed sweep measures an unreadable
    one again), so such a record was destroyed while the sweep ran: deleted or
    overwritten by a trial's own code (a misbehaving model) or another process. Its
    result is missing from the summary, so the sweep must not end as if complete. Files
    that never held one of its trials (a foreign file, a record of a future version, left
    there before the sweep) are the analysis's to skip, not counted here."""
    destroyed = []
    for variant in setup.plan.variants:
        run = setup.runs[variant.name]
        for round_ in sorted(run.finished):
            path = trial_record(run.job_dir, round_)
            name = path.relative_to(setup.sweep_dir).as_posix()
            try:
                record = load_record(path)
            except RecordError as exc:
                gone = not path.exists()
                destroyed.append(
                    f"{name}: " + ("gone" if gone else str(exc).removeprefix(f"{path}: "))
                )
                continue
            if record.round != round_:
                destroyed.append(f"{name}: holds round {record.round}'s record")
    return destroyed


def _write_reports(
    sweep_dir: Path, analysis: Analysis, publish: Path | None
) -> tuple[Path, Path | None]:
    """The report in the sweep directory, and its copy in ``publish``. A disk that fills
    meanwhile stops the sweep like an interruption (the summary goes with the error, for
    the console table), saying how to write the report later."""
    from perflab.report import load, write_report

    try:
        report = load(sweep_dir, analysis.summary, analysis.records)
        return write_report(report), write_report(report, publish) if publish else None
    except OSError as exc:
        if no_space(exc):
            raise DiskFull(
                f"no space left for the report ({exc.filename}); the records and "
                f"summary.json are complete: free space, then run perflab-report {sweep_dir}",
                analysis.summary.to_dict(),
            ) from exc
        raise
