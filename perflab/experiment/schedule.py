"""Run an experiment: rounds of freshly shuffled variants, one isolated trial each.

Randomised interleaving is what keeps drift from reading as an effect: running all of A
then all of B turned a 0.2 %-per-trial drift into ~94 % false verdicts in simulation,
interleaving kept them near 5 % (docs/design.md#rounds-and-order). Each round runs
every variant once, in a new random order; after ``min_rounds`` the run stops as soon
as every comparison's CI half-width reaches the target, or at ``max_rounds``, or when
the time budget would be exceeded by another round. An interrupted experiment keeps its
finished trials and can be resumed into the same directory (perflab.experiment.resume,
docs/resilience.md).
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perflab.analysis import sessions, stats, trials
from perflab.analysis.summarize import Analysis, analysis_of
from perflab.analysis.sweep import (
    Experiment,
    ResumedSession,
    ScheduleSettings,
    SweepRecords,
    read_records,
)
from perflab.config.plan import SENTINEL, Plan
from perflab.config.schema import PerflabConfig, ScheduleConfig
from perflab.config.user_code import user_code
from perflab.errors import (
    ConfigError,
    DiskFull,
    OutputLost,
    PerflabError,
    RecordError,
    SweepDirDeleted,
    no_space,
)
from perflab.experiment.settle import settle
from perflab.formats.records import TrialRecord, load_record, write_json_atomic, write_record
from perflab.formats.sweepdir import (
    CHECK_LOG,
    EXPERIMENT_FILE,
    REJECTED_SUFFIX,
    SUMMARY_FILE,
    log_beside,
    profile_record,
    trial_record,
)
from perflab.formats.trial_parts import Invocation, TrialWorker
from perflab.process.isolation import Outcome, Worker, describe_exit, drop_if_empty, run_isolated
from perflab.process.trial_request import (
    CHECK_SETTINGS,
    RUN_PROFILE,
    TrialLength,
    TrialRequest,
    failure_record,
    run_in_process,
    trial_limits,
)

# A variant whose trials keep failing stops being scheduled: after a failure with no
# success before it (a deterministic failure, e.g. out of memory) or after this many.
MAX_FAILURES = 3


@dataclass
class VariantRun:
    """A variant's trial template and its results so far."""

    request: TrialRequest
    job_dir: Path
    # the configuration it runs: its own variant name, or for the A/A sentinel its
    # baseline's (the two share one trial length)
    config: str
    costs: dict[int, float] = dataclasses.field(default_factory=dict)
    # the session of a resumed sweep that ran each round's trial (TrialRecord.session)
    sessions: dict[int, int] = dataclasses.field(default_factory=dict)
    # the rounds of every trial taken into account, whatever its status: each has its
    # record on disk (perflab.experiment.runner.destroyed_records checks at the end)
    finished: set[int] = dataclasses.field(default_factory=set)
    # failed, crashed, timed out, or invalid (recompiled while timed): no usable number
    failures: int = 0

    @property
    def active(self) -> bool:
        return not (self.failures and not self.costs) and self.failures < MAX_FAILURES


def check_all(runs: dict[str, VariantRun]) -> dict[str, list[str]]:
    """Resolve every variant on this machine before measuring anything: an impossible
    setting in any variant stops the sweep with exit 2 and nothing measured."""
    warnings = {}
    for name, run in runs.items():
        log = run.job_dir / CHECK_LOG
        # the check runs a user's model on its probe batch (perflab.measure.preflight):
        # no longer than a trial may run
        timeout_s = min(CHECK_TIMEOUT_S, run.request.config.trial.timeout_s)
        result = run_isolated(CHECK_SETTINGS, run.request, timeout_s=timeout_s, log=log)
        if result.kind == "crashed":
            _name_the_factory_that_ends_the_process(run)
        if result.kind == "config_error":
            raise PerflabError(result.message)
        if result.kind in ("crashed", "timeout"):
            # the model's forward crashed or hung on its probe batch: its trials will
            # record that as failed, and the other variants are measured
            warnings[name] = [f"the settings check {_ended(result)}; its trials will show why"]
            continue
        if result.kind != "ok":
            raise RuntimeError(f"checking variant {name} failed: {result.message}")
        warnings[name] = result.value
    return warnings


# how long the settings check of a variant may take at most (it builds a user's model
# and runs its probe batch)
CHECK_TIMEOUT_S = 120.0


def _ended(result: Outcome) -> str:
    return "hung" if result.kind == "timeout" else f"crashed ({result.message.splitlines()[0]})"


# the function that imports one factory alone (perflab.measure.trial)
IMPORT_FACTORY = "perflab.measure.preflight:import_factory"


def _name_the_factory_that_ends_the_process(run: VariantRun) -> None:
    """A check process that died without answering (os._exit or a signal, say while
    importing the user's model) is told apart from a bug by importing each factory alone:
    the one whose import dies the same way is named, in one line and exit 2."""
    cfg = run.request.config
    for field_name, target in user_code(cfg).items():
        job = (run.request, field_name)
        alone = run_isolated(IMPORT_FACTORY, job, timeout_s=120, log=run.job_dir / CHECK_LOG)
        if alone.kind == "crashed":
            problem = f"{describe_exit(alone.exitcode)} while importing it"
            allowed = "a factory whose module imports without ending the process"
            raise ConfigError(field_name, target, allowed, problem)


def _per_unit(sched: ScheduleConfig) -> int:
    """Rounds per unit of the analysis, as it reads them from experiment.json."""
    return ScheduleSettings.from_config(sched).rounds_per_unit


class Workers:
    """The warm workers of a sweep (schedule.isolation=worker): one per variant, each
    serving the trials of one generation (schedule.trials_per_worker consecutive rounds)
    and then replaced, all variants' at the same round, so that the analysis can take a
    generation as one unit (stats.paired_units). A worker whose trial did not end ok is
    replaced at once: whatever broke stays with it. With schedule.isolation=process
    there are none and every trial gets a fresh process."""

    def __init__(self, sched: ScheduleConfig) -> None:
        self.enabled = sched.isolation == "worker"
        # the analysis's unit: trials_per_worker, capped so that max_rounds holds 3
        self.per_worker = _per_unit(sched)
        self._workers: dict[str, tuple[Worker, int]] = {}  # variant -> (worker, generation)
        self._started: dict[str, int] = {}  # variant -> workers started so far

    def for_trial(self, name: str, round_: int) -> tuple[Worker | None, TrialWorker]:
        """The worker that runs ``name``'s trial of ``round_`` (None: a fresh process), and
        what its record says about it (TrialRecord.worker)."""
        if not self.enabled:
            return None, TrialWorker(isolation="process")
        generation = round_ // self.per_worker
        worker, serving = self._workers.get(name, (None, -1))
        if worker is None or serving != generation or not worker.running:
            if worker is not None:
                # waited for, not left to exit in the background: its teardown must not
                # run beside the next timed block
                worker.close()
            worker = Worker()
            self._workers[name] = (worker, generation)
            self._started[name] = self._started.get(name, 0) + 1
        info = TrialWorker(
            isolation="worker",
            id=self._started[name] - 1,
            trial=worker.calls,
            generation=generation,
        )
        return worker, info

    def retire(self, name: str) -> None:
        """End ``name``'s worker (its trial failed): the next trial gets a fresh one."""
        worker, _ = self._workers.pop(name, (None, -1))
        if worker is not None:
            worker.close()

    def close(self) -> None:
        for name in list(self._workers):
            self.retire(name)


def run_one(
    run: VariantRun,
    round_: int,
    session: int,
    sched: ScheduleConfig,
    lengths: dict[str, TrialLength],
    workers: Workers,
) -> TrialRecord:
    """One trial of a variant, in its warm worker or a fresh process (``workers``), run
    by the sweep's ``session`` (0, or one more per resumed session). The first trial of
    each configuration runs to the trial bounds and fixes the length of its later ones
    (``lengths``)."""
    path = trial_record(run.job_dir, round_)
    length = lengths.get(run.config)
    name = run.job_dir.name
    worker, info = workers.for_trial(name, round_)
    request = dataclasses.replace(
        run.request,
        record_path=str(path),
        round=round_,
        session=session,
        length=length,
        calibrating=length is None,
        settle=settle(sched.settle_s, run.request.config.device) if sched.settle_s else {},
        worker=info,
        sent_at=time.time(),
    )
    try:
        record = _load_or_reject(run_in_process(request, worker), request)
    except OSError as exc:
        if not run.job_dir.exists():  # its record had nowhere to go
            raise SweepDirDeleted(
                f"hydra.sweep.dir={run.job_dir.parent} was deleted while the sweep ran"
            ) from exc
        raise
    drop_if_empty(log_beside(path))  # left empty by a trial process that was killed
    if record.status != "ok":
        workers.retire(name)  # nothing to end with a fresh process per trial
    count(run, record, sched.metric, lengths, session)
    return record


def _load_or_reject(path: Path, request: TrialRequest) -> TrialRecord:
    """The record a trial just wrote. One that fails validation (perflab.formats.records) is a
    failed trial, not a reason to stop the sweep: it is kept aside for inspection and a
    failed record saying why takes its place."""
    try:
        return load_record(path)
    except RecordError as exc:
        path.replace(path.with_name(path.name + REJECTED_SUFFIX))
        record = failure_record(request, "failed", f"the trial wrote an invalid record: {exc}")
        write_record(path, record, parents=False)
        return record


def count(
    run: VariantRun,
    record: TrialRecord,
    metric: str,
    lengths: dict[str, TrialLength],
    session: int,
) -> None:
    """Take a finished trial (just run, or found on disk when resuming) into account; the
    first ok trial of a configuration fixes its trial length. ``session``: the session
    of the sweep that ran it (perflab.analysis.sessions.of_record)."""
    run.finished.add(record.round)
    if record.status == "ok" and record.samples is not None:
        run.costs[record.round] = trials.trial_cost(record, metric)
        run.sessions[record.round] = session
        s = record.samples
        lengths.setdefault(run.config, TrialLength(s.steps_per_sample, s.timed_steps, record.round))
    else:
        run.failures += 1


def widest(plan: Plan, runs: dict[str, VariantRun], sched: ScheduleConfig) -> tuple[float, str]:
    """The widest half-width among the comparisons still running (sentinel included), as
    the stopping rule judges it (stats.widest_half_width), and whose."""
    sentinel = plan.sentinel()
    pairs = plan.comparisons() + ([sentinel] if sentinel else [])
    return stats.widest_half_width(
        [
            (
                variant.label,
                runs[base.name].costs,
                runs[variant.name].costs,
                stats.Sessions(runs[base.name].sessions, runs[variant.name].sessions),
            )
            for variant, base in pairs
            if runs[variant.name].active and runs[base.name].active
        ],
        sched.confidence,
        _per_unit(sched),
    )


class _Session:
    """This session's share of an experiment that may span several (perflab.experiment.resume)."""

    def __init__(
        self,
        plan: Plan,
        sched: ScheduleConfig,
        sweep_dir: Path,
        fingerprint: dict[str, Any],
        previous: Experiment | None,
        kept: SweepRecords | None = None,
    ) -> None:
        self.plan, self.sweep_dir, self.fingerprint = plan, sweep_dir, fingerprint
        self.schedule = ScheduleSettings.from_config(sched)
        # the records on disk when it began (a resumed sweep), read once: their warnings
        # are not repeated when the records are read at the end
        self.read_at_start = kept
        self.prior_s = previous.elapsed_s if previous else 0.0
        self.round_s = list(previous.round_s) if previous else []
        self.resumed = list(previous.resumed) if previous else []
        self.start = time.monotonic()
        self.ran = 0  # trials run in this session
        # the round whose missing trials are running, and when they began (None between)
        self.open_round: tuple[int, float] | None = None

    def elapsed(self) -> float:
        return self.prior_s + time.monotonic() - self.start

    def spent(self, round_: int, seconds: float) -> None:
        self.round_s += [0.0] * (round_ + 1 - len(self.round_s))
        self.round_s[round_] = round(self.round_s[round_] + seconds, 3)

    def begin_round(self, round_: int) -> None:
        self.open_round = (round_, time.monotonic())

    def end_round(self) -> None:
        """Count the open round's seconds (also when Ctrl-C cut it short)."""
        if self.open_round is not None:
            round_, began = self.open_round
            self.spent(round_, time.monotonic() - began)
            self.open_round = None

    def note_resume(self, round_: int, kept: int) -> None:
        if kept and not self.ran:
            at = datetime.now(timezone.utc).isoformat(timespec="seconds")
            self.resumed.append(ResumedSession(round_, kept, at))

    @property
    def index(self) -> int:
        """This session's number in the experiment (TrialRecord.session): one more than
        the sessions before it that ran trials (note_resume counts them)."""
        return len(self.resumed)

    def experiment(self, stop: str, rounds: int) -> Experiment:
        return Experiment(
            self.plan,
            self.schedule,
            stop,
            rounds,
            round(self.elapsed(), 3),
            self.fingerprint,
            self.round_s,
            self.resumed,
        )

    def save(self, stop: str, rounds: int) -> Experiment:
        experiment = self.experiment(stop, rounds)
        write_results(self.sweep_dir / EXPERIMENT_FILE, experiment.to_dict())
        return experiment

    def check_still_there(self) -> None:
        """Stop before the next trial if the sweep directory was deleted: writing on
        would recreate it with a fraction of the experiment."""
        if not (self.sweep_dir / EXPERIMENT_FILE).exists():
            raise SweepDirDeleted(
                f"hydra.sweep.dir={self.sweep_dir} (its {EXPERIMENT_FILE}) was deleted while "
                "the sweep ran"
            )


def write_results(path: Path, data: Any) -> None:
    """write_json_atomic, with a full disk raised as DiskFull (the sweep stops as if
    interrupted, perflab.experiment.launcher) rather than as an error of the user's input."""
    try:
        write_json_atomic(path, data)
    except OSError as exc:
        if no_space(exc):
            raise DiskFull(f"no space left on the disk of {path.parent}") from exc
        raise


def run_experiment(
    plan: Plan,
    runs: dict[str, VariantRun],
    sched: ScheduleConfig,
    sweep_dir: Path,
    say: Callable[[str], None],
    fingerprint: dict[str, Any] | None = None,
    previous: Experiment | None = None,
) -> Analysis:
    """Run rounds until the stopping rule says stop; write the summary and return it,
    with the records it was computed from (for the report: perflab.report.load).

    With ``previous`` (the experiment.json of this same experiment, as checked by
    perflab.experiment.resume.previous), the trials already on disk are kept: the rounds are
    replayed in their original shuffled order and only the missing trials run; the
    stopping rule is applied from the last round on disk on. Ctrl-C or SIGTERM ends the
    run with stop_reason "interrupted": the trial in progress is killed and leaves no
    record, and the summary of the finished ones is written and returned.
    """
    # only a caller that checked the directory holds this experiment resumes it
    kept = read_records(sweep_dir, previous) if previous else None
    session = _Session(plan, sched, sweep_dir, fingerprint or {}, previous, kept)
    done = kept.trials if kept else {v.name: {} for v in plan.variants}
    rounds = _Rounds(plan, runs, sched, session, done, say)
    if rounds.kept:
        say(
            f"resuming: {rounds.kept} finished trial(s) on disk, up to round "
            f"{rounds.frontier + 1}, are kept; running only the missing ones"
        )
    session.save("running", previous.rounds if previous else 0)
    workers = Workers(sched)
    try:
        stop = rounds.run(workers)
    except KeyboardInterrupt:
        stop = "interrupted"
        session.end_round()
    except PerflabError:
        # e.g. a factory that cannot be built with its arguments: keep what was measured
        _finish(session, "config error", rounds.complete)
        raise
    except OutputLost as exc:
        # OutputLost carries summary.json's object (perflab.errors sits below the model)
        lost = _finish_lost(session, exc, rounds.complete)
        exc.summary = lost.summary.to_dict() if lost is not None else None
        raise
    finally:
        workers.close()  # no worker outlives its sweep, however it ends
    if rounds.kept and not session.ran and stop != "interrupted":
        say(
            f"nothing left to run: all {rounds.kept} trial(s) were on disk; summary and report "
            "rewritten"
        )
    return _finish(session, stop, rounds.complete)


class _Rounds:
    """The experiment's rounds in order: each counts the trials on disk, runs the missing
    ones, then asks the stopping rule."""

    def __init__(
        self,
        plan: Plan,
        runs: dict[str, VariantRun],
        sched: ScheduleConfig,
        session: _Session,
        done: dict[str, dict[int, TrialRecord]],
        say: Callable[[str], None],
    ) -> None:
        self.plan, self.runs, self.sched, self.session = plan, runs, sched, session
        self.done, self.say = done, say
        self.kept = sum(len(t) for t in done.values())
        self.frontier = max((r for t in done.values() for r in t), default=-1)
        self.rng = random.Random(sched.shuffle_seed)
        self.lengths: dict[str, TrialLength] = {}  # configuration -> its fixed trial length
        self.complete = 0  # rounds finished so far

    def run(self, workers: Workers) -> str:
        """The stop reason. Rounds on disk are always completed and kept, even past a
        lowered max_rounds."""
        for round_ in range(max(self.sched.max_rounds, self.frontier + 1)):
            order = [name for name, run in self.runs.items() if run.active]
            if not order:
                return "every variant failed"
            self.rng.shuffle(order)  # replays the original order of rounds already run
            ran = self._one(round_, order, workers)
            self.complete = round_ + 1
            if round_ < self.frontier:
                continue  # the session that ran this round did not stop after it
            stop = _should_stop(
                self.plan,
                self.runs,
                self.sched,
                self.session,
                self.complete,
                len(order),
                self.say,
                ran,
            )
            if stop:
                return stop
            self.session.save("running", self.complete)
        return "max rounds"

    def _one(self, round_: int, order: list[str], workers: Workers) -> bool:
        """Count this round's trials on disk, run its missing ones; whether any ran."""
        session = self.session
        todo = [name for name in order if round_ not in self.done[name]]
        for name in order:
            if round_ in self.done[name]:
                record = self.done[name][round_]
                ran_in = sessions.of_record(record, session.resumed)
                count(self.runs[name], record, self.sched.metric, self.lengths, ran_in)
        if not todo:
            return False
        session.note_resume(round_, self.kept)
        session.begin_round(round_)
        for name in todo:
            session.check_still_there()
            run_one(self.runs[name], round_, session.index, self.sched, self.lengths, workers)
            session.ran += 1
        session.end_round()
        return True


def _should_stop(
    plan: Plan,
    runs: dict[str, VariantRun],
    sched: ScheduleConfig,
    session: _Session,
    rounds: int,
    variants: int,
    say: Callable[[str], None],
    ran: bool,
) -> str:
    """Why the experiment stops after this round, or "" to go on. With warm workers the
    rule is judged at the end of a worker generation only, the time budget against the
    time the generation took (the next one would take as long): the analysis counts
    whole generations (stats.paired_units), and perflab.analysis.simulation measured the
    rule's error rates judged this way."""
    elapsed = session.elapsed()
    round_s = session.round_s[rounds - 1] if len(session.round_s) >= rounds else 0.0
    width, who = widest(plan, runs, sched)
    if ran:
        say(_progress(rounds, sched, variants, width, who, elapsed, round_s))
    # Every comparison's variant or baseline failed: nothing left to decide. A sweep
    # without comparisons (batch sizes, for throughput) goes on when only its A/A
    # sentinel's baseline failed, as if it had had no sentinel: its other variants are
    # still measured for the scaling table.
    if width < 0 and plan.comparisons():
        return "no comparison left (failed variants)"
    per_unit = _per_unit(sched)
    if rounds % per_unit and rounds < sched.max_rounds:
        return ""
    unit_s = sum(session.round_s[max(rounds - per_unit, 0) : rounds])
    if rounds >= sched.min_rounds and width <= sched.target_half_width:
        return "precision reached"
    if rounds >= sched.min_rounds and elapsed + unit_s > sched.time_budget_s:
        return "time budget"
    return ""


def _finish(session: _Session, stop: str, rounds: int) -> Analysis:
    """Record how the run ended and write the summary of what is on disk."""
    experiment = session.save(stop, rounds)
    analysis = analysis_of(read_records(session.sweep_dir, experiment, session.read_at_start))
    write_results(session.sweep_dir / SUMMARY_FILE, analysis.summary.to_dict())
    return analysis


def _finish_lost(session: _Session, exc: OutputLost, rounds: int) -> Analysis | None:
    """The summary of the trials on disk when results could no longer be written: saved
    too if the disk takes it (each file whole or not at all), never into a directory
    that was deleted (that would recreate it)."""
    if isinstance(exc, SweepDirDeleted):
        return None
    stop = "disk full"
    try:
        return _finish(session, stop, rounds)
    except DiskFull:
        experiment = session.experiment(stop, rounds)
        return analysis_of(read_records(session.sweep_dir, experiment, session.read_at_start))


def run_profiles(plan: Plan, runs: dict[str, VariantRun], say: Callable[[str], None]) -> None:
    """One separate, untimed profiling trial per variant (the sentinel aside), after the
    timed rounds so it can never disturb them. A failure is reported, never fatal. A
    variant that has its profile.json (an earlier session of a resumed sweep) keeps it."""
    variants = [v for v in plan.variants if v.name != SENTINEL]
    for i, variant in enumerate(variants, 1):
        run = runs[variant.name]
        path = profile_record(run.job_dir)
        if path.exists():
            say(f"profiling {i}/{len(variants)}: {variant.label}: kept from an earlier session")
            continue
        request = dataclasses.replace(run.request, record_path=str(path.absolute()))
        # the profiler keeps every event of its active steps: bounded like a timed trial
        limits = trial_limits(request)
        timeout_s = request.config.trial.timeout_s
        result = run_isolated(RUN_PROFILE, request, timeout_s, limits=limits)  # DiskFull
        drop_if_empty(log_beside(path))  # left empty by a profiling trial that was killed
        state = "ok" if result.kind == "ok" else f"FAILED ({result.message.splitlines()[0]})"
        say(f"profiling {i}/{len(variants)}: {variant.label}: {state}")


# the console's round line: at most this many characters, and a label shorter than the
# room left is still shown when the room holds this many
LINE_MAX, SHORTEST_LABEL = 120, 15


def _progress(
    rounds: int,
    sched: ScheduleConfig,
    variants: int,
    width: float,
    who: str,
    elapsed: float,
    round_s: float,
) -> str:
    """The console's line after a round, at most LINE_MAX characters (for up to 999
    rounds and 99999 s): the first round says why there is no interval yet where that
    fits, later ones only "n/a"; the label of the widest interval's comparison is
    shortened to the room left (_short_label), or left out."""
    ci, why = _interval_text(width, rounds, sched)
    left = max(0.0, min(sched.time_budget_s - elapsed, (sched.max_rounds - rounds) * round_s))
    tail = f", target +-{sched.target_half_width:.1%}; {elapsed:.0f} s, <= {left:.0f} s left"

    def head(widest: str, interval: str) -> str:
        return (
            f"round {rounds}/{sched.max_rounds} (min {sched.min_rounds}): {variants} "
            f"variants, {round_s:.1f} s; {widest} {interval}"
        )

    # the explanation of "n/a" takes the room of "widest" (no interval is the widest
    # yet), and is left out where even then the line would not fit
    line = head("CI", f"{ci} {why}") if why else ""
    if not line or len(line) + len(tail) > LINE_MAX:
        line = head("widest CI", ci)
    label = _short_label(who, LINE_MAX - len(line) - len(tail) - len(" ()"))
    return line + (f" ({label})" if label else "") + tail


def _interval_text(width: float, rounds: int, sched: ScheduleConfig) -> tuple[str, str]:
    """The widest interval's half-width as the round line shows it, and on the first
    round without one, why there is none yet."""
    if width < 0:
        return "n/a", ""
    if width == float("inf"):
        if rounds != 1:
            return "n/a", ""
        units = "paired rounds" if _per_unit(sched) == 1 else "worker generations"
        return "n/a", f"until {stats.MIN_PAIRED_ROUNDS} {units}"
    if width >= 1:
        return ">= +-100%", ""  # a t quantile on few rounds: the number means nothing
    return f"+-{width:.1%}", ""


def _last_parts(label: str, values: bool) -> str:
    """Each dotted key of a label to its last part (model.fn= to fn=), and with
    ``values`` each dotted name too (my_step.attention_ref to attention_ref, not 0.01)."""

    def shorter(part: str) -> str:
        key, eq, value = part.partition("=")
        key = key.rsplit(".", 1)[-1] if eq else key
        path = value.split(".")
        if values and eq and len(path) > 1 and all(p.isidentifier() for p in path):
            value = path[-1]
        return f"{key}{eq}{value}"

    return " ".join(map(shorter, label.split(" ")))


def _short_label(label: str, room: int) -> str:
    """``label`` within ``room`` characters, shortened step by step only as far as
    needed: the A/A copy's suffix to "(A/A)", dotted keys, dotted values, then cut in
    the middle with "..."; "" when the room is shorter than the label and than
    SHORTEST_LABEL."""
    if not label or room < min(len(label), SHORTEST_LABEL):
        return ""
    name = label
    for shorten in (
        lambda n: n.replace(" (A/A copy)", " (A/A)"),
        lambda n: _last_parts(n, values=False),
        lambda n: _last_parts(n, values=True),
    ):
        if len(name) > room:
            name = shorten(name)
    if len(name) > room:
        front = (room - 3) // 3
        name = f"{name[:front]}...{name[len(name) - (room - 3 - front) :]}"
    return name


def make_runs(
    plan: Plan,
    configs: dict[str, PerflabConfig],
    dicts: dict[str, dict[str, Any]],
    choices: dict[str, dict[str, str]],
    invocation: Invocation,
    sweep_dir: Path,
) -> dict[str, VariantRun]:
    runs = {}
    for variant in plan.variants:
        source = variant.source
        request = TrialRequest(
            configs[source], dicts[source], "", invocation, choices=choices[source]
        )
        runs[variant.name] = VariantRun(request, sweep_dir / variant.dir, variant.source)
    return runs
