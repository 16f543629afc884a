from __future__ import annotations

import json
from pathlib import Path

import pytest

from perflab.errors import RecordError
from perflab.formats.records import (
    SCHEMA_VERSION,
    ErrorInfo,
    Probe,
    Samples,
    TrialRecord,
    load_record,
    write_record,
)
from perflab.formats.trial_parts import KnobEvidence

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "h100"


def _record() -> TrialRecord:
    return TrialRecord(
        status="ok",
        config={"batch_size": 4},
        settings={"device": "cpu", "batch_size": 4},
        started_at="2026-11-22T00:00:00.000+00:00",
        finished_at="2026-11-22T00:00:01.000+00:00",
        samples=Samples(
            1, [10, 12], {"data": [1, 2], "forward": [9, 10]}, [30], 500, 0.1, "min_reached"
        ),
        probe=Probe(4, 2.3, [4, 10], "float32", 1.5, [0.1, -0.2], 0.7),
        error=None,
        evidence={"threads": KnobEvidence(requested=1, observed=1, ok=True, detail="")},
    )


def test_round_trip_preserves_every_field(tmp_path):
    path = tmp_path / "trials" / "000.json"
    record = _record()
    write_record(path, record)
    assert load_record(path) == record
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION


def test_failed_record_round_trips(tmp_path):
    record = _record()
    record.status, record.samples, record.probe = "failed", None, None
    record.error = ErrorInfo("RuntimeError", "boom", "Traceback ...")
    write_record(tmp_path / "r.json", record)
    assert load_record(tmp_path / "r.json").error == record.error


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    write_record(tmp_path / "r.json", _record())
    write_record(tmp_path / "r.json", _record())
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_unknown_schema_version_is_rejected_with_a_clear_message(tmp_path):
    data = _record().to_dict()
    data["schema_version"] = 99
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordError, match=r"future.json: schema_version=99 is not supported"):
        load_record(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"status": "ok"', "not a readable perflab record"),
        ('{"status": "ok"}', "no schema_version"),
        ("[1, 2]", "no schema_version"),
        ('{"schema_version": 1, "surprise": 1}', "malformed record"),
    ],
)
def test_truncated_foreign_or_malformed_files_are_rejected(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(RecordError, match=message):
        load_record(path)


def test_a_version_1_record_is_read_with_its_warm_up_as_one_step_samples():
    # a real record written by perflab 0.1.0 (schema_version 1) on an H100
    path = FIXTURES / "amp_gpu_warmup0.5s" / "1" / "trials" / "r000.json"
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == 1 and "warmup_step_ns" in raw["samples"]
    record = load_record(path)
    assert record.samples is not None
    assert record.samples.warmup_sample_ns == raw["samples"]["warmup_step_ns"]
    assert record.samples.warmup_sample_steps == [1] * len(raw["samples"]["warmup_step_ns"])
    assert record.samples.length == "bounds" and record.samples.timed_steps == 10


def test_calibration_and_warm_up_fields_round_trip(tmp_path):
    record = _record()
    assert record.samples is not None
    record.samples.length, record.samples.length_from_round = "fixed", 0
    record.samples.warmup_stop, record.samples.warmup_s = "steady", 0.52
    record.samples.warmup_sample_steps = [1]
    write_record(tmp_path / "r.json", record)
    assert load_record(tmp_path / "r.json") == record
