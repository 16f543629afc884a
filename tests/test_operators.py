"""The operator table read from the trace (perflab.profile.operators) against torch's
own key_averages(), device=cpu; and its rules on synthetic events and on real H100
traces (tests/fixtures/h100/traces)."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

from perflab.profile import operators
from perflab.profile.attribution import device_events

TRACES = Path(__file__).parent / "fixtures" / "h100" / "traces"


def _profiled_cpu_trace(tmp_path: Path, stacks: bool) -> tuple[object, dict]:
    from perflab.profile.capture import export_trace

    prof = _profiled_cpu(stacks)
    return prof, export_trace(prof, tmp_path).events


def _profiled_cpu(stacks: bool) -> object:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten()
    )
    x = torch.randn(4, 3, 16, 16)
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        profile_memory=True,
        with_stack=stacks,
        schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
    ) as prof:
        for _ in range(3):
            with record_function("perflab/forward"):
                y = model(x)
                z = y.mean() + torch.stack([y, y]).sum()
            with record_function("perflab/backward"):
                z.backward()
            prof.step()  # ProfilerStep#N ranges: the windows of the busy time
    return prof


@pytest.mark.parametrize("stacks", [False, True])
def test_the_table_from_the_trace_is_key_averages_own(tmp_path, stacks):
    prof, trace = _profiled_cpu_trace(tmp_path, stacks)
    table = operators.read(trace)
    ours = {(r.name, r.input_shapes): r for r in table.rows}
    theirs = {
        (e.key, str(e.input_shapes)[:200]): e
        for e in prof.key_averages(group_by_input_shape=True)  # type: ignore[attr-defined]
    }
    assert ours.keys() == theirs.keys()
    # aten::mean calls aten::mean.dim: one call a step in key_averages, and here
    assert [r.calls for r in table.rows if r.name == "aten::mean"] == [2]
    assert any(name == "aten::stack" and shapes.startswith("[[]") for name, shapes in ours)
    for key, row in ours.items():
        e = theirs[key]
        assert row.calls == e.count, key
        assert row.self_cpu_us == pytest.approx(e.self_cpu_time_total, abs=1e-3), key
        assert row.self_cpu_memory_bytes == e.self_cpu_memory_usage, key
    assert sum(r.self_cpu_us for r in table.rows) > 0
    assert table.busy.basis.startswith("outermost ATen operators")
    assert 0 < (table.busy.busy_share or 0) <= 1


def _op(name, ts, dur, tid=1, ext=None, cat="cpu_op", shapes=None):
    args = {} if ext is None else {"External id": ext}
    if shapes is not None:
        args["Input Dims"] = shapes
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def _kernel(name, ts, dur, launched_by):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "ts": ts,
        "dur": dur,
        "args": {"External id": launched_by},
    }


def _memory(ts, nbytes, device_type=0):
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "name": "[memory]",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "args": {"Bytes": nbytes, "Device Type": device_type},
    }


def test_self_time_memory_and_device_time_follow_key_averages_rules():
    events = [
        _op("ProfilerStep#2", 0, 100, cat="user_annotation"),
        _op("aten::linear", 10, 50, ext=1, shapes=[[4, 8], [8, 8]]),
        _op("aten::addmm", 20, 30, ext=2),
        _op("cudaLaunchKernel", 25, 5, cat="cuda_runtime"),
        # the only child of an operator of its name: one call, its parent's
        _op("aten::mean", 70, 20, ext=3),
        _op("aten::mean", 72, 15, ext=4),
        _op("aten::view", 73, 2, ext=5),
        # another thread's operator overlapping in time is nobody's child
        _op("aten::add", 15, 10, tid=2, ext=6),
        _op("aten::is_leaf", 90, 1),  # profiler bookkeeping: left out
        _memory(22, 400),
        _memory(40, -100),
        _memory(74, 64),
        _memory(74, 1000, device_type=1),  # CUDA memory is not CPU memory
        _memory(200, 32),  # outside every operator: a [memory] row
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "ts": 30,
            "dur": 7,
            "args": {"External id": 2},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "reduce",
            "ts": 80,
            "dur": 3,
            "args": {"External id": 4},
        },
    ]
    rows = {r.name: r for r in operators.read({"traceEvents": events}).rows}
    assert "aten::is_leaf" not in rows
    assert rows["ProfilerStep*"].annotation and rows["ProfilerStep*"].self_cpu_us == 100 - 50 - 20
    assert rows["aten::linear"].input_shapes == "[[4, 8], [8, 8]]"
    assert rows["aten::linear"].self_cpu_us == 20
    assert rows["aten::addmm"].self_cpu_us == 25 and rows["aten::addmm"].self_device_us == 7
    assert rows["aten::mean"].calls == 1 and rows["aten::mean"].self_cpu_us == 18
    assert rows["aten::mean"].self_device_us == 3  # lifted from the merged call
    assert rows["aten::add"].self_cpu_us == 10
    assert rows["aten::addmm"].self_cpu_memory_bytes == 300
    assert rows["aten::linear"].self_cpu_memory_bytes == 0
    assert rows["aten::view"].self_cpu_memory_bytes == 64
    assert rows["[memory]"].calls == 1 and rows["[memory]"].self_cpu_memory_bytes == 32


@pytest.mark.parametrize("sweep", ["main_command_quick", "compile_modes_quick"])
def test_on_h100_traces_every_kernel_counts_once_and_phases_have_host_time(sweep):
    trace = json.loads(lzma.decompress((TRACES / sweep / "0.json.xz").read_bytes()))
    rows = operators.read(trace).rows
    launched = sum(e.duration_us for e in device_events(trace) if e.launcher is not None)
    assert sum(r.self_device_us for r in rows) == pytest.approx(launched)
    # the device-side mirrors of the phases (gpu_user_annotation) are not host rows
    phases = {r.name: r.self_cpu_us for r in rows if r.family == "perflab phase"}
    assert {"perflab/forward", "perflab/backward"} <= phases.keys()
    assert all(us > 0 for us in phases.values()), phases


def test_the_trace_is_written_as_exported_with_its_rank_added(tmp_path):
    # device=cpu: the exporter's own text goes to the file, distributedInfo in front
    import gzip

    from perflab.formats.sweepdir import TRACE_FILE
    from perflab.profile.capture import export_trace, write_trace

    exported = export_trace(_profiled_cpu(stacks=False), tmp_path)
    assert exported.events["distributedInfo"] == {"rank": 0, "world_size": 1}
    stored = write_trace(exported, tmp_path, max_bytes=2**30)
    assert stored.trace is not None and stored.trace.endswith(TRACE_FILE)
    written = json.loads(gzip.decompress((tmp_path / stored.trace).read_bytes()))
    assert written == exported.events
    assert len(written["traceEvents"]) > 10


def test_a_key_goes_in_front_of_a_json_objects_others():
    from perflab.profile.capture import _with_first_key

    assert json.loads(_with_first_key("k", [1], b' {"a": 2}')) == {"k": [1], "a": 2}
    assert json.loads(_with_first_key("k", {"r": 0}, b"{ \n}")) == {"k": {"r": 0}}
