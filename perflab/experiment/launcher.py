"""The work behind perflab's Hydra launcher plugin (hydra_plugins/perflab_launcher).

Hydra hands the launcher every job of the sweep at once. Instead of running them one
after another in this process (Hydra's basic launcher, which also aborts the sweep at
the first failure), perflab composes and validates every job first, gives each its
numbered job directory, then runs the interleaved experiment of perflab.experiment.schedule and
returns one result per job. perflab's own task function is not called per job: the
launcher runs perflab trials, in fresh processes, itself.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus, configure_log, setup_globals
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from perflab import exits
from perflab.config.plan import (
    Job,
    assignments,
    build_plan,
    first_listed_baselines,
    override_key,
)
from perflab.config.schema import PerflabConfig
from perflab.config.user_code import workloads_named
from perflab.errors import DiskFull, OutputLost, PerflabError, SweepDirDeleted
from perflab.experiment.invocation import read_invocation
from perflab.experiment.runner import SweepResult, SweepSetup, run_sweep
from perflab.experiment.schedule import make_runs
from perflab.formats.groups import FAILED, GroupEntry
from perflab.formats.records import check_writable
from perflab.formats.summary import Summary
from perflab.formats.sweepdir import (
    CHECK_LOG,
    CONSOLE_LOG,
    GROUPS_FILE,
    LOG_SUFFIX,
    PROFILE_DIR,
    SUMMARY_FILE,
    SWEEP_MARKERS,
    TRIALS_DIR,
    SweepLock,
    check_output_dir,
    trial_records,
)
from perflab.process.console_streams import copy_console_to

FIELD = "hydra.sweep.dir"


@dataclasses.dataclass
class ComposedJob:
    num: int
    overrides: list[str]
    sweep_config: DictConfig
    task_config: DictConfig
    config: PerflabConfig
    job_dir: Path


def _value(cfg: PerflabConfig, key: str, override: str) -> Any:
    """A swept key's value: the validated config's value for a field (so amp=true and
    amp=True agree), the option name for a config group (model=mlp)."""
    obj: Any = cfg
    for part in key.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return override.split("=", 1)[1]


def compose(
    context: HydraContext, config: DictConfig, overrides: Sequence[str], num: int
) -> ComposedJob:
    from perflab.config.compose import to_config

    sweep_config = context.config_loader.load_sweep_config(config, list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = num
        sweep_config.hydra.job.num = num
    HydraConfig.instance().set_config(sweep_config)
    job_dir = Path(str(sweep_config.hydra.sweep.dir)) / str(sweep_config.hydra.sweep.subdir)
    task_config = copy.deepcopy(sweep_config)
    with read_write(task_config), open_dict(task_config):
        del task_config["hydra"]
    return ComposedJob(
        num, list(overrides), sweep_config, task_config, to_config(task_config), job_dir
    )


def _save_hydra_files(job: ComposedJob, into: Path) -> None:
    hydra_dir = into / ".hydra"
    hydra_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(job.task_config, hydra_dir / "config.yaml", resolve=False)
    OmegaConf.save(job.sweep_config.hydra, hydra_dir / "hydra.yaml", resolve=False)
    OmegaConf.save(OmegaConf.create(job.overrides), hydra_dir / "overrides.yaml")


def prepare(config: DictConfig) -> SweepLock:
    """Before Hydra creates the sweep directory and writes into it: refuse a location
    perflab must not write into, or one it cannot, and take the directory's lock (a
    second perflab on it is refused; perflab.formats.sweepdir)."""
    sweep_dir = Path(str(config.hydra.sweep.dir))
    check_output_dir(sweep_dir, FIELD, SWEEP_MARKERS)
    check_writable(sweep_dir, FIELD)  # a full or read-only disk: exit 2 now
    lock = SweepLock(sweep_dir, FIELD).acquire()
    if lock.stale:
        print(
            f"perflab: note: the perflab that ran here before (pid {lock.stale.pid}, "
            f"since {lock.stale.since}) ended without finishing; continuing its directory"
        )
    return lock


def launch(
    context: HydraContext,
    config: DictConfig,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
) -> list[JobReturn]:
    sweep_dir = Path(str(config.hydra.sweep.dir))
    # kept to the end of the process, the last line (how to resume) included: read it
    # after a dropped SSH session
    copy_console_to(sweep_dir / CONSOLE_LOG)
    try:
        with exits.sigterm_interrupts():  # SIGTERM, SIGHUP stop a sweep as Ctrl-C does
            return _launch(context, config, job_overrides, initial_job_idx)
    except OutputLost as exc:
        exits.report(exits.EXIT_OUTPUT_LOST, _output_lost(sweep_dir, exc))
        return []


def _launch(
    context: HydraContext,
    config: DictConfig,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
) -> list[JobReturn]:
    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    jobs = [compose(context, config, ov, initial_job_idx + i) for i, ov in enumerate(job_overrides)]
    _check_one_sweep(jobs)
    if jobs[0].config.scaleout.group_by:
        return _launch_groups(jobs, sweep_dir)
    setup, by_name = _sweep_setup(jobs, sweep_dir)
    try:
        result = run_sweep(setup, print, functools.partial(_announce, setup, by_name, jobs))
    except OutputLost as exc:
        _print_lost(exc)
        raise
    _print_outcome(result, sweep_dir)
    return [_variant_return(j, result.summary) for j in jobs]


def _check_one_sweep(jobs: list[ComposedJob]) -> None:
    """One schedule, report, profile and scale-out for every variant; report.dir writable."""
    first = jobs[0].config
    if any(
        (j.config.schedule, j.config.report, j.config.profile, j.config.scaleout)
        != (first.schedule, first.report, first.profile, first.scaleout)
        for j in jobs
    ):
        raise PerflabError(
            "schedule.*/report.*/profile/scaleout.*: differs between variants; allowed: one "
            "schedule, report and scale-out per sweep (set them without sweeping)"
        )
    if first.report.dir:
        check_writable(Path(first.report.dir), "report.dir")


def _sweep_setup(
    jobs: list[ComposedJob], sweep_dir: Path
) -> tuple[SweepSetup, dict[str, ComposedJob]]:
    """The plan of the composed jobs, a run per variant, and what the runner needs."""
    first = jobs[0].config
    schedule = first.schedule
    plan = build_plan(
        [
            Job(
                j.num,
                j.overrides,
                {override_key(o): _value(j.config, override_key(o), o) for o in j.overrides},
            )
            for j in jobs
        ],
        dict(schedule.treatments),
        schedule.sentinel,
    )
    by_name = {str(j.num): j for j in jobs}
    dicts: dict[str, Any] = {
        n: OmegaConf.to_container(j.task_config, resolve=True) for n, j in by_name.items()
    }
    invocation = read_invocation()
    runs = make_runs(
        plan,
        {n: j.config for n, j in by_name.items()},
        dicts,
        {n: _choices(j) for n, j in by_name.items()},
        invocation,
        sweep_dir,
    )
    setup = SweepSetup(
        plan,
        runs,
        schedule,
        sweep_dir,
        dicts,
        invocation,
        first.profile,
        publish=Path(first.report.dir) if first.report.dir else None,
    )
    return setup, by_name


def _announce(setup: SweepSetup, by_name: dict[str, ComposedJob], jobs: list[ComposedJob]) -> None:
    """Once the settings are checked: each variant's Hydra files, and what will run."""
    plan, schedule, sweep_dir = setup.plan, setup.schedule, setup.sweep_dir
    for variant in plan.variants:
        _save_hydra_files(by_name[variant.source], sweep_dir / variant.dir)
    for note in first_listed_baselines(plan, dict(schedule.treatments)):
        print(f"perflab: note: {note}")
    sentinel = " + A/A sentinel" if schedule.sentinel else ""
    models = workloads_named([(_choices(j), j.config) for j in jobs])
    print(
        f"perflab: {len(jobs)} variant(s){sentinel} of {models}, interleaved rounds; "
        f"sweep directory {sweep_dir}"
    )


def _print_lost(exc: OutputLost) -> None:
    """The table of what was measured before the results could no longer be written."""
    from perflab.report.console import experiment_table

    if exc.summary is not None:
        print(experiment_table(Summary.from_dict(exc.summary)))


def _print_outcome(result: SweepResult, sweep_dir: Path) -> None:
    """The end of a sweep on the console: where the trials' logs are, the table, the
    report, and the exit status's reasons."""
    from perflab.report.console import experiment_table

    summary = result.summary
    logs = trial_logs(sweep_dir)
    if logs:
        print(
            f"perflab: the trial processes' own output (warnings, compiler messages, "
            f"prints) is in {len(logs)} log file(s) beside their records, e.g. {logs[0]}"
        )
    print(experiment_table(summary))
    print(f"report: {result.report}")
    if result.published:
        print(f"report published: {result.published}")
    if result.destroyed:
        # before the failed trials: of two outcomes with one exit code, the first
        # reported is the line printed, and failed trials are named in the table too
        exits.report(exits.EXIT_FAILED, _destroyed(result.destroyed))
    failed = [v.label for v in summary.variants if v.failed]
    if failed:
        exits.report(
            exits.EXIT_FAILED,
            f"trials failed in: {'; '.join(failed)}; see {sweep_dir / SUMMARY_FILE}",
        )
    if result.interrupted:
        exits.report(exits.EXIT_INTERRUPTED, _resume_hint(sweep_dir))


def trial_logs(sweep_dir: Path) -> list[Path]:
    """The logs that trial, profiling and check processes left in a sweep directory (a
    log exists only when its process printed something; perflab.process.isolation.output_to)."""
    patterns = (f"*/{TRIALS_DIR}/*{LOG_SUFFIX}", f"*/{PROFILE_DIR}/*{LOG_SUFFIX}", f"*/{CHECK_LOG}")
    return [p for pattern in patterns for p in sorted(sweep_dir.glob(pattern))]


def _resume_command(sweep_dir: Path) -> str:
    args = [a for a in sys.argv[1:] if not a.startswith("hydra.sweep.dir=")]
    return shlex.join(["perflab", *args, f"hydra.sweep.dir={sweep_dir.absolute()}"])


def _destroyed(records: list[str]) -> str:
    """One line for finished trials whose records were destroyed while the sweep ran
    (perflab.experiment.runner.destroyed_records): which, and how to get them back."""
    return (
        f"finished trial records were destroyed while the sweep ran (deleted or "
        f"overwritten by a trial's code or another process): {'; '.join(records)}; the "
        f"summary and report lack them: run the same command again to measure them again"
    )


def _resume_hint(sweep_dir: Path) -> str:
    """One line for an interrupted sweep: what was kept and the command that resumes it."""
    return (
        f"interrupted; finished trials and their records are kept in {sweep_dir}, with a "
        f"partial summary and report; resume with: {_resume_command(sweep_dir)}"
    )


def _output_lost(sweep_dir: Path, exc: OutputLost) -> str:
    """One line for a sweep stopped because its results could not be written: why, the
    finished trials on disk, and what to do."""
    if isinstance(exc, SweepDirDeleted):
        return f"stopped: {exc}; nothing more was written (start again in a new directory)"
    kept = finished_trials(sweep_dir)
    what = "; ".join(f"{job}: {n}" for job, n in kept.items()) or "none"
    culprit = largest_trial_log(sweep_dir) if isinstance(exc, DiskFull) else ""
    return (
        f"stopped: {exc}; {culprit}finished trials kept in {sweep_dir} (per job directory: "
        f"{what}); free space, then resume with: {_resume_command(sweep_dir)}"
    )


def largest_trial_log(sweep_dir: Path) -> str:
    """When the disk filled and the largest file in the sweep directory is a trial's own
    log (what its processes printed, not a result), a clause naming it: the likely cause,
    and a file that may go (a resumed sweep needs its space back before it starts); ""
    otherwise."""
    sizes = {}
    for folder, _, names in os.walk(sweep_dir):  # never into symbolic links
        for name in names:
            with contextlib.suppress(OSError):
                sizes[Path(folder, name)] = os.lstat(Path(folder, name)).st_size
    largest = max(sizes, key=lambda p: sizes[p], default=None)
    if largest is None or not _is_trial_log(largest):
        return ""
    return (
        f"the largest file written is {largest} ({sizes[largest] / 2**20:,.1f} MiB), the "
        "output a trial printed: delete it to free its space (its trial reruns if it has "
        "no record); trial.max_log_mb caps such logs; "
    )


def _is_trial_log(path: Path) -> bool:
    """A log of a trial, profiling or check process (perflab.process.isolation.output_to)."""
    in_place = path.suffix == LOG_SUFFIX and path.parent.name in (TRIALS_DIR, PROFILE_DIR)
    return in_place or path.name == CHECK_LOG


def finished_trials(sweep_dir: Path) -> dict[str, int]:
    """Trial records on disk per job directory (the sentinel's included)."""
    jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir())
    return {job.name: n for job in jobs if (n := len(trial_records(job)))}


def _launch_groups(jobs: list[ComposedJob], sweep_dir: Path) -> list[JobReturn]:
    """scaleout.group_by: each group's experiment runs as one submitit job."""
    from perflab.experiment.scaleout import Member, launch_groups

    def saver(job: ComposedJob) -> Callable[[Path], None]:
        return lambda into: _save_hydra_files(job, into)

    members = [
        Member(
            Job(j.num, j.overrides, _values(j)),
            j.config,
            OmegaConf.to_container(j.task_config, resolve=True),  # type: ignore[arg-type]
            _choices(j),
            saver(j),
        )
        for j in jobs
    ]
    results, interrupted = launch_groups(members, sweep_dir, print)
    _report_groups(results, interrupted, sweep_dir)
    # each job answers with its own group's entry (the key scaleout.split gave it)
    by_key = {r.key: r for r in results}
    group_by = jobs[0].config.scaleout.group_by
    return [_job_return(j, by_key.get(assignments(_values(j), group_by))) for j in jobs]


def _report_groups(results: list[GroupEntry], interrupted: bool, sweep_dir: Path) -> None:
    """The exit status's reasons of a grouped sweep: destroyed records, lost groups,
    failed trials, an interruption."""
    destroyed = [f"{r.key}: {name}" for r in results for name in r.destroyed]
    if destroyed:  # first, as in a sweep of one machine (_launch)
        exits.report(exits.EXIT_FAILED, _destroyed(destroyed))
    lost = [r.key for r in results if r.state == FAILED]
    failed = [f"{r.key}: {label}" for r in results for label in r.failed_variants]
    if lost or failed:
        exits.report(
            exits.EXIT_FAILED,
            "; ".join(
                ([f"group jobs failed: {', '.join(lost)}"] if lost else [])
                + ([f"trials failed in: {'; '.join(failed)}"] if failed else [])
            )
            + f"; see {sweep_dir / GROUPS_FILE}",
        )
    if interrupted:
        exits.report(exits.EXIT_INTERRUPTED, _resume_hint(sweep_dir))


def _values(job: ComposedJob) -> dict[str, Any]:
    return {override_key(o): _value(job.config, override_key(o), o) for o in job.overrides}


def _choices(job: ComposedJob) -> dict[str, str]:
    return {
        k: str(v)
        for k, v in job.sweep_config.hydra.runtime.choices.items()
        if not k.startswith("hydra")
    }


def _variant_return(job: ComposedJob, summary: Summary) -> JobReturn:
    """The job's return value: its variant's summary (perflab.formats.summary.variant)."""
    return _job_return(job, summary.variant(str(job.num)))


def _job_return(job: ComposedJob, value: Any) -> JobReturn:
    ret = JobReturn(
        overrides=job.overrides,
        cfg=job.task_config,
        hydra_cfg=job.sweep_config,
        working_dir=str(job.job_dir),
        task_name=str(job.sweep_config.hydra.job.name),
    )
    # Always COMPLETED: Hydra's sweeper re-raises a FAILED job and skips on_multirun_end.
    # Failures are in the summary, the records and the exit code instead.
    ret.status = JobStatus.COMPLETED
    ret.return_value = value
    return ret
