"""Kernel attribution on the real H100 traces in tests/fixtures/h100/traces (device=cpu:
the traces are read, nothing runs on a GPU)."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest
from profiles import make_profile

from perflab.profile import attribution
from perflab.profile.diagnosis import delta_breakdown
from perflab.profile.families import union_us

FIXTURES = Path(__file__).parent / "fixtures" / "h100"
TRACES = sorted((FIXTURES / "traces").glob("*/*.json.xz"))
HTA = json.loads((FIXTURES / "hta_temporal_breakdown.json").read_text())["traces"]
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def _key(path: Path) -> str:
    return f"{path.parent.name}/{path.name.split('.')[0]}"


_cache: dict[Path, dict] = {}


def _trace(path: Path) -> dict:
    if path not in _cache:
        with lzma.open(path, "rt") as f:
            _cache[path] = json.load(f)
    return _cache[path]


def test_every_h100_trace_is_a_fixture():
    assert len(TRACES) == 17 and set(HTA) == {_key(p) for p in TRACES}


@pytest.mark.parametrize("path", TRACES, ids=_key)
def test_family_totals_are_the_traces_device_time(path):
    trace = _trace(path)
    raw = sum(e["dur"] for e in trace["traceEvents"] if e.get("cat") in DEVICE)
    found = attribution.attribute(trace, top=15)
    assert sum(found.families_us.values()) == pytest.approx(raw, rel=0.01)
    assert found.device_total_us == pytest.approx(raw, rel=1e-9)
    # Hopper cuBLAS (nvjet_sm90_*) and native ATen kernels all find a family
    assert found.families_us.get("other", 0.0) <= 0.01 * raw


@pytest.mark.parametrize("path", TRACES, ids=_key)
def test_idle_agrees_with_holistic_trace_analysis(path):
    share = attribution.attribute(_trace(path), top=15).busy.busy_share
    assert share is not None
    idle = 1 - share
    hta = HTA[_key(path)]["idle_share"]
    if _key(path) == "compile_modes_quick/1":
        # HTA counts the 147 host-side launcher ops Inductor records as triton_* CPU
        # ops (they carry a "stream" argument) as GPU time; with them added as busy,
        # perflab's measure gives HTA's figure, without them the kernels leave 92.7 %
        # idle.
        events = _trace(path)["traceEvents"]
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in DEVICE]
        spans += [
            (e["ts"], e["ts"] + e["dur"])
            for e in events
            if e.get("cat") == "cpu_op" and "stream" in e.get("args", {})
        ]
        window = (min(s for s, _ in spans), max(e for _, e in spans))
        as_hta = 1 - union_us(spans, window) / (window[1] - window[0])
        assert as_hta == pytest.approx(hta, abs=0.02)
        assert idle == pytest.approx(0.927, abs=0.005)
    else:
        assert idle == pytest.approx(hta, abs=0.02)


def test_annotations_are_host_time_not_device_work():
    # torch.compile: "## Call CompiledFxGraph ##" and the optimizer's record_function
    # range have gpu_user_annotation mirrors on the device timeline
    trace = _trace(FIXTURES / "traces" / "compile_modes_quick" / "1.json.xz")
    found = attribution.attribute(trace, top=50)
    op_names = [op.name for op in found.top_ops]
    assert not [n for n in op_names if n.startswith(("##", "Optimizer.step", "ProfilerStep"))]
    host = {row.name for row in found.host_annotations}
    assert "ProfilerStep#*" in host and "Optimizer.step#SGD.step" in host
    assert any(n.startswith("## Call CompiledFxGraph") for n in host)
    assert found.families_us["triton (inductor)"] > 0


def test_kernels_go_to_the_operator_that_launched_them():
    trace = _trace(FIXTURES / "traces" / "amp_gpu_warmup0.5s" / "0.json.xz")  # bf16
    found = attribution.attribute(trace, top=15)
    top = {op.name: op for op in found.top_ops}
    assert top["aten::mm"].family == "matmul/conv"
    # Hopper's cuBLAS GEMMs (nvjet_sm90_*) were launched by aten::mm and aten::addmm
    nvjet = [k for k in found.top_kernels if k.name.startswith("nvjet_sm90")]
    assert nvjet and {k.launched_by for k in nvjet} <= {"aten::mm", "aten::addmm"}
    # an elementwise kernel that aten::copy_ launched is a dtype conversion
    copies = [k for k in found.top_kernels if k.launched_by == "aten::copy_"]
    assert copies and {k.family for k in copies} == {"memcpy/memset"}
    # operators' device times never exceed the device total (nothing counted twice)
    assert sum(op.self_device_us for op in found.top_ops) <= found.device_total_us


def test_kernel_names_are_short_enough_to_read():
    name = (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
        "(anonymous namespace)::TensorListMetadata<2>, at::native::BinaryOpListAlphaFunctor"
        "<float, 2, 2, 0>, std::plus<float>, float>(at::native::TensorListMetadata<2>, ...)"
    )
    assert attribution.short_kernel_name(name) == "at::native::multi_tensor_apply_kernel"
    cutlass = "void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>(Params)"
    assert (
        attribution.short_kernel_name(cutlass)
        == "cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>"
    )
    assert attribution.short_kernel_name("triton_poi_fused_add_0") == "triton_poi_fused_add_0"
    for path in TRACES:
        found = attribution.attribute(_trace(path), top=15)
        assert all(len(k.name) <= 80 for k in found.top_kernels)


def test_the_amp_difference_is_explained_by_the_device_time():
    # fp32 vs bf16 on a GPU-bound transformer step: the timed medians differ by 45.5 ms
    # (tests/fixtures/h100/amp_gpu_warmup0.5s/summary.json); the kernels of one profiled
    # step account for it within a tenth, because the device is what the step waits for
    summary = json.loads((FIXTURES / "amp_gpu_warmup0.5s" / "summary.json").read_text())
    p50 = {v["name"]: v["step_ns"]["p50"] / 1e6 for v in summary["variants"]}
    profiles = {}
    for variant in ("0", "1"):
        trace = _trace(FIXTURES / "traces" / "amp_gpu_warmup0.5s" / f"{variant}.json.xz")
        steps = len({e["name"] for e in trace["traceEvents"] if "ProfilerStep#" in e["name"]})
        found = attribution.attribute(trace, top=15)
        profiles[variant] = make_profile(families_us=found.families_us, profiled_steps=steps)
    measured = p50["1"] - p50["0"]  # variant 0 is amp=true, 1 the fp32 baseline
    d = delta_breakdown(profiles["1"], profiles["0"], measured)
    assert abs(d.unexplained_ms) < 0.1 * measured
