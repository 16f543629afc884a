"""The sweep directory: every name and path in it, the checks made on it before anything
is written, and the lock that keeps one perflab per sweep directory.

    SWEEP/                       hydra.sweep.dir
      .perflab.lock              LOCK_FILE: who is running here (LockHolder)
      experiment.json            EXPERIMENT_FILE: the plan, the stop, the fingerprint
      summary.json               SUMMARY_FILE: the analysis (python -m perflab.report)
      report.md  *.csv  *.png    REPORT_FILE and the report's exports and plots
      console.log                CONSOLE_LOG: everything perflab printed
      groups.json  groups/KEY/   GROUPS_FILE, GROUPS_DIR: a sweep split by scaleout.group_by
                                 (groups.json: perflab.formats.groups)
      JOB/                       one Hydra job (variant) per directory: 0, 1, ...
        .hydra/                  Hydra's composed config of the job
        check.log                CHECK_LOG: what the settings check printed
        trials/r000.json         trial_record(job_dir, round): one record per round,
        trials/r000.log          log_beside(record): what that trial process printed
        profile/profile.json     PROFILE_DIR, PROFILE_FILE: the profiled pass
        profile/trace/...        TRACE_DIR, TRACE_FILE: its Chrome trace
        profile/memory_snapshot.pickle   MEMORY_SNAPSHOT_FILE

A single run (``perflab`` without -m) writes ``trials/000.json`` in hydra.run.dir.

Two promises rest on this module. **Never write where it does harm**: Hydra creates the
sweep directory and writes multirun.yaml into it before any launcher runs, so with
``hydra.sweep.dir=/`` sixteen entries once landed in ``/``. The directory is therefore
checked when perflab's launcher is set up, which Hydra does before it creates anything:
it must be new, empty, or a perflab sweep (resumed), on a path the system can hold.
**Never mix two experiments**: two ``perflab -m`` on one directory both ran, and one
printed the other's batch-256 throughput as its own batch-32 result. The first takes an
exclusive ``flock`` on LOCK_FILE for its whole run; a second is refused with one line
naming the holder. The kernel drops the lock when its holder dies however it dies, so a
lock file left by a killed run is stale by construction and simply taken over.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from perflab.errors import ConfigError, OutsideSweep
from perflab.formats.dataclass_json import decode, encode
from perflab.formats.json_file import read_json

# --- names ------------------------------------------------------------------------------

# held (flock) by the perflab running in a sweep directory; says who that is
LOCK_FILE = ".perflab.lock"
EXPERIMENT_FILE = "experiment.json"
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.md"
# the copy of a sweep's console, in its directory
CONSOLE_LOG = "console.log"
# a sweep split into groups (scaleout.group_by): the index, and a sweep directory per group
GROUPS_FILE = "groups.json"
GROUPS_DIR = "groups"
# submitit's own files (job scripts, pickled results and logs)
SUBMITIT_DIR = ".submitit"
# Hydra's composed config of a job, in the job's directory
HYDRA_DIR = ".hydra"
# what the settings check of a variant printed (importing the user's factories), in its
# job directory
CHECK_LOG = "check.log"
TRIALS_DIR = "trials"
# the suffix a record that failed validation is kept under, beside its replacement
REJECTED_SUFFIX = ".rejected"
# a trial process's log: its record's path with this suffix (log_beside)
LOG_SUFFIX = ".log"
PROFILE_DIR = "profile"
PROFILE_FILE = "profile.json"
# The trace gets a directory of its own, and a name TensorBoard's profiler plugin
# recognises (WORKER.pt.trace.json.gz): `tensorboard --logdir JOB/profile` finds it, and
# Holistic Trace Analysis, which reads every .json/.json.gz file of a directory as one
# rank's trace, can be pointed at JOB/profile/trace (profile.json must not be beside it).
TRACE_DIR = "trace"
TRACE_FILE = "perflab.pt.trace.json.gz"
MEMORY_SNAPSHOT_FILE = "memory_snapshot.pickle"

# files that make a directory a perflab sweep, one of them in every sweep perflab started
# (experiment.json, or groups.json when scaleout.group_by splits it into groups)
SWEEP_MARKERS = (LOCK_FILE, EXPERIMENT_FILE, GROUPS_FILE)
# what perflab leaves in a single run's directory (hydra.run.dir)
RUN_MARKERS = (HYDRA_DIR, TRIALS_DIR)


# --- paths ------------------------------------------------------------------------------


def trial_record(job_dir: Path, round_: int) -> Path:
    """The record of a sweep's trial in round ``round_`` of the job (variant) in ``job_dir``."""
    return job_dir / TRIALS_DIR / f"r{round_:03d}.json"


def trial_records(job_dir: Path) -> list[Path]:
    """Every trial record of a job, by round."""
    return sorted((job_dir / TRIALS_DIR).glob("r*.json"))


def single_run_record(run_dir: Path) -> Path:
    """The record of a single run (``perflab`` without -m)."""
    return run_dir / TRIALS_DIR / "000.json"


def profile_record(job_dir: Path) -> Path:
    return job_dir / PROFILE_DIR / PROFILE_FILE


def inside(root: Path | str, path: Path | str) -> Path:
    """``path`` with every symbolic link followed, when it still lies in ``root`` (the
    sweep directory, itself resolved the same way); else OutsideSweep naming the file.

    Every reader of a path that a sweep's files name (a trace in profile.json, a job
    directory in experiment.json, a group in groups.json) or that a link in the sweep may
    redirect goes through here, so that a report, a published folder or an export never
    holds the bytes of a file outside the sweep (``"trace": "../../secret"``, a trace
    replaced by a link to /etc/shadow). It returns the resolved path: a caller that opens
    it, rather than ``path``, cannot be redirected by a link swapped after the check."""
    try:
        real_root = Path(root).resolve()
        real = Path(path).resolve()
    except (RuntimeError, OSError) as exc:  # Python 3.11 raises RuntimeError for a loop
        raise OutsideSweep(f"{shown(str(path))}: cannot be resolved ({exc}); not read") from exc
    if real != real_root and real_root not in real.parents:
        raise OutsideSweep(
            f"{shown(str(path))}: leads out of the sweep directory {shown(str(root))} "
            f"(to {shown(str(real))}); not read"
        )
    return real


def relative_name(value: object) -> bool:
    """Whether ``value``, a path read from one of perflab's files (a job directory, a
    group), names a place under the directory it is relative to: a non-empty relative
    path without ``..``."""
    if not isinstance(value, str) or not value or "\0" in value:
        return False
    path = Path(value)
    return not path.is_absolute() and ".." not in path.parts


def log_beside(record_path: str | Path) -> Path:
    """Where a trial process's own output goes: beside its record, the same name with
    ``.log`` (trials/r000.log, profile/profile.log)."""
    return Path(record_path).with_suffix(LOG_SUFFIX)


# --- checks -----------------------------------------------------------------------------

# Linux's limits (limits.h: NAME_MAX, PATH_MAX): longer names fail deep inside Hydra with
# ENAMETOOLONG after it has created the directories above
NAME_MAX = 255
PATH_MAX = 4096


def check_output_dir(directory: Path | str, field: str, markers: tuple[str, ...]) -> None:
    """Refuse, with one line naming ``field``, an output directory perflab must not write
    into: a path the system cannot hold, a file, the root directory, a directory under
    /proc, /sys or /dev, or a non-empty directory without one of ``markers`` (not
    perflab's). Nothing is created here."""
    path = Path(directory)
    allowed = "a new or empty directory, or one perflab wrote (to resume it), on a writable disk"

    def refuse(why: str) -> ConfigError:
        return ConfigError(field, shown(str(directory)), allowed, why)

    absolute = Path(os.path.abspath(path))
    too_long = [part for part in absolute.parts if len(os.fsencode(part)) > NAME_MAX]
    if too_long:
        raise refuse(f"a name in it is longer than {NAME_MAX} bytes ({too_long[0][:40]}...)")
    if len(os.fsencode(str(absolute))) >= PATH_MAX:
        raise refuse(f"the path is longer than {PATH_MAX - 1} bytes")
    if absolute == Path(absolute.anchor):
        raise refuse("it is the root directory")
    if absolute.parts[1:2] in (("proc",), ("sys",), ("dev",)):
        raise refuse(f"/{absolute.parts[1]} is a virtual file system of the kernel")
    broken = broken_link(absolute)
    if broken:
        raise refuse(broken)
    if absolute.exists() and not absolute.is_dir():
        raise refuse("it is a file")
    if absolute.is_dir() and not _is_ours(absolute, markers, refuse):
        raise refuse("it is a non-empty directory that perflab did not write")


def broken_link(path: Path) -> str | None:
    """Why ``path``, or a directory above it, is a symbolic link that cannot become a
    directory: one to a target that does not exist, or a loop of links; None when none
    is. Such a link exists but leads nowhere, so creating the directory (Hydra's, the
    lock's ``mkdir(exist_ok=True)``) fails with FileExistsError, a traceback."""
    for part in (path, *path.parents):
        if not os.path.islink(part) or os.path.exists(part):
            continue
        try:
            os.stat(part)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return f"{shown(str(part))} is a symbolic link loop"
        target = os.readlink(part)
        return f"{shown(str(part))} is a symbolic link to {shown(target)}, which does not exist"
    return None


# a path longer than this is shown cut, with its length (a message stays one line to read)
SHOWN_CHARS = 120


def shown(value: str) -> str:
    return value if len(value) <= SHOWN_CHARS else f"{value[:60]}...({len(value)} characters)"


def _is_ours(
    directory: Path, markers: tuple[str, ...], refuse: Callable[[str], ConfigError]
) -> bool:
    """Empty, or holding one of ``markers``."""
    try:
        with os.scandir(directory) as entries:
            names = {entry.name for entry in entries}
    except OSError as exc:
        raise refuse(f"it cannot be read ({exc.strerror})") from exc
    return not names or any(marker in names for marker in markers)


@dataclass(frozen=True, kw_only=True)
class LockHolder:
    """The note a perflab leaves in LOCK_FILE while it holds the lock (emptied when it
    lets go): who is running in the directory."""

    # its process id
    pid: int
    # the host it runs on
    host: str
    # when it took the lock (ISO 8601, UTC, seconds)
    since: str
    # its command line, cut to 500 characters
    command: str


class SweepLock:
    """An exclusive lock on a sweep directory for as long as this perflab works in it."""

    def __init__(self, sweep_dir: Path | str, field: str = "hydra.sweep.dir") -> None:
        self.path = Path(sweep_dir) / LOCK_FILE
        self.field = field
        self._fd: int | None = None
        # who held the lock before, if a run that ended without releasing it left a note
        self.stale: LockHolder | None = None

    def acquire(self) -> SweepLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # never through a symbolic link: the holder's note truncates and rewrites
            # the file, which would be the link's target (anyone's file)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise self._unusable(exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise self._busy() from exc
            if exc.errno == errno.ENOLCK:  # a file system without locks (some NFS)
                return self
            raise
        self.stale = _read_holder(self.path)
        _write_holder(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)  # an empty lock file: nobody holds it
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def _busy(self) -> ConfigError:
        holder = _read_holder(self.path)
        who = (
            f"perflab (pid {holder.pid} on {holder.host}, since {holder.since}: {holder.command})"
            if holder
            else "another perflab"
        )
        return ConfigError(
            self.field,
            str(self.path.parent),
            "a directory no other perflab is running in: wait for it, stop it, or choose "
            "another hydra.sweep.dir",
            f"in use by {who}",
        )

    def _unusable(self, exc: OSError) -> ConfigError:
        """The lock file cannot be opened: something else took its name (a directory, a
        symbolic link) or it cannot be written. Without the lock a second perflab could
        run in the same directory, so the sweep does not start."""
        if exc.errno == errno.EISDIR:
            problem = f"its {LOCK_FILE} is a directory, not perflab's lock file"
        elif exc.errno == errno.ELOOP:  # O_NOFOLLOW's answer for a link
            problem = f"its {LOCK_FILE} is a symbolic link, not perflab's lock file"
        else:
            problem = f"its {LOCK_FILE} cannot be opened ({exc.strerror})"
        return ConfigError(
            self.field,
            str(self.path.parent),
            f"a directory whose {LOCK_FILE}, if there is one, is a file perflab can open "
            f"and write (remove what is there), or another {self.field}",
            problem,
        )

    def __enter__(self) -> SweepLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _write_holder(fd: int) -> None:
    holder = LockHolder(
        pid=os.getpid(),
        host=socket.gethostname(),
        since=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        command=" ".join(["perflab", *sys.argv[1:]])[:500],
    )
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(encode(holder)).encode(), 0)


def _read_holder(path: Path) -> LockHolder | None:
    """The note in the lock file; None when there is none (an empty file: nobody holds
    the lock) or it is not a holder's note."""
    try:
        return decode(LockHolder, read_json(path))
    except (OSError, ValueError):  # not JSON, or a note of other keys (SchemaError)
        return None
