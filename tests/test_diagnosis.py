"""Delta breakdowns and diagnoses: pure functions over summary entries and profiles."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from profiles import busy, make_profile, op

from perflab.formats.profile_json import Profile
from perflab.formats.summary import load_summary
from perflab.formats.summary.variant import Measured
from perflab.profile.diagnosis import delta_breakdown, diagnose

# what a real variant measured (an H100 sweep's summary.json, read in its old form): the
# tests below change the step, its phases and the settings the diagnosis looks at
H100 = Path(__file__).resolve().parent / "fixtures" / "h100" / "amp_gpu_warmup3s"
MEASURED = load_summary(H100 / "summary.json").variants[0].measured


def profile(
    families_us: dict[str, float], steps: int = 2, ops: tuple[str, ...] = (), **fields
) -> Profile:
    return make_profile(
        families_us=families_us, profiled_steps=steps, top_ops=[op(n) for n in ops], **fields
    )


def test_the_breakdown_sums_to_the_measured_difference():
    base = profile({"aten": 20_000.0, "matmul/conv": 10_000.0})  # 10 + 5 ms per step
    var = profile({"aten": 8_000.0, "matmul/conv": 10_000.0, "c++ (inductor)": 4_000.0})
    d = delta_breakdown(base, var, measured_ms=5.5)
    assert d.families_ms == pytest.approx({"aten": -6.0, "matmul/conv": 0.0, "c++ (inductor)": 2.0})
    assert d.profiled_saving_ms == pytest.approx(4.0)
    # every millisecond is accounted for: by a family, or as unexplained
    assert -sum(d.families_ms.values()) + d.unexplained_ms == pytest.approx(5.5)


def _variant(data_ms: float, forward: float, backward: float, **settings) -> Measured:
    assert MEASURED is not None
    step = data_ms + forward + backward
    return replace(
        MEASURED,
        step_ns=replace(MEASURED.step_ns, p50=step * 1e6),
        phase_median_ns={
            "data": data_ms * 1e6,
            "forward": forward * 1e6,
            "backward": backward * 1e6,
        },
        settings={"device": "cpu", **settings},
    )


def test_a_step_waiting_on_its_loader_is_input_bound_with_worker_hypothesis():
    d = diagnose(_variant(6, 2, 2, num_workers=0), profile({"aten": 1.0}))
    assert d.bottleneck == "input-bound" and d.signals.data_wait_share == pytest.approx(0.6)
    assert any("num_workers=0,2" in h for h in d.hypotheses)


def test_a_busy_model_is_compute_bound_and_names_its_slowest_phase():
    d = diagnose(
        _variant(0.1, 3, 6, amp_dtype="bfloat16", compile_mode="default", channels_last=False),
        profile({"aten": 9.0, "memcpy/memset": 1.0}, ops=("aten::mkldnn_convolution",)),
    )
    assert d.bottleneck == "compute-bound" and d.slowest_phase == "backward"
    assert d.top_operations == ["aten::mkldnn_convolution"]
    assert d.hypotheses == [
        "channels_last may suit the convolutions: perflab -m channels_last=false,true"
    ]


def test_copies_dominating_the_profile_read_as_memory_movement():
    d = diagnose(_variant(0.1, 3, 3), profile({"aten": 1.0, "memcpy/memset": 3.0}))
    assert d.bottleneck == "memory-movement-heavy"


def test_an_idle_gpu_without_data_wait_is_launch_bound_with_cuda_graph_hypothesis():
    p = profile({"matmul/conv": 1.0}, busy=busy(0.35))
    d = diagnose(_variant(0.1, 3, 3, device="cuda", batch_size=32), p)
    assert d.bottleneck == "launch-bound" and d.signals.idle_share == pytest.approx(0.65)
    assert any("batch_size=32,64" in h for h in d.hypotheses)
    assert any("compile=off,reduce-overhead" in h for h in d.hypotheses)


def test_time_outside_operators_on_cpu_reads_as_overhead_bound():
    p = profile({"aten": 1.0}, busy=busy(0.5))
    assert diagnose(_variant(0.1, 3, 3), p).bottleneck == "overhead-bound"


def test_a_starved_loader_is_input_bound_even_with_an_idle_device():
    # the idle device is the symptom, the loader the cause: the cause wins
    p = profile({"aten": 1.0}, busy=busy(0.2))
    assert diagnose(_variant(6, 2, 2, device="cuda"), p).bottleneck == "input-bound"


def test_elementwise_dominated_profile_is_memory_bound_with_fusion_hypothesis():
    p = profile({"elementwise/norm": 6.0, "matmul/conv": 4.0}, busy=busy(0.9))
    d = diagnose(_variant(0.1, 3, 3, fused="off"), p)
    assert d.bottleneck == "memory-bound" and d.signals.elementwise_share == pytest.approx(0.6)
    assert any("fused=off,triton" in h for h in d.hypotheses)


def test_every_rule_carries_its_condition_and_reason():
    from perflab.profile.diagnosis import DIAGNOSIS_RULES

    assert DIAGNOSIS_RULES[-1].kind == "compute-bound"
    assert all(r.condition and r.reason for r in DIAGNOSIS_RULES)
