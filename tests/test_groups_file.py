"""groups.json (perflab.formats.groups): every form a perflab wrote is read, written again
key for key, and a file that is not an index is refused naming what is wrong.

Device: none (files only).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perflab.formats.dataclass_json import encode
from perflab.formats.groups import (
    GROUPS_SCHEMA_VERSION,
    GroupEntry,
    GroupOutcome,
    read_groups,
    write_groups,
)
from perflab.formats.sweepdir import GROUPS_FILE

# groups.json's entries as perflab wrote them before schema_version 2, one of each form
DONE = {
    "key": "model=a",
    "dir": "model=a",
    "hostname": "node1",
    "stop_reason": "max rounds",
    "failed": ["amp=bf16"],
    "destroyed": ["1/trials/r002.json: deleted"],
    "report": "report.md",
    "seconds": 12.5,
    "phases_s": {"experiment": 10.0, "profiles": 2.0, "report": 0.5},
    "job_id": "4242",
    "state": "done",
    "overhead_s": 1.25,
}
# a done group of before 2026-11-26, which did not look for destroyed records
DONE_BEFORE_DESTROYED = {k: v for k, v in DONE.items() if k != "destroyed"} | {"key": "model=b"}
FAILED = {"key": "model=c", "dir": "model=c", "job_id": "4243", "state": "failed", "error": "x"}
PENDING = {"key": "model=d", "dir": "model=d", "state": "pending"}
VERSION_1 = [DONE, DONE_BEFORE_DESTROYED, FAILED, PENDING]


def _index(directory: Path, data: object) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / GROUPS_FILE).write_text(json.dumps(data))
    return directory


def test_every_form_of_version_1_is_read_and_written_again_key_for_key(tmp_path):
    entries = read_groups(_index(tmp_path / "old", {"groups": VERSION_1}))
    assert [e.state for e in entries] == ["done", "done", "failed", "pending"]
    done, before, failed, pending = entries
    assert done.outcome is not None and done.outcome.hostname == "node1"
    assert done.destroyed == ["1/trials/r002.json: deleted"]
    assert done.failed_variants == ["amp=bf16"] and not done.interrupted
    assert before.outcome is not None and before.outcome.destroyed is None
    assert before.destroyed == []  # read as none found
    assert (failed.outcome, failed.error, pending.outcome) == (None, "x", None)
    # the same entries, their keys in the same order; the file now says its version first
    write_groups(tmp_path / "new", entries)
    text = (tmp_path / "new" / GROUPS_FILE).read_text()
    assert json.loads(text) == {"schema_version": GROUPS_SCHEMA_VERSION, "groups": VERSION_1}
    assert [list(e) for e in json.loads(text)["groups"]] == [list(e) for e in VERSION_1]
    assert read_groups(tmp_path / "new") == entries


def test_an_entry_written_by_hand_needs_only_key_dir_and_state(tmp_path):
    [entry] = read_groups(_index(tmp_path, {"groups": [{"key": "g", "dir": "g", "state": "done"}]}))
    assert entry == GroupEntry(key="g", dir="g", state="done")
    assert encode(entry) == {"key": "g", "dir": "g", "state": "done"}


def test_an_interrupted_group_says_so():
    outcome = GroupOutcome(
        hostname="h",
        stop_reason="interrupted",
        failed=[],
        destroyed=[],
        report="report.md",
        seconds=1.0,
        phases_s={},
    )
    assert GroupEntry(key="g", dir="g", outcome=outcome, state="done").interrupted
    assert not GroupEntry(key="g", dir="g", state="failed").interrupted


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ([], "not a perflab groups index"),
        ({"schema_version": 3, "groups": []}, "schema_version=3 is not supported"),
        ({"schema_version": "2", "groups": []}, "schema_version='2' is not supported"),
        ({"groups": [{"key": "g", "state": "done"}]}, r"groups\[0\].dir: missing"),
        ({"groups": [{**PENDING, "colour": "red"}]}, r"groups\[0\].colour: not a known field"),
        ({"groups": [{**DONE, "seconds": "12"}]}, r"groups\[0\].seconds='12': not a finite"),
        ({"groups": [{**PENDING, "dir": "../elsewhere"}]}, "not a relative path inside groups/"),
        ({"groups": [{**PENDING, "dir": "/elsewhere"}]}, "not a relative path inside groups/"),
    ],
)
def test_a_file_that_is_not_a_groups_index_is_refused_naming_why(tmp_path, data, problem):
    with pytest.raises(ValueError, match=problem):
        read_groups(_index(tmp_path, data))
