"""groups.json as typed dataclasses: the index of a sweep split into groups
(perflab.experiment.scaleout), one entry per group, rewritten as each group's job ends.
The launcher reads it for the exit status, the merged report (perflab.report.merge) for
where each group ran, and a grouped sweep's merged summary.json copies its entries.

An entry's keys are written in one order whatever its state (a group pending has key,
dir and state; a failed one adds job_id and error; a done one what its job returned,
job_id and overhead_s), so an entry read and written again is the same JSON, byte for
byte.

Schema history:
  1 (2026-11-22) no schema_version field: ``{"groups": [entry, ...]}``. An entry of
     before 2026-11-26 has no ``destroyed`` (its perflab did not look): read as None,
     and written back without it. Still read.
  2 (2026-11-26) ``schema_version``, written first; the entries as version 1's last form.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perflab.formats.dataclass_json import (
    SchemaError,
    decode,
    encode,
    inline,
    read_version,
    written_when,
)
from perflab.formats.json_file import read_json
from perflab.formats.records import write_json_atomic
from perflab.formats.sweepdir import GROUPS_DIR, GROUPS_FILE, relative_name

GROUPS_SCHEMA_VERSION = 2
SUPPORTED_GROUPS_VERSIONS = (1, 2)

# A group's state. A merged summary.json also writes "unreadable: why" for a group whose
# directory could not be read (perflab.report.merge).
PENDING = "pending"
DONE = "done"
FAILED = "failed"


@dataclass(frozen=True, kw_only=True)
class GroupOutcome:
    """What a group's job returns (perflab.experiment.scaleout.run_group): where and how
    its experiment ran."""

    # the host the job ran on
    hostname: str
    # how the group's experiment ended: "precision reached", "interrupted", ...
    stop_reason: str
    # labels of the variants with failed trials
    failed: list[str]
    # finished trials whose records were destroyed while the group ran, "JOB/trials/
    # rNNN.json: why" (None in an entry of before 2026-11-26)
    destroyed: list[str] | None = written_when()
    # the group's report.md, relative to its directory
    report: str
    # seconds the job spent on the group, start to end
    seconds: float
    # those seconds by phase: experiment, profiles, report
    phases_s: dict[str, float]


@dataclass(frozen=True, kw_only=True)
class GroupEntry:
    """One group of the index."""

    # the group_by keys' values, "model=mlp batch_size=64" (scaleout.Group.key)
    key: str
    # its sweep directory, relative to the sweep's GROUPS_DIR
    dir: str
    # what its job returned (None: pending, failed, or an index written by hand)
    outcome: GroupOutcome | None = inline("hostname", {})
    # submitit's job id (None: not submitted yet)
    job_id: str | None = written_when()
    # PENDING, DONE or FAILED
    state: str
    # seconds beyond the job's own: start-up, queueing, collecting its result
    overhead_s: float | None = written_when()
    # why a failed group's job gave no result (the end of its error)
    error: str | None = written_when()

    @property
    def interrupted(self) -> bool:
        """The group's experiment was stopped (Ctrl-C, SIGTERM) before its end."""
        return self.outcome is not None and self.outcome.stop_reason == "interrupted"

    @property
    def failed_variants(self) -> list[str]:
        """Labels of the group's variants with failed trials."""
        return self.outcome.failed if self.outcome is not None else []

    @property
    def destroyed(self) -> list[str]:
        """The group's finished trials whose records were destroyed while it ran."""
        return (self.outcome.destroyed or []) if self.outcome is not None else []

    def unreadable(self, why: object) -> GroupEntry:
        """The entry of a group whose directory cannot be read, saying why."""
        return replace(self, state=f"unreadable: {why}")


@dataclass(frozen=True, kw_only=True)
class GroupsIndex:
    """groups.json."""

    # the file's schema version (history above)
    schema_version: int = GROUPS_SCHEMA_VERSION
    # one entry per group, in command-line order
    groups: list[GroupEntry]


def write_groups(sweep_dir: Path, groups: list[GroupEntry]) -> None:
    """Write SWEEP/groups.json atomically."""
    write_json_atomic(Path(sweep_dir) / GROUPS_FILE, encode(GroupsIndex(groups=groups)))


def read_groups(sweep_dir: Path) -> list[GroupEntry]:
    """The entries of SWEEP/groups.json of any supported schema_version: OSError when it
    cannot be read, ValueError when it is not a groups index (SchemaError names the bad
    field) or names a group directory outside GROUPS_DIR."""
    index = decode(GroupsIndex, _current(read_json(Path(sweep_dir) / GROUPS_FILE)))
    # a group's directory is read from, and its report written to, GROUPS_DIR/dir
    outside = [g.dir for g in index.groups if not relative_name(g.dir)]
    if outside:
        raise ValueError(f"dir={outside[0]!r} is not a relative path inside {GROUPS_DIR}/")
    return index.groups


def _current(data: Any) -> Any:
    """The object in the current version's form: version 1 given its schema_version, a
    newer or unknown one refused."""
    if not isinstance(data, dict):
        raise SchemaError(f"not a perflab groups index (a JSON {type(data).__name__})")
    read_version(data, GROUPS_SCHEMA_VERSION, SUPPORTED_GROUPS_VERSIONS)
    return {**data, "schema_version": GROUPS_SCHEMA_VERSION}
