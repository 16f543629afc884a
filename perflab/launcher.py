"""The work behind perflab's Hydra launcher plugin (hydra_plugins/perflab_launcher).

Hydra hands the launcher every job of the sweep at once. Instead of running them one
after another in this process (Hydra's basic launcher, which also aborts the sweep at
the first failure), perflab composes and validates every job first, gives each its
numbered job directory, then runs the interleaved experiment of perflab.schedule and
returns one result per job. perflab's own task function is not called per job: the
launcher runs perflab trials, in fresh processes, itself.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus, configure_log, setup_globals
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from perflab import environment, outcome
from perflab.config import PerflabConfig
from perflab.errors import PerflabError
from perflab.plan import Job, build_plan, override_key
from perflab.schedule import check_all, make_runs, run_experiment, run_profiles

log = logging.getLogger(__name__)


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
    from perflab.cli import to_config

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


def launch(
    context: HydraContext,
    config: DictConfig,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
) -> list[JobReturn]:
    from perflab.console import experiment_table

    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    jobs = [compose(context, config, ov, initial_job_idx + i) for i, ov in enumerate(job_overrides)]
    schedule = jobs[0].config.schedule
    first = jobs[0].config
    if any(
        (j.config.schedule, j.config.report, j.config.profile)
        != (schedule, first.report, first.profile)
        for j in jobs
    ):
        raise PerflabError(
            "schedule.*/report.*/profile: differs between variants; allowed: one "
            "schedule and one report per sweep (set them without sweeping)"
        )
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
    runs = make_runs(
        plan,
        {n: j.config for n, j in by_name.items()},
        {n: OmegaConf.to_container(j.task_config, resolve=True) for n, j in by_name.items()},  # type: ignore[misc]
        {n: _choices(j) for n, j in by_name.items()},
        environment.invocation(),
        sweep_dir,
    )
    for warning in sorted({w for ws in check_all(runs).values() for w in ws}):
        print(f"perflab: warning: {warning}")
    for variant in plan.variants:
        source = by_name[variant.source]
        _save_hydra_files(source, sweep_dir / variant.dir)
    print(
        f"perflab: {len(jobs)} variant(s) + A/A sentinel, interleaved rounds; "
        f"sweep directory {sweep_dir}"
        if schedule.sentinel
        else f"perflab: {len(jobs)} variant(s), interleaved rounds; sweep directory {sweep_dir}"
    )
    summary = run_experiment(plan, runs, schedule, sweep_dir, print)
    if jobs[0].config.profile:
        run_profiles(plan, runs, print)
    print(experiment_table(summary))
    from perflab.report import load, write_report

    report = load(sweep_dir, summary)
    print(f"report: {write_report(report)}")
    if jobs[0].config.report.dir:
        print(f"report published: {write_report(report, Path(jobs[0].config.report.dir))}")
    failed = [v["label"] for v in summary["variants"] if v["failed"]]
    if failed:
        outcome.report(
            outcome.EXIT_FAILED,
            f"trials failed in: {'; '.join(failed)}; see {sweep_dir / 'summary.json'}",
        )
    return [_job_return(j, summary) for j in jobs]


def _choices(job: ComposedJob) -> dict[str, str]:
    return {
        k: str(v)
        for k, v in job.sweep_config.hydra.runtime.choices.items()
        if not k.startswith("hydra")
    }


def _job_return(job: ComposedJob, summary: dict[str, Any]) -> JobReturn:
    variant = next(v for v in summary["variants"] if v["name"] == str(job.num))
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
    ret.return_value = variant
    return ret
