"""The sweep directory: every name and path in it, the checks made on it before anything
is written, and the lock that keeps one perflab per sweep directory.

    SWEEP/                       hydra.sweep.dir
      .perflab.lock              LOCK_FILE: who is running here
      experiment.json            EXPERIMENT_FILE: the plan, the stop, the fingerprint
      summary.json               SUMMARY_FILE: the analysis (python -m perflab.analysis)
      report.md  *.csv  *.png    REPORT_FILE and the report's exports and plots
      console.log                CONSOLE_LOG: everything perflab printed
      groups.json  groups/KEY/   GROUPS_FILE, GROUPS_DIR: a sweep split by scaleout.group_by
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
from datetime import datetime, timezone
from pathlib import Path

from perflab.errors import ConfigError

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
    if absolute.exists() and not absolute.is_dir():
        raise refuse("it is a file")
    if absolute.is_dir() and not _is_ours(absolute, markers, refuse):
        raise refuse("it is a non-empty directory that perflab did not write")


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


class SweepLock:
    """An exclusive lock on a sweep directory for as long as this perflab works in it."""

    def __init__(self, sweep_dir: Path | str, field: str = "hydra.sweep.dir") -> None:
        self.path = Path(sweep_dir) / LOCK_FILE
        self.field = field
        self._fd: int | None = None
        # who held the lock before, if a run that ended without releasing it left a note
        self.stale: dict[str, object] | None = None

    def acquire(self) -> SweepLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise self._busy() from exc
            if exc.errno == errno.ENOLCK:  # a file system without locks (some NFS)
                return self
            raise
        self.stale = _read_holder(self.path) or None
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
            f"perflab (pid {holder.get('pid')} on {holder.get('host')}, since "
            f"{holder.get('since')}: {holder.get('command')})"
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

    def __enter__(self) -> SweepLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _write_holder(fd: int) -> None:
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["perflab", *sys.argv[1:]])[:500],
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode(), 0)


def _read_holder(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
