"""The profiling pass: kernel families, the profiling trial, its trace and tables."""

from __future__ import annotations

import gzip
import json

import pytest
from tiny import TINY

from perflab.formats.profile_json import MemorySnapshot, load_profile
from perflab.measure.profiling_pass import run_profile
from perflab.process.isolation import run_isolated
from perflab.process.trial_request import TrialRequest
from perflab.profile.families import classify


@pytest.mark.parametrize(
    ("name", "family"),
    [
        # names as CPU runs and CUDA traces report them
        ("triton_poi_fused_add_relu_0", "triton (inductor)"),
        ("triton_red_fused__softmax_1", "triton (inductor)"),
        ("triton_per_fused_native_layer_norm_2", "triton (inductor)"),
        ("triton_tem_fused_mm_3", "triton (inductor)"),
        ("cpp_fused_relu_threshold_backward_4", "c++ (inductor)"),
        ("graph_0_cpp_fused_gelu_gelu_backward_sum_0", "c++ (inductor)"),
        ("perflab::fused_bias_gelu", "custom op / user triton"),
        ("ampere_sgemm_128x64_tn", "matmul/conv"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul/conv"),
        # Hopper cuBLAS, as in the H100 traces
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "matmul/conv"),
        ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float>", "elementwise/norm"),
        ("sm80_xmma_fprop_implicit_gemm_indexed_f32f32", "matmul/conv"),
        ("void cudnn::cnn::wgrad2d_grouped_direct_kernel<false, true, int>", "matmul/conv"),
        ("void cudnn::engines_precompiled::nchwToNhwcKernel<float>", "memcpy/memset"),
        ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float>>", "elementwise/norm"),
        ("fmha_cutlassB_f32_aligned_64x64_k32_sm80(PyTorchMemEffAttention)", "attention"),
        ("aten::_efficient_attention_backward", "attention"),
        ("Memcpy HtoD (Pageable -> Device)", "memcpy/memset"),
        ("Memset (Device)", "memcpy/memset"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float", "communication"),
        ("aten::mkldnn_convolution", "matmul/conv"),
        ("aten::addmm", "matmul/conv"),
        ("aten::convolution_backward", "matmul/conv"),
        ("aten::add_", "elementwise/norm"),
        ("aten::_foreach_add_", "elementwise/norm"),
        ("aten::gelu_backward", "elementwise/norm"),
        ("aten::native_layer_norm", "elementwise/norm"),
        ("aten::empty", "aten"),
        ("perflab/forward", "perflab phase"),
        ("cudaLaunchKernel", "other"),
    ],
)
def test_kernel_families(name, family):
    assert classify(name) == family


def test_perflabs_own_ops_and_triton_kernels_are_custom_ops():
    from perflab.kernels import ops

    kernels = ops.load("cpu")  # sets TRITON_INTERPRET first, as perflab does on cpu
    names = [op._qualname for op in (ops.bias_gelu, ops.bias_gelu_backward, ops.layer_norm)]
    names += [
        k.__name__
        for k in (
            kernels.perflab_bias_gelu_fwd_kernel,
            kernels.perflab_bias_gelu_bwd_kernel,
            kernels.perflab_layer_norm_fwd_kernel,
        )
    ]
    # the autograd node of a custom op, as the profiler names it in the backward
    names.append("GeneratedBackwardFor_perflab_layer_norm_default")
    assert "perflab::bias_gelu" in names
    assert {classify(n) for n in names} == {"custom op / user triton"}, names


def _profile(tmp_path, make_config, *overrides):
    # In a fresh process, as perflab runs it: dynamo's caches in this test process may
    # already hold the same model compiled without kernel names.
    cfg = make_config(*TINY, *overrides)
    path = tmp_path / "profile" / "profile.json"
    outcome = run_isolated(run_profile, TrialRequest(cfg, {}, str(path)), timeout_s=600)
    assert outcome.kind == "ok", outcome.message
    profile = load_profile(path)
    assert profile is not None
    return profile, path.parent / (profile.trace_file.trace or "trace/none")


def test_profiling_trial_writes_a_trace_with_phase_markers_and_tables(tmp_path, make_config):
    profile, trace = _profile(tmp_path, make_config)
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    names = {e.get("name") for e in events}
    assert {"perflab/data", "perflab/forward", "perflab/backward", "perflab/optimizer"} <= names
    assert profile.time_basis == "self CPU time" and profile.profiled_steps == 3
    assert profile.top_ops and profile.families_us
    assert set(profile.phases_us) >= {"forward", "backward"}
    assert (profile.overhead.ratio or 0) > 0
    assert profile.trace_file.trace_bytes == trace.stat().st_size


@pytest.mark.slow
def test_compiled_variant_names_its_inductor_cpp_kernels(tmp_path, make_config):
    profile, trace = _profile(tmp_path, make_config, "compile=true")
    assert profile.families_us.get("c++ (inductor)", 0) > 0
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert any("cpp_fused_" in str(e.get("name")) for e in events)


def test_a_trace_over_the_bound_is_not_kept(tmp_path, make_config):
    profile, trace = _profile(tmp_path, make_config, "profiling.max_trace_mb=0.0001")
    assert profile.trace_file.trace is None and "exceeds" in (profile.trace_file.trace_note or "")
    assert not trace.exists()


def test_busy_time_is_the_union_of_intervals_within_the_steps():
    from perflab.profile.families import busy_summary, union_us

    assert union_us([(0, 4), (2, 6), (8, 9)], (1, 10)) == pytest.approx(6.0)
    assert union_us([(0, 1)], (2, 3)) == 0.0
    s = busy_summary([(0, 4), (2, 6), (12, 13)], [(0, 10), (10, 20)], "test")
    assert s.window_us == 20 and s.busy_us == 7 and s.busy_share == pytest.approx(0.35)


def test_cpu_busy_time_counts_outermost_operators_once(tmp_path, make_config):
    profile, _ = _profile(tmp_path, make_config)
    busy = profile.busy
    assert busy is not None and busy.basis.startswith("outermost ATen operators")
    assert 0 < (busy.busy_share or 0) < 1
    assert busy.busy_us + busy.idle_us == pytest.approx(busy.window_us)
    assert profile.memory_snapshot == MemorySnapshot(
        file=None, note="off (profiling.memory_snapshot=false)"
    )


def test_fused_variant_shows_perflabs_custom_ops(tmp_path, make_config):
    # in a fork-server child, where dynamo (and so triton.language) is preloaded
    profile, _ = _profile(tmp_path, make_config, "fused=triton")
    assert profile.families_us.get("custom op / user triton", 0) > 0
    assert any(op.name == "perflab::bias_gelu" for op in profile.top_ops)
