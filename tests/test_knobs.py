"""Every knob's evidence, observed on a tiny model in this process (CPU; the cudnn
knob's judgement on "cuda" is read back without a GPU)."""

from __future__ import annotations

import torch
from torch import nn

from perflab.formats.trial_parts import KnobEvidence
from perflab.measure import knobs
from perflab.measure.knobs import CompileCounts, LayerObservations
from perflab.measure.resolve import Resolved


def _conv_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.Flatten(), nn.Linear(4 * 4 * 4, 2)
    )


def _observe(model: nn.Module, x: torch.Tensor, resolved: Resolved) -> LayerObservations:
    with torch.no_grad(), knobs.observe_layers(model) as seen, knobs.autocast(resolved):
        model(x)
    return seen


CPU = Resolved("cpu", None, None)
CPU_BF16 = Resolved("cpu", "bfloat16", None)


def test_amp_evidence_sees_the_autocast_dtype():
    model, x = _conv_model(), torch.randn(2, 3, 8, 8)
    assert knobs.amp_evidence(CPU_BF16, _observe(model, x, CPU_BF16)).ok is True
    off = knobs.amp_evidence(CPU, _observe(model, x, CPU))
    assert off.ok is True and off.observed == ["float32"]


def test_amp_evidence_fails_when_autocast_did_not_reach_the_layers():
    model, x = _conv_model(), torch.randn(2, 3, 8, 8)
    seen = _observe(model, x, CPU)  # ran without autocast although bf16 was requested
    result = knobs.amp_evidence(CPU_BF16, seen)
    assert result.ok is False and result.observed == ["float32"]


def test_amp_evidence_without_matmul_layers_is_unknown():
    result = knobs.amp_evidence(CPU_BF16, _observe(nn.ReLU(), torch.randn(2), CPU_BF16))
    assert result.ok is None


def test_channels_last_evidence_follows_the_memory_format():
    model = knobs.apply_channels_last(_conv_model(), True)
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    assert knobs.channels_last_evidence(True, _observe(model, x, CPU)).ok is True
    plain = _conv_model()
    result = knobs.channels_last_evidence(True, _observe(plain, torch.randn(2, 3, 8, 8), CPU))
    assert result.ok is False and result.observed == 0.0


def test_threads_are_set_and_read_back():
    before = torch.get_num_threads()
    try:
        assert knobs.apply_threads(1) == KnobEvidence(
            requested=1,
            observed=1,
            ok=True,
            detail="torch.get_num_threads() = 1",
        )
    finally:
        torch.set_num_threads(before)


def test_matmul_precision_is_set_and_read_back():
    before = torch.get_float32_matmul_precision()
    try:
        assert knobs.apply_matmul_precision("high").observed == "high"
    finally:
        torch.set_float32_matmul_precision(before)


def test_compile_evidence_counts_graphs_and_compilations_in_the_window():
    resolved = Resolved("cpu", None, "default")
    before = CompileCounts(graphs=1, frames_compiled=1, graph_breaks=0, recompiles=0)
    after = CompileCounts(graphs=2, frames_compiled=2, graph_breaks=1, recompiles=1)
    start = CompileCounts(graphs=0, frames_compiled=0, graph_breaks=0, recompiles=0)
    result = knobs.compile_evidence(resolved, start, before, after)
    assert result.ok is True
    assert result.observed["compiled_in_timed_window"] == 1
    assert "1 compilation(s) inside the timed window" in result.detail
    assert knobs.compile_evidence(resolved, before, before, before).ok is False
    # the record's observed object, key for key and in order, as before the counts had a type
    assert list(result.observed.items()) == [
        ("graphs", 2),
        ("frames_compiled", 2),
        ("graph_breaks", 1),
        ("recompiles", 1),
        ("compiled_in_timed_window", 1),
    ]


def test_conditions_name_the_settings_that_must_match():
    keys = set(knobs.conditions())
    assert {
        "threads",
        "float32_matmul_precision",
        "cudnn_benchmark",
        "cuda_matmul_allow_tf32",
    } <= keys


def test_cudnn_benchmark_is_recorded_and_only_judged_on_cuda():
    before = torch.backends.cudnn.benchmark
    try:
        on_cpu = knobs.apply_cudnn_benchmark(True, "cpu")
        assert on_cpu.observed is True and on_cpu.ok is None
        assert knobs.apply_cudnn_benchmark(False, "cuda").ok is True
    finally:
        torch.backends.cudnn.benchmark = before
