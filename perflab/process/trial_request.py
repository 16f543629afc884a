"""What a trial process is asked to do, and the parent's side of running it.

Torch-free on purpose: the CLI, the launcher and a scale-out job only send requests to
trial processes (which have torch preloaded by the fork server) and read records back,
so they never pay the seconds of ``import torch`` themselves. The trial functions are
named by path ("module:function") and resolved in the child.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflab.config.schema import PerflabConfig
from perflab.formats.records import ErrorInfo, TrialRecord, write_record
from perflab.formats.sweepdir import log_beside
from perflab.formats.trial_parts import Invocation, TrialWorker

if TYPE_CHECKING:  # imported where a trial runs: this module stays light
    from perflab.process.isolation import Limits, Worker

# the functions a trial process runs, resolved there (perflab.process.isolation)
RUN_TRIAL = "perflab.measure.trial:run_trial"
RUN_PROFILE = "perflab.measure.profiling_pass:run_profile"
CHECK_SETTINGS = "perflab.measure.preflight:check_settings"


@dataclass(frozen=True)
class TrialLength:
    """The timed block's length, fixed for every later trial of a configuration by its
    first trial in the sweep, so that the trials of a variant never mix windows or
    lengths (docs/experiments.md, "Trial length")."""

    steps_per_sample: int
    timed_steps: int
    # the round of the trial that set it
    from_round: int


@dataclass
class TrialRequest:
    """Everything a trial process needs; plain data so it crosses the process boundary."""

    config: PerflabConfig
    # the composed config as a plain dict, stored in the record
    config_dict: dict[str, Any]
    record_path: str
    # command line, working directory and git state of the CLI process
    invocation: Invocation = field(default_factory=Invocation)
    round: int = 0
    # which session of a resumed sweep sends it (TrialRecord.session)
    session: int = 0
    # config group options chosen (Hydra's runtime.choices), for labels
    choices: dict[str, str] = field(default_factory=dict)
    # None: the timed block runs to trial.min_*/max_*; else the length fixed by an
    # earlier trial of the same configuration
    length: TrialLength | None = None
    # in a sweep, whether this trial calibrates (fixes the length of the later ones)
    calibrating: bool = False
    # what happened just before the trial started (the settle wait), for its record
    settle: dict[str, Any] = field(default_factory=dict)
    # the process it runs in, for its record (TrialRecord.worker); empty for a lone trial
    worker: TrialWorker = field(default_factory=TrialWorker)
    # time.time() when the request was sent: the trial's start cost is measured from it
    sent_at: float = 0.0


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


# error.type of the record the parent writes, by how the trial process ended (else the
# record's status: "failed", "timeout")
ERROR_TYPES = {"memory_cap": "MemoryCapExceeded"}


def failure_record(request: TrialRequest, kind: str, message: str) -> TrialRecord:
    """The record the parent writes for a trial process that died ("crashed"), hung
    ("timeout") or went over its memory cap ("memory_cap") before it could write its
    own: a failure is never a lost result."""
    stamp = now()
    status = "timeout" if kind == "timeout" else "failed"
    return TrialRecord(
        status=status,
        config=request.config_dict,
        settings={},
        started_at=stamp,
        finished_at=stamp,
        round=request.round,
        session=request.session,
        choices=dict(request.choices),
        error=ErrorInfo(ERROR_TYPES.get(kind, status), message, ""),
        environment=request.invocation.as_environment(),
        worker=dataclasses.replace(request.worker),
    )


# trial.max_memory_mb=null caps a trial at this share of the machine's memory
# (perflab.process.isolation.machine_memory_bytes): the rest is left to the sweep process, the
# fork server and everything else on the machine, so that a runaway trial is stopped by
# perflab, with a record naming the cap, before the kernel's OOM killer (which may pick
# any process) or swapping does it
DEFAULT_MEMORY_SHARE = 0.8


def trial_limits(request: TrialRequest) -> Limits:
    """What the trial process of ``request`` may use (trial.max_memory_mb,
    trial.max_log_mb): the bounds perflab.process.isolation enforces while it runs."""
    from perflab.process.isolation import Limits

    trial = request.config.trial
    memory, setting = _memory_cap(trial.max_memory_mb)
    return Limits(
        max_memory_bytes=memory,
        memory_setting=setting,
        log=log_beside(request.record_path),
        max_log_bytes=round(trial.max_log_mb * 2**20),
    )


def _memory_cap(max_memory_mb: float | None) -> tuple[int, str]:
    """The cap in bytes (0: none) and the setting it comes from, for its message."""
    from perflab.process.isolation import machine_memory_bytes

    if max_memory_mb is not None:
        return round(max_memory_mb * 2**20), f"trial.max_memory_mb={max_memory_mb:g}"
    machine = machine_memory_bytes()
    if machine is None:  # no way to know the machine's memory: no default cap
        return 0, ""
    share = DEFAULT_MEMORY_SHARE
    return round(machine * share), (
        f"trial.max_memory_mb=null: {share:.0%} of the machine's {machine / 2**20:,.0f} MiB"
    )


def run_in_process(request: TrialRequest, worker: Worker | None = None) -> Path:
    """Run one trial in a fresh process, or in ``worker`` (a warm one,
    schedule.isolation=worker), and return its record's path. An impossible setting
    raises PerflabError (nothing measured); a process that died or hung before writing
    its record gets one from the parent, so a failure is never a lost result."""
    from perflab.errors import DiskFull, PerflabError, no_space
    from perflab.process.isolation import run_isolated

    # Resolved here, before the user's code runs: a model that calls os.chdir would
    # otherwise send its record (and a warm worker's later trials' logs and records)
    # under its new directory, or nowhere
    path = Path(request.record_path).absolute()
    request = dataclasses.replace(request, record_path=str(path))
    timeout_s, limits = request.config.trial.timeout_s, trial_limits(request)
    if worker is None:
        result = run_isolated(RUN_TRIAL, request, timeout_s, limits=limits)
    else:
        result = worker.call(RUN_TRIAL, request, timeout_s, limits=limits)
    if result.kind == "config_error":
        raise PerflabError(result.message)
    if result.kind != "ok":
        try:
            record = failure_record(request, result.kind, result.message)
            write_record(path, record, parents=False)  # never recreate a deleted sweep
        except OSError as exc:
            if no_space(exc):
                raise DiskFull(f"no space left on the disk of {path.parent}") from exc
            raise
    return path
