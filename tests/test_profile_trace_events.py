"""The trace's events parsed at the file boundary (perflab.profile.trace_events): each
field from its key, with the conversions the readers relied on; and one parse serving
both readers as well as each reader's own. Device: none (synthetic events, read on any
machine)."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

from perflab.profile import attribution, operators
from perflab.profile.trace_events import TraceEvent, trace_events

TRACES = Path(__file__).parent / "fixtures" / "h100" / "traces"


def _parsed(*events: dict) -> list[TraceEvent]:
    return trace_events({"traceEvents": list(events)}, operators.READ_CATEGORIES)


def test_every_field_comes_from_its_own_key():
    (op,) = _parsed(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 7,
            "tid": 9,
            "ts": 10,
            "dur": 2.5,
            "args": {"External id": "42", "Input Dims": [[4, 8], [8, 8]]},
        }
    )
    assert op == TraceEvent(
        name="aten::mm",
        category="cpu_op",
        phase="X",
        start_us=10.0,
        duration_us=2.5,
        thread=(7, 9),
        external_id=42,
        input_dims=[[4, 8], [8, 8]],
        bytes=0,
        device_type=0,
    )
    assert isinstance(op.start_us, float)


def test_a_memory_record_has_its_bytes_and_device_and_a_range_has_none():
    record, annotation = _parsed(
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "name": "[memory]",
            "ts": 3,
            "args": {"Bytes": -64, "Device Type": 1},
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#2",
            "ts": 1,
            "args": {"External id": 5, "Bytes": 99},
        },
    )
    assert (record.bytes, record.device_type, record.duration_us) == (-64, 1, 0.0)
    # an annotation's id correlates no launch; a range has no allocation
    assert (annotation.external_id, annotation.bytes, annotation.input_dims) == (None, 0, ())


def test_events_of_other_categories_are_skipped():
    events = _parsed(
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "ts": 1, "id": 3},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "perflab/forward", "ts": 1},
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 2, "dur": 1, "args": {}},
    )
    assert [e.name for e in events] == ["gemm"]


def test_one_parse_serves_both_readers():
    with lzma.open(TRACES / "main_command_quick" / "0.json.xz", "rt") as f:
        trace = json.load(f)
    # the operator table's categories hold everything the device side reads
    assert attribution.READ_CATEGORIES <= operators.READ_CATEGORIES
    events = trace_events(trace, operators.READ_CATEGORIES)
    assert operators.table_of(events) == operators.read(trace)
    assert attribution.device_side(events, top=15) == attribution.attribute(trace, top=15)
