"""The typed parts of a trial record: the process it ran in, what it cost, its memory, the
evidence of each knob and the GPU telemetry (perflab.formats.records.TrialRecord).

Each part is a dataclass read and written through perflab.formats.dataclass_json, so a
part's JSON object is what the trial wrote before these types existed, key for key: a key
the trial did not write (a reading it could not take, a field of a later schema) is None
here and absent from the file. A part that is entirely absent (a record written before
schema 4 has no worker and no costs; a trial that failed before its memory was read) is
the empty object, every field None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from perflab.formats.dataclass_json import written_when


@dataclass(kw_only=True)
class TrialWorker:
    """The process a trial ran in (TrialRecord.worker); empty in records before schema 4,
    when every trial had a fresh process."""

    # "worker" (a warm worker, schedule.isolation=worker) or "process" (a fresh one)
    isolation: str | None = written_when()
    # the worker's number in its variant
    id: int | None = written_when()
    # this trial's index in that worker (0: it built the workload)
    trial: int | None = written_when()
    # the rounds one worker serves are its generation (round // trials_per_worker)
    generation: int | None = written_when()
    pid: int | None = written_when()

    @property
    def warm(self) -> bool:
        """It ran in a warm worker, beside the worker's other trials."""
        return self.isolation == "worker"


@dataclass(kw_only=True)
class CostParts:
    """What a trial cost, in seconds, by part (TrialRecord.cost_s), in the order a trial
    spends them; a part the trial never reached is None. Empty before schema 4."""

    # the request sent -> the trial's code running
    start: float | None = written_when()
    # building the workload, and its first call timed apart (0 for a trial that reused
    # its worker's workload)
    build: float | None = written_when()
    first_call: float | None = written_when()
    warmup: float | None = written_when()
    timed: float | None = written_when()
    # the numerics probe and the evidence pass (round 0, or trial.checks_every_round)
    checks: float | None = written_when()
    # the rest of the trial's span (trial.uncounted); absent before 2026-11-24
    other: float | None = written_when()

    def spent(self) -> dict[str, float]:
        """The parts the trial reached, name -> seconds, in the order it spent them."""
        found = ((f.name, getattr(self, f.name)) for f in fields(self))
        return {name: seconds for name, seconds in found if seconds is not None}


@dataclass(kw_only=True)
class PhaseReading:
    """Memory at the end of one phase of the instrumented step: the process's resident set
    on CPU, the caching allocator's counters on CUDA (perflab.measure.memory.PhaseMemory)."""

    phase: str
    # CPU; None where /proc cannot be read (written as null, as the trial wrote it)
    rss_bytes: int | None = written_when(lambda r: r.allocated_bytes is None)
    # CUDA
    allocated_bytes: int | None = written_when()
    reserved_bytes: int | None = written_when()
    # the allocated peak within the phase
    peak_allocated_bytes: int | None = written_when()


def _measured(memory: TrialMemory) -> bool:
    return memory.kind is not None


@dataclass(kw_only=True)
class TrialMemory:
    """A trial's memory (TrialRecord.memory), in bytes; empty for a trial that failed
    before it was read."""

    # after each timed sample (the leak flag's readings): resident set on CPU, allocated
    # bytes on CUDA; absent before 2026-11-24
    sample_bytes: list[int] | None = written_when()
    peak_rss_bytes: int | None = written_when()
    # null where /proc cannot be read, written as the trial wrote it
    rss_at_start_bytes: int | None = written_when(_measured)
    # "cuda_allocator" or "process_rss": what peak_bytes is the peak of
    kind: str | None = written_when()
    # the headline number: the allocator's peak on CUDA, the process's peak RSS on CPU
    peak_bytes: int | None = written_when()
    peak_reserved_bytes: int | None = written_when()
    # one instrumented step, phase by phase (round 0, or trial.checks_every_round)
    phases: list[PhaseReading] | None = written_when()


@dataclass(kw_only=True)
class KnobEvidence:
    """What a trial observed of one knob (TrialRecord.evidence[knob]): observed, not
    assumed (perflab.measure.knobs)."""

    # the knob's value as the config asked for it
    requested: Any
    # what the trial saw (dtypes of outputs, a graph count, the user's check's answer)
    observed: Any
    # the observation matches the request; None: it cannot tell
    ok: bool | None
    detail: str
    # fused=triton only: real calls of each fused op, and whether Triton's interpreter ran
    # them (correct, but its timing is not the GPU's)
    op_calls: dict[str, int] | None = written_when()
    interpreted: bool | None = written_when()
    timing_representative: bool | None = written_when()


def _sampled(telemetry: TrialTelemetry) -> bool:
    return telemetry.available is True


@dataclass(kw_only=True)
class TrialTelemetry:
    """GPU telemetry sampled through NVML during the timed block (TrialRecord.telemetry,
    perflab.measure.telemetry); without readings only ``available`` false and the reason."""

    available: bool | None = written_when()
    # why there are no readings (no GPU, NVML missing, telemetry_interval_ms=0)
    reason: str | None = written_when()
    source: str | None = written_when(_sampled)
    # the GPU's name
    device: str | None = written_when(_sampled)
    interval_ms: float | None = written_when(_sampled)
    samples: int | None = written_when(_sampled)
    util_pct_median: float | None = written_when(_sampled)
    sm_clock_mhz_median: float | None = written_when(_sampled)
    sm_clock_mhz_min: float | None = written_when(_sampled)
    max_sm_clock_mhz: float | None = written_when(_sampled)
    # median SM clock over its maximum
    clock_ratio_median: float | None = written_when(_sampled)
    temperature_c_max: float | None = written_when(_sampled)
    power_w_median: float | None = written_when(_sampled)
    power_limit_w: float | None = written_when(_sampled)
    # share of the readings per clock-event reason that was set (THROTTLE_BITS' names)
    throttle_share: dict[str, float] | None = written_when(_sampled)

    @classmethod
    def unavailable(cls, reason: str) -> TrialTelemetry:
        return cls(available=False, reason=reason)


@dataclass(frozen=True)
class Invocation:
    """How perflab was invoked: the command line, the working directory and its git state
    (perflab.experiment.invocation.read_invocation). Read in the launching process, carried
    to every trial in its request and kept in its record's environment."""

    argv: list[str] = field(default_factory=list)
    cwd: str = ""
    git_commit: str | None = None
    # uncommitted changes in the working directory; None outside a git checkout
    git_dirty: bool | None = None

    def as_environment(self) -> dict[str, Any]:
        """Its entries of TrialRecord.environment, as every record has written them."""
        return {
            "argv": list(self.argv),
            "cwd": self.cwd,
            "git_commit": self.git_commit,
            "git_dirty": self.git_dirty,
        }


@dataclass(frozen=True, kw_only=True)
class TrialSettings:
    """What the config became on the machine, read from TrialRecord.settings. The record
    keeps that mapping as the trial wrote it, since summary.json copies it verbatim
    (records before 2026-11-25 have no function or step); this is its typed view, a key
    the record lacks None. load_record checks batch_size in every ok trial."""

    device: str | None = None
    amp_dtype: str | None = None
    compile_mode: str | None = None
    mode: str | None = None
    batch_size: int | None = None
    threads: int | None = None
    data_source: str | None = None
    num_workers: int | None = None
    pin_memory: bool | None = None
    channels_last: bool | None = None
    fused: str | None = None
    # the model's factory path
    model: str | None = None
    # model=function's function and the user's step (step=)
    function: str | None = None
    step: str | None = None

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> TrialSettings:
        known = {f.name for f in fields(cls)}
        return cls(**{name: value for name, value in settings.items() if name in known})
