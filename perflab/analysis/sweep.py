"""A sweep directory as the analysis reads it: experiment.json (Experiment: the plan, the
schedule settings, how the run went) and the trial records, read once by each command
that analyses or reports a sweep (read_sweep).

experiment.json is parsed here into typed values, once; everything after reads their
attributes. The schedule's object is kept as it was read, to be written back unchanged
(it holds settings the analysis does not read).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab.analysis import stats
from perflab.config.plan import Plan, Variant
from perflab.config.schema import ScheduleConfig
from perflab.errors import OutsideSweep, RecordError
from perflab.formats.dataclass_json import read_version
from perflab.formats.json_file import read_json
from perflab.formats.records import TrialRecord, load_record
from perflab.formats.sweepdir import EXPERIMENT_FILE, inside, trial_records

# the schedule settings every experiment.json holds, which the analysis and the report
# read (ScheduleSettings' fields without a default)
SCHEDULE_KEYS = (
    "metric",
    "confidence",
    "delta",
    "min_rounds",
    "max_rounds",
    "target_half_width",
    "time_budget_s",
)


@dataclass(frozen=True)
class ScheduleSettings:
    """The schedule.* settings a sweep ran with (perflab.config.schema.ScheduleConfig),
    as experiment.json holds them: the ones the analysis and the report read, typed."""

    # "latency" or "throughput"
    metric: str
    # confidence level of every interval
    confidence: float
    # the practical band, +-delta
    delta: float
    # the stopping rule's bounds: rounds, the target CI half-width, seconds
    min_rounds: int
    max_rounds: int
    target_half_width: float
    time_budget_s: float
    # printed on every result, e.g. "exploratory (preset=quick)"
    label: str = ""
    # "worker" or "process"; None in an experiment.json from before warm workers existed
    # (a fresh process per trial)
    isolation: str | None = None
    # rounds one warm worker serves; None from before warm workers existed
    trials_per_worker: int | None = None
    # experiment.json's object itself, written back unchanged
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: Any) -> ScheduleSettings:
        """The settings of experiment.json's "schedule": TypeError when it is no object,
        KeyError naming the settings it lacks. Values are taken as written (a budget of
        600 stays an int)."""
        if not isinstance(data, dict):
            raise TypeError(f"schedule is {type(data).__name__}, not an object")
        missing = [k for k in SCHEDULE_KEYS if k not in data]
        if missing:
            raise KeyError(f"schedule has no {', '.join(missing)}")
        names = [f.name for f in dataclasses.fields(cls) if f.name != "raw"]
        return cls(**{k: data[k] for k in names if k in data}, raw=data)

    @classmethod
    def from_config(cls, schedule: ScheduleConfig) -> ScheduleSettings:
        """The settings as a sweep writes them into its experiment.json."""
        return cls.from_dict(dataclasses.asdict(schedule))

    @property
    def rounds_per_unit(self) -> int:
        """How many consecutive rounds form one independent unit of the analysis: a
        worker generation with warm workers (isolation "worker"), else one round. A
        worker serves trials_per_worker rounds, but at most a third of max_rounds: an
        interval needs 3 units, and a sweep capped at 6 rounds must still reach one."""
        if self.isolation != "worker":
            return 1
        per_worker = int(self.trials_per_worker if self.trials_per_worker is not None else 1)
        return max(min(per_worker, int(self.max_rounds) // stats.MIN_PAIRED_ROUNDS), 1)


@dataclass(frozen=True)
class ResumedSession:
    """One resumed session of a sweep: experiment.json's "resumed" entries."""

    # the round it began in (from 0), and the finished trials it found on disk and kept
    at_round: int
    trials_kept: int
    # when it first ran a trial (ISO 8601, UTC)
    at: str


# the type of each key of a "resumed" entry (exactly: a bool is no int here)
_RESUMED_KEYS = {"at_round": int, "trials_kept": int, "at": str}


@dataclass(frozen=True)
class Experiment:
    """What experiment.json holds: the plan, the schedule settings and how the run went."""

    plan: Plan
    # the schedule.* settings the sweep ran with
    schedule: ScheduleSettings
    # "running", "precision reached", "max rounds", "time budget", "interrupted",
    # "every variant failed", "no comparison left (failed variants)", "config error"
    stop_reason: str
    # complete rounds, and seconds spent measuring (summed over the sessions of a resumed
    # experiment; the time between sessions does not count)
    rounds: int
    elapsed_s: float
    # what a resumed session must match: each job's composed config and the machine and
    # software (perflab.experiment.resume.fingerprint)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    # seconds each round took (a round finished in a later session adds both parts)
    round_s: list[float] = field(default_factory=list)
    # one entry per resumed session that ran trials, in order
    resumed: list[ResumedSession] = field(default_factory=list)

    # experiment.json's format (class attributes, not fields), docs/records.md:
    #   1 (2026-11-22) no schema_version field;
    #   2 (2026-11-26) ``schema_version``, written first; otherwise as version 1.
    # A file without one is version 1; a version not listed here (one a newer perflab
    # wrote) is refused rather than misread.
    SCHEMA_VERSION = 2
    READS_VERSIONS = (1, 2)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.SCHEMA_VERSION,
            "plan": self.plan.to_dict(),
            "schedule": self.schedule.raw,
            "stop_reason": self.stop_reason,
            "rounds": self.rounds,
            "elapsed_s": self.elapsed_s,
            "fingerprint": self.fingerprint,
            "round_s": self.round_s,
            "resumed": [dataclasses.asdict(r) for r in self.resumed],
        }

    @classmethod
    def load(cls, sweep_dir: Path) -> Experiment:
        """experiment.json of ``sweep_dir``. Every caller names the file and says it is
        unreadable, in one line, for what this raises: OSError, ValueError (not JSON,
        nested too deep, a schema_version it does not read, sessions it cannot read),
        KeyError (a part or a schedule setting missing), TypeError, AttributeError (a
        part of the wrong kind). Bad records are load_trials' to skip, never blamed on
        it."""
        path = Path(sweep_dir) / EXPERIMENT_FILE
        try:
            inside(sweep_dir, path)  # experiment.json as a link to another sweep's
        except OutsideSweep as exc:
            raise ValueError(str(exc)) from exc
        data = read_json(path)
        cls._check_version(data)
        resumed, round_s = _resumed(data.get("resumed", [])), _round_s(data.get("round_s", []))
        return cls(
            Plan.from_dict(data["plan"]),
            ScheduleSettings.from_dict(data["schedule"]),
            data["stop_reason"],
            data["rounds"],
            data["elapsed_s"],
            data.get("fingerprint", {}),
            round_s,
            resumed,
        )

    @classmethod
    def _check_version(cls, data: Any) -> None:
        """ValueError for a schema_version this perflab does not read."""
        read_version(data, cls.SCHEMA_VERSION, cls.READS_VERSIONS)  # SchemaError: a ValueError


def _resumed(entries: Any) -> list[ResumedSession]:
    """experiment.json's "resumed"; ValueError for one the analysis cannot read: the
    sessions place old records (perflab.analysis.sessions) and the report lists them."""
    if not isinstance(entries, list) or not all(
        isinstance(r, dict) and all(type(r.get(k)) is t for k, t in _RESUMED_KEYS.items())
        for r in entries
    ):
        raise ValueError("resumed: not a list of {at_round, trials_kept, at}")
    return [ResumedSession(**{k: r[k] for k in _RESUMED_KEYS}) for r in entries]


def _round_s(values: Any) -> list[float]:
    """experiment.json's "round_s"; ValueError for anything but a list of seconds."""
    if not isinstance(values, list) or not all(type(x) in (int, float) for x in values):
        raise ValueError("round_s: not a list of seconds")
    return values


# --- the trial records --------------------------------------------------------------------

# what the warning and the report say of a record whose checksum does not match
EDITED = "changed after it was written: checksum mismatch"


@dataclass(frozen=True)
class SweepRecords:
    """What one command read of a sweep directory: its experiment.json and every
    readable trial record, once (read_sweep), passed along to each step that needs them
    (the analysis, the report) so that none reads them again."""

    experiment: Experiment
    # every readable record of every variant (by name), by round
    trials: dict[str, dict[int, TrialRecord]]
    # the record files that could not be used, each as "path: why" (path relative to
    # the sweep directory)
    skipped: list[str]
    # the files warned about on stderr, this read or an earlier one of the same command
    warned: frozenset[str] = frozenset()


def read_sweep(sweep_dir: Path) -> SweepRecords:
    """experiment.json and the trial records of ``sweep_dir``: what Experiment.load
    raises for a bad experiment.json, bad records skipped (load_trials)."""
    return read_records(sweep_dir, Experiment.load(sweep_dir))


def read_records(
    sweep_dir: Path, experiment: Experiment, earlier: SweepRecords | None = None
) -> SweepRecords:
    """The trial records of ``experiment``'s variants in ``sweep_dir`` (load_trials);
    ``earlier``: this command's earlier read of the same directory (a resumed sweep reads
    its records when it starts and again when it ends), whose warnings are not repeated."""
    skipped: list[str] = []
    warned = set(earlier.warned) if earlier is not None else set()
    trials = load_trials(sweep_dir, experiment.plan, skipped, warned)
    return SweepRecords(experiment, trials, skipped, frozenset(warned))


def load_trials(
    sweep_dir: Path,
    plan: Plan,
    skipped: list[str] | None = None,
    warned: set[str] | None = None,
) -> dict[str, dict[int, TrialRecord]]:
    """Every readable record of every variant, by round. A file that cannot be used
    (truncated, not JSON, not a perflab record, a newer schema_version, a value that
    makes no sense, a round other than its name's) is skipped with a warning on stderr
    naming it, and appended to ``skipped`` (path relative to the sweep directory: why),
    rather than stopping the analysis. A record changed after it was written (checksum)
    is used, with a warning; analyze lists it. ``warned``: the files this command has
    already named, not named again (and those named here are added)."""
    warned = warned if warned is not None else set()
    return {v.name: _variant_trials(Path(sweep_dir), v, skipped, warned) for v in plan.variants}


def _variant_trials(
    sweep_dir: Path, variant: Variant, skipped: list[str] | None, warned: set[str]
) -> dict[int, TrialRecord]:
    by_round: dict[int, TrialRecord] = {}
    for path in trial_records(sweep_dir / variant.dir):
        try:
            inside(sweep_dir, path)  # a link out of the sweep: skipped, named
            record = _load_trial(path)
        except RecordError as exc:
            _warn_once(warned, path, f"skipping {exc}")
            if skipped is not None:
                why = str(exc).removeprefix(f"{path}: ")
                skipped.append(f"{path.relative_to(sweep_dir).as_posix()}: {why}")
            continue
        if record.edited:
            _warn_once(warned, path, f"{path}: {EDITED}; its values are used as they are")
        by_round[record.round] = record
    return by_round


def _load_trial(path: Path) -> TrialRecord:
    """load_record, and the round its file name promises: a copied or renamed record
    would otherwise take another round's place, or lose its own, without a word."""
    record = load_record(path)
    expected = f"r{record.round:03d}.json"
    if path.name != expected:
        raise RecordError(f"{path}: round={record.round} belongs in {expected}, not in {path.name}")
    return record


def _warn_once(warned: set[str], path: Path, message: str) -> None:
    if str(path) not in warned:
        warned.add(str(path))
        print(f"perflab: warning: {message}", file=sys.stderr)


def edited_records(plan: Plan, trials: dict[str, dict[int, TrialRecord]]) -> list[str]:
    """The records changed after they were written, relative to the sweep directory
    (load_trials keeps a record only in the file named after its round)."""
    return [
        f"{v.dir}/trials/r{r:03d}.json"
        for v in plan.variants
        for r, record in sorted(trials[v.name].items())
        if record.edited
    ]
