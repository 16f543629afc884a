"""Scale-out: a sweep split into independent groups, each run as one job through submitit.

Variants that are compared must share a machine: pairing trials by round is what makes a
verdict honest. So the unit of distribution is a *group*, the variants that share the
values of the ``scaleout.group_by`` keys. Each group runs its own interleaved experiment,
with its own A/A sentinel (a noise floor belongs to a machine), as one submitit job: a
SLURM job on a cluster, a local process on a laptop or in tests. A group writes a
complete sweep directory, the same layout as a single-machine sweep, under
``SWEEP/groups/KEY=VALUE/``; the sweep's report merges the groups
(:mod:`perflab.report.merge`) and never compares step times across machines unasked.

submitit ships each group's task to its job with (cloud)pickle, as any submitit user's
job is shipped; records, summaries and reports stay JSON, CSV, Markdown and PNG.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.config.plan import BUILTIN_TREATMENTS, Job, assignments, build_plan, swept_keys
from perflab.config.schema import PerflabConfig, ScaleOutConfig
from perflab.config.user_code import workloads_named
from perflab.errors import ConfigError
from perflab.experiment import resume
from perflab.experiment.invocation import read_invocation
from perflab.experiment.runner import SweepSetup
from perflab.experiment.schedule import check_all, make_runs
from perflab.formats.groups import (
    DONE,
    FAILED,
    PENDING,
    GroupEntry,
    GroupOutcome,
    read_groups,
    write_groups,
)
from perflab.formats.sweepdir import GROUPS_DIR, SUBMITIT_DIR
from perflab.formats.trial_parts import Invocation
from perflab.report.merge import write_merged_report


@dataclass
class Group:
    # "model=mlp batch_size=64": the group_by keys' values, also its directory name
    key: str
    jobs: list[Job]

    @property
    def dir_name(self) -> str:
        # one path component, readable: "model=mlp,batch_size=64"
        return re.sub(r"[^A-Za-z0-9=,._+-]", "_", self.key.replace(" ", ","))


@dataclass
class GroupTask:
    """What one group's job receives: plain data, shipped by submitit. ``sweep.check``:
    resolve every variant in the job before measuring (on SLURM the submitting machine
    is not the one that runs the group; locally the launcher checked already)."""

    key: str
    # the group's own sweep, measured in the job by perflab.experiment.runner.run_sweep
    sweep: SweepSetup


def check_group_by(group_by: list[str], jobs: list[Job], declared: dict[str, Any]) -> None:
    """Group keys must be swept, and must not be treatments: a treatment is compared with
    its baseline, and grouping by it would put the two on different machines."""
    swept = swept_keys(jobs)
    for key in group_by:
        if key not in swept:
            raise ConfigError(
                "scaleout.group_by",
                key,
                f"keys swept in this sweep ({', '.join(swept) or 'none'})",
                "not swept",
            )
        if key in BUILTIN_TREATMENTS or key in declared:
            raise ConfigError(
                "scaleout.group_by",
                key,
                "swept keys that are not treatments (a treatment is compared with its "
                "baseline on one machine), e.g. model or batch_size",
                "is a treatment",
            )


def split(jobs: list[Job], group_by: list[str]) -> list[Group]:
    """The jobs of each combination of group_by values, in command-line order."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        key = assignments(job.values, group_by)
        groups.setdefault(key, []).append(job)
    return [Group(key, members) for key, members in groups.items()]


def run_group(task: GroupTask) -> GroupOutcome:
    """One group's whole experiment, in its job: rounds, profiles, its own report. A
    re-run into the same sweep directory resumes the group (perflab.experiment.resume);
    Ctrl-C or SIGTERM (how SLURM stops a job) keeps the finished trials and writes the
    report."""
    import socket

    from perflab import exits
    from perflab.experiment.runner import run_sweep

    start = time.monotonic()
    with exits.sigterm_interrupts():
        result = run_sweep(task.sweep, _prefixed(task.key))
    return GroupOutcome(
        hostname=socket.gethostname(),
        stop_reason="interrupted" if result.interrupted else result.summary.stop_reason,
        failed=[v.label for v in result.summary.variants if v.failed],
        destroyed=result.destroyed,
        report=str(result.report.relative_to(task.sweep.sweep_dir)),
        seconds=round(time.monotonic() - start, 3),
        phases_s=result.phases_s,
    )


def _prefixed(key: str) -> Callable[[str], None]:
    def say(line: str) -> None:
        print(f"[{key}] {line}", flush=True)

    return say


def make_executor(cfg: ScaleOutConfig, folder: Path) -> Any:
    """submitit's executor for the configured backend."""
    import submitit

    if cfg.executor == "local":
        local = submitit.LocalExecutor(folder=folder)
        local.update_parameters(timeout_min=cfg.slurm.timeout_min)
        return local
    try:
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    except RuntimeError as exc:  # submitit looks for srun
        raise ConfigError(
            "scaleout.executor",
            "slurm",
            "slurm on a machine that submits SLURM jobs (srun and sbatch on PATH), or local",
            str(exc),
        ) from exc
    s = cfg.slurm
    params: dict[str, Any] = {
        "name": "perflab",
        "timeout_min": s.timeout_min,
        "gpus_per_node": s.gpus_per_node,
        "cpus_per_task": s.cpus_per_task,
        "mem_gb": s.mem_gb,
        "nodes": 1,
        "tasks_per_node": 1,
        "slurm_additional_parameters": dict(s.additional_parameters),
    }
    for name in ("partition", "account", "qos", "constraint"):
        if getattr(s, name):
            params[f"slurm_{name}"] = getattr(s, name)
    executor.update_parameters(**params)
    return executor


def run_groups(
    tasks: list[GroupTask],
    cfg: ScaleOutConfig,
    sweep_dir: Path,
    say: Callable[[str], None],
) -> list[GroupEntry]:
    """Submit every group's job (at most max_parallel at once locally), wait for all, and
    write groups.json. A group whose job fails is recorded as failed; the rest go on."""
    executor = make_executor(cfg, sweep_dir / SUBMITIT_DIR)
    slurm = cfg.executor == "slurm"
    # SLURM queues and runs jobs itself; the local executor would run them all at once
    window = len(tasks) if slurm else cfg.max_parallel
    results: list[GroupEntry] = []
    pending = list(tasks)
    running: list[tuple[GroupTask, Any, float]] = []
    try:
        while pending or running:
            while pending and len(running) < window:
                task = pending.pop(0)
                job = executor.submit(run_group, task)
                say(f"group {task.key}: job {job.job_id} submitted (logs: {job.paths.stdout})")
                running.append((task, job, time.monotonic()))
            task, job, submitted = running.pop(0)
            results.append(_wait(task, job, submitted, say, slurm))
            _write_index(sweep_dir, tasks, results)
    except KeyboardInterrupt:
        # Ctrl-C reached the local jobs too (same process group); a SLURM job gets
        # scancel's SIGTERM. Either way each group keeps its finished trials and writes
        # its partial report: give them the time to, then collect what they returned.
        for _, job, _ in running:
            job.cancel(check=False)
        for task, job, submitted in running:
            _settle(job)
            results.append(_wait(task, job, submitted, say, slurm))
        _write_index(sweep_dir, tasks, results)
        raise
    return results


# how long an interrupted group's job may take to write its partial summary and report
SETTLE_S = 60.0


def _settle(job: Any) -> None:
    deadline = time.monotonic() + SETTLE_S
    while not job.done() and time.monotonic() < deadline:
        time.sleep(0.2)


# How often a SLURM job that has left no result is looked up with squeue. submitit asks
# sacct, which answers nothing on a cluster without accounting (no slurmdbd: "Slurm
# accounting storage is disabled"); there a job cancelled while pending, or killed before
# it wrote its result, would be waited on forever (seen on the single-node cluster of
# benchmarks/slurm/start_cluster.sh, docs/slurm.md).
SLURM_POLL_S = 5.0
# squeue's states of a job that has stopped for good (squeue(1), JOB STATE CODES); any
# other state (PENDING, RUNNING, COMPLETING, REQUEUED, PREEMPTED before a requeue, ...)
# may still bring a result
SLURM_ENDED = frozenset(
    ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL")
    + ("OUT_OF_MEMORY", "SPECIAL_EXIT", "TIMEOUT")
)
# a job SLURM no longer knows: it ended more than MinJobAge (300 s by default) ago
SLURM_GONE = "GONE (no longer known to SLURM)"
# seconds a result file may take to appear after SLURM says its job ended
RESULT_GRACE_S = 15.0


def _slurm_state(job_id: str) -> str | None:
    """The job's state from squeue (``CANCELLED``, ``RUNNING``, ...), SLURM_GONE when
    SLURM no longer knows it, None when squeue cannot say (controller unreachable)."""
    command = ["squeue", "--noheader", "--states=all", f"--jobs={job_id}", "--format=%T"]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return SLURM_GONE if "Invalid job id" in out.stderr else None
    states = out.stdout.split()
    return states[0] if states else SLURM_GONE


def _until_done(job: Any, slurm: bool) -> str | None:
    """Wait until the job has its result; a SLURM job also until SLURM says it ended
    without one. Returns the SLURM state it ended in (None: the result is there)."""
    next_ask = time.monotonic() + SLURM_POLL_S
    # job.result() polls about once a second; a short poll of done() returns sooner
    while not job.done():
        if slurm and time.monotonic() >= next_ask:
            state = _slurm_state(str(job.job_id))
            if state == SLURM_GONE or state in SLURM_ENDED:
                # the result file may reach a shared file system a little after the job
                # ended (submitit's own grace, Job._results_timeout_s)
                deadline = time.monotonic() + RESULT_GRACE_S
                while not job.done() and time.monotonic() < deadline:
                    time.sleep(0.2)
                return None if job.done() else state
            next_ask = time.monotonic() + SLURM_POLL_S
        time.sleep(0.1)
    return None


def _wait(
    task: GroupTask, job: Any, submitted: float, say: Callable[[str], None], slurm: bool = False
) -> GroupEntry:
    ended = _until_done(job, slurm)
    if ended:
        # not job.result(): it waits until done(), which without sacct never comes
        say(f"group {task.key}: job {job.job_id} ended ({ended}) without a result")
        error = f"SLURM job ended ({ended}) without a result; its log: {job.paths.stderr}"
        return _failed(task, job, error)
    try:
        outcome: GroupOutcome = job.result()
    except Exception as exc:  # noqa: BLE001 - one lost group must not lose the others
        first = str(exc).strip().splitlines()
        say(f"group {task.key}: job {job.job_id} FAILED: {first[-1] if first else exc}")
        return _failed(task, job, str(exc)[-2000:])
    say(f"group {task.key}: ended on {outcome.hostname} ({outcome.stop_reason})")
    return GroupEntry(
        key=task.key,
        dir=task.sweep.sweep_dir.name,
        outcome=outcome,
        job_id=str(job.job_id),
        state=DONE,
        # job start-up, waiting and collecting: the cost of running as a job
        overhead_s=round(time.monotonic() - submitted - outcome.seconds, 3),
    )


def _failed(task: GroupTask, job: Any, error: str) -> GroupEntry:
    return GroupEntry(
        key=task.key,
        dir=task.sweep.sweep_dir.name,
        job_id=str(job.job_id),
        state=FAILED,
        error=error,
    )


def _write_index(sweep_dir: Path, tasks: list[GroupTask], results: list[GroupEntry]) -> None:
    """groups.json: each task's entry, PENDING until its job has ended."""
    done = {r.key: r for r in results}
    write_groups(sweep_dir, [done.get(t.key) or _pending(t) for t in tasks])


def _pending(task: GroupTask) -> GroupEntry:
    return GroupEntry(key=task.key, dir=task.sweep.sweep_dir.name, state=PENDING)


def group_dir(sweep_dir: Path, group: Group) -> Path:
    return sweep_dir / GROUPS_DIR / group.dir_name


@dataclass
class Member:
    """The launcher's view of one composed job, for grouping."""

    job: Job
    config: PerflabConfig
    config_dict: dict[str, Any]
    choices: dict[str, str]
    # writes the job's .hydra/ files into a directory
    save_hydra_files: Callable[[Path], None]


def launch_groups(
    members: list[Member], sweep_dir: Path, say: Callable[[str], None]
) -> tuple[list[GroupEntry], bool]:
    """Plan every group, check it, submit the groups' jobs, merge their reports; return
    the groups' entries and whether the run was interrupted."""
    first = members[0].config
    cfg = first.scaleout
    check_group_by(cfg.group_by, [m.job for m in members], dict(first.schedule.treatments))
    sweep = _Sweep({str(m.job.num): m for m in members}, first, read_invocation(), sweep_dir)
    tasks = []
    for group in split([m.job for m in members], cfg.group_by):
        setup = _group_setup(group, sweep)
        if cfg.executor == "local":
            # this machine runs the groups: check here, before anything is submitted
            # (the job checks again, and on SLURM only the job can)
            for warning in _checked_here(setup):
                say(f"perflab: warning: {warning}")
        for variant in setup.plan.variants:
            sweep.members[variant.source].save_hydra_files(setup.sweep_dir / variant.dir)
        tasks.append(GroupTask(group.key, setup))
    say(_announcement(members, len(tasks), cfg, sweep_dir))
    results, interrupted = _run_to_the_end(tasks, cfg, sweep_dir, say)
    say(f"report: {write_merged_report(sweep_dir)}")
    if first.report.dir:
        say(f"report published: {write_merged_report(sweep_dir, Path(first.report.dir))}")
    return results, interrupted


@dataclass(frozen=True)
class _Sweep:
    """What every group's sweep is made from."""

    # the composed jobs, by job number ("0", "1", ...)
    members: dict[str, Member]
    # the first job's config: the schedule, profile and scale-out every job shares
    first: PerflabConfig
    # perflab.experiment.invocation.read_invocation(), once for every group
    invocation: Invocation
    sweep_dir: Path


def _group_setup(group: Group, sweep: _Sweep) -> SweepSetup:
    """The group's own sweep: its plan, a run per variant, in its directory."""
    sched = sweep.first.schedule
    directory = group_dir(sweep.sweep_dir, group)
    plan = build_plan(group.jobs, dict(sched.treatments), sched.sentinel)
    members = {str(j.num): sweep.members[str(j.num)] for j in group.jobs}
    configs = {n: m.config_dict for n, m in members.items()}
    runs = make_runs(
        plan,
        {n: m.config for n, m in members.items()},
        configs,
        {n: m.choices for n, m in members.items()},
        sweep.invocation,
        directory,
    )
    local = sweep.first.scaleout.executor == "local"
    return SweepSetup(
        plan,
        runs,
        sched,
        directory,
        configs,
        sweep.invocation,
        sweep.first.profile,
        check=not local,
    )


def _checked_here(setup: SweepSetup) -> list[str]:
    """The group's resume check and settings check, run on this machine; the warnings of
    its variants' settings checks, sorted, each once. ConfigError when the group's
    directory holds another experiment."""
    fingerprint = resume.fingerprint(setup.configs, setup.invocation)
    resume.previous(setup.sweep_dir, setup.plan, fingerprint)
    # each variant's check logs into its directory, and perflab.process.isolation creates
    # only the last level of a log's path: the group's directory must exist
    setup.sweep_dir.mkdir(parents=True, exist_ok=True)
    return sorted({w for ws in check_all(setup.runs).values() for w in ws})


def _announcement(members: list[Member], groups: int, cfg: ScaleOutConfig, sweep_dir: Path) -> str:
    """What will run, and how, in one line."""
    models = workloads_named([(m.choices, m.config) for m in members])
    return (
        f"perflab: {len(members)} variant(s) of {models} in {groups} group(s) by "
        f"{', '.join(cfg.group_by)}; each group is one {cfg.executor} job with its own "
        f"interleaved rounds and A/A sentinel; sweep directory {sweep_dir}"
    )


def _run_to_the_end(
    tasks: list[GroupTask], cfg: ScaleOutConfig, sweep_dir: Path, say: Callable[[str], None]
) -> tuple[list[GroupEntry], bool]:
    """Every group's entry once its job has ended, and whether the run was interrupted:
    by Ctrl-C here (the entries are then groups.json's, as run_groups left it), or in a
    group's own experiment."""
    try:
        results = run_groups(tasks, cfg, sweep_dir, say)
    except KeyboardInterrupt:
        return read_groups(sweep_dir), True
    return results, any(r.interrupted for r in results)
