"""Where a sweep may write, and the lock that keeps one perflab per sweep directory
(perflab/formats/sweepdir.py), checked in this process; device-free."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perflab.errors import ConfigError
from perflab.formats.sweepdir import (
    LOCK_FILE,
    RUN_MARKERS,
    SWEEP_MARKERS,
    SweepLock,
    check_output_dir,
)


def test_new_empty_and_perflab_directories_are_accepted(tmp_path):
    check_output_dir(tmp_path / "new" / "deeper", "hydra.sweep.dir", SWEEP_MARKERS)
    check_output_dir(tmp_path, "hydra.sweep.dir", SWEEP_MARKERS)  # empty
    (tmp_path / "experiment.json").write_text("{}")
    (tmp_path / "other").write_text("")
    check_output_dir(tmp_path, "hydra.sweep.dir", SWEEP_MARKERS)  # a sweep, to resume
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    check_output_dir(run, "hydra.run.dir", RUN_MARKERS)
    assert not (tmp_path / "new").exists()  # the check creates nothing


@pytest.mark.parametrize(
    ("directory", "why"),
    [
        ("/", "it is the root directory"),
        ("/proc/self", "/proc is a virtual file system"),
        ("/sys/x", "/sys is a virtual file system"),
        ("a" * 300, "a name in it is longer than 255 bytes"),
        ("/".join(["b" * 200] * 25), "the path is longer than 4095 bytes"),
    ],
)
def test_places_perflab_must_not_write_into_are_named(directory, why):
    with pytest.raises(ConfigError, match=why) as caught:
        check_output_dir(directory, "hydra.sweep.dir", SWEEP_MARKERS)
    assert caught.value.field == "hydra.sweep.dir" and len(str(caught.value)) < 400


def test_a_file_and_a_foreign_directory_are_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="it is a file"):
        check_output_dir(tmp_path / "f", "hydra.run.dir", RUN_MARKERS)
    with pytest.raises(ConfigError, match="non-empty directory that perflab did not write"):
        check_output_dir(tmp_path, "hydra.run.dir", RUN_MARKERS)


# Any text a user could give as the directory: one ConfigError naming the field, or
# accepted; never another exception, and nothing created either way.
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.one_of(
        st.text(min_size=1, max_size=40),
        st.text(alphabet="/.~ab\x00\n", min_size=1, max_size=12),
        st.sampled_from(["/", "/proc", "/dev/null", "/etc/passwd", ".", "..", "//", "/tmp/.."]),
    )
)
def test_any_directory_text_is_accepted_or_refused_in_one_line(tmp_path, directory):
    before = sorted(os.listdir(tmp_path))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        check_output_dir(directory, "hydra.sweep.dir", SWEEP_MARKERS)
    except ConfigError as exc:
        assert str(exc).startswith("hydra.sweep.dir=") and "\n" not in str(exc).replace(
            directory, ""
        )
    except ValueError as exc:  # an embedded NUL byte: no path can hold it
        assert "null" in str(exc).lower()
    finally:
        os.chdir(cwd)
    assert sorted(os.listdir(tmp_path)) == before


def test_the_lock_is_exclusive_names_its_holder_and_is_released(tmp_path):
    with SweepLock(tmp_path) as first:
        holder = json.loads((tmp_path / LOCK_FILE).read_text())
        assert holder["pid"] == os.getpid() and holder["command"].startswith("perflab")
        with pytest.raises(ConfigError, match=rf"in use by perflab \(pid {os.getpid()} on "):
            SweepLock(tmp_path).acquire()
        assert first.stale is None
    assert (tmp_path / LOCK_FILE).read_text() == ""  # released: nobody holds it
    SweepLock(tmp_path).acquire().release()


def test_a_lock_left_by_a_killed_run_is_taken_over_and_reported_as_stale(tmp_path):
    # a process that takes the lock and dies with -9, as a killed launcher does
    code = (
        "import os, signal, sys; from perflab.formats.sweepdir import SweepLock; "
        f"SweepLock({str(tmp_path)!r}).acquire(); os.kill(os.getpid(), signal.SIGKILL)"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert done.returncode == -9
    lock = SweepLock(Path(tmp_path)).acquire()
    assert lock.stale is not None and lock.stale.pid != os.getpid()
    assert lock.stale.command.startswith("perflab") and lock.stale.since
    lock.release()


def test_a_lock_note_that_is_not_a_holders_names_no_earlier_holder(tmp_path):
    # empty (released), cut short, or not the four keys a holder writes
    for note in ("", '{"pid": 1', '{"pid": "1"}', '{"pid": 1}', "[]"):
        (tmp_path / LOCK_FILE).write_text(note)
        lock = SweepLock(tmp_path).acquire()
        assert lock.stale is None, note
        lock.release()
