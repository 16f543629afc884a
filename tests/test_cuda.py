"""The cuda tier: perflab's CUDA paths on a real GPU, run the way a user runs them.

Skipped where ``torch.cuda.is_available()`` is False (tests/conftest.py); ``pytest -m
cuda`` runs this tier alone and benchmarks/gpu_truth.py runs it and prints what it saw.
Each sweep and run is a ``perflab`` process with ``device=cuda`` in a temporary
directory, read back through its records, summary.json and profile.json: an OOM, a
device-side assert or a kernel that faults happens in a trial process, never in this one.
This process itself only times the spin kernel (CUDA events and the host clock), which
cannot leave the CUDA context broken.

Bounds are set from what the spin ground truth promises and from tests/test_spin.py's;
the tier ran on an H100 on 2026-11-26 (benchmarks/RESULTS.md, "GPU acceptance").
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import console_scripts
import pytest
import torch

from perflab.formats.records import TrialRecord, load_record
from perflab.measure.timing import make_timer
from perflab.workloads.spin import spin

pytestmark = pytest.mark.cuda

# Few rounds of short trials: the tier proves the CUDA paths, the statistics have their
# own tests. preset=quick is the user's "quick look" and keeps each sweep to a minute or so.
QUICK = ("device=cuda", "preset=quick", "schedule.min_rounds=3", "schedule.max_rounds=3")


def perflab(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return console_scripts.run("perflab", *args, cwd=cwd, timeout=600)


def said(result: subprocess.CompletedProcess[str]) -> str:
    """The end of what perflab printed, for an assertion's message."""
    return (result.stdout + result.stderr)[-3000:]


def sweep(cwd: Path, *args: str) -> Path:
    """``perflab -m ARGS`` into ``cwd/sweep``; the sweep directory once it exited 0."""
    root = cwd / "sweep"
    result = perflab(cwd, "-m", *args, f"hydra.sweep.dir={root}")
    assert result.returncode == 0, said(result)
    return root


def summary(root: Path) -> dict[str, Any]:
    return json.loads((root / "summary.json").read_text())


def job_dirs(root: Path) -> dict[str, Path]:
    """Each variant's directory by its label (``compile=off``, ``model.step_us=2000``)."""
    return {v["label"]: root / v["dir"] for v in summary(root)["variants"]}


def records(job: Path) -> list[TrialRecord]:
    return [load_record(p) for p in sorted((job / "trials").glob("r*.json"))]


def profile(job: Path) -> dict[str, Any]:
    return json.loads((job / "profile" / "profile.json").read_text())


def family_names(prof: dict[str, Any]) -> list[str]:
    """The kernel families a profile names."""
    return [name for key, value in prof.items() if key.startswith("families") for name in value]


def trace_event_names(job: Path) -> set[str]:
    prof = profile(job)
    assert prof["trace"], "the trace was not kept"
    trace = json.loads(gzip.decompress((job / "profile" / prof["trace"]).read_bytes()))
    return {str(e.get("name")) for e in trace["traceEvents"]}


# --- timing: CUDA events against the spin ground truth ---------------------------------


def test_cuda_events_time_the_device_spin_as_the_host_clock_sees_it():
    x = torch.ones(1, device="cuda")
    model = spin(2000).cuda()
    model(x)  # the first forward calibrates the spin kernel on this device
    steps = 20
    timer = make_timer("cuda", capacity=steps + 1)
    torch.cuda.synchronize()
    start = time.perf_counter_ns()
    timer.mark()
    for _ in range(steps):
        model(x)
        timer.mark()
    host, device = timer.collect()  # synchronizes
    wall_ns = time.perf_counter_ns() - start
    per_step = [b - a for a, b in zip(device, device[1:], strict=False)]
    assert statistics.median(per_step) == pytest.approx(2_000_000, rel=0.02)
    # the ground truth: the host clock around the synchronized block holds the same spins
    assert 0.99 * device[-1] <= wall_ns <= 1.02 * device[-1] + 1_000_000
    # which the host marks alone never see: a launch returns before the kernel runs
    assert host[-1] - host[0] < device[-1] / 2


@pytest.fixture(scope="module")
def spin_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The spin ground truth through the whole pipeline: 2000 us against 2100 us."""
    cwd = tmp_path_factory.mktemp("spin")
    return sweep(cwd, "+experiment=spin_ratio", *QUICK, "profiling.memory_snapshot=true")


def test_a_spin_sweep_measures_the_known_steps_and_ratio(spin_sweep):
    jobs = job_dirs(spin_sweep)
    for step_us in (2000, 2100):
        trials = records(jobs[f"model.step_us={step_us}"])
        assert trials and all(r.status == "ok" for r in trials)
        assert {r.settings["device"] for r in trials} == {"cuda"}
        # the device spin ran, calibrated in each trial process
        assert all("spin_calibration" in r.environment for r in trials)
    variants = {v["label"]: v for v in summary(spin_sweep)["variants"]}
    for step_us in (2000, 2100):
        p50_ns = variants[f"model.step_us={step_us}"]["step_ns"]["p50"]
        # the spin plus a constant of a few us (one small kernel): within 3 %
        assert p50_ns == pytest.approx(step_us * 1000, rel=0.03)
    [c] = summary(spin_sweep)["comparisons"]
    assert (c["variant"], c["baseline"]) == ("model.step_us=2100", "model.step_us=2000")
    assert c["speedup"] == pytest.approx(2000 / 2100, rel=0.01) and c["verdict"] == "SLOWER"


def test_nvml_telemetry_is_sampled_during_the_timed_block(spin_sweep):
    for job in job_dirs(spin_sweep).values():
        for record in records(job):
            t = record.telemetry
            assert t["available"] is True and t["source"] == "nvml", t
            assert t["device"] == record.environment["cuda_devices"][0]
            assert t["samples"] >= 2  # one at each end of the block, at least
            assert t["sm_clock_mhz_median"] > 0 and 0 < t["clock_ratio_median"] <= 1.1
            assert t["power_w_median"] > 0 and t["temperature_c_max"] > 0
            assert t["util_pct_median"] is not None


def test_a_memory_snapshot_is_written_by_the_profiling_trial(spin_sweep):
    for label, job in job_dirs(spin_sweep).items():
        if "A/A copy" in label:
            continue  # the sentinel is not profiled
        snapshot = profile(job)["memory_snapshot"]
        assert snapshot["file"], snapshot
        path = job / "profile" / snapshot["file"]
        assert path.stat().st_size > 0 and path.read_bytes()[:1] == b"\x80"  # a pickle


# --- perflab's own Triton kernels, compiled for the GPU ---------------------------------

KERNELS_AGAINST_EAGER = """
import torch
import torch.nn.functional as F
from perflab.kernels import TOLERANCES, interpreted, ops


def close(actual, expected, sums=False):
    # parameter gradients are sums over rows: atol scales with the largest sum
    tol = TOLERANCES[expected.dtype]
    atol = tol["rtol"] * float(expected.abs().max()) if sums else tol["atol"]
    torch.testing.assert_close(actual, expected, atol=atol, rtol=tol["rtol"])


def leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


def randn(*shape, dtype):
    return torch.randn(*shape, device="cuda", dtype=dtype)


torch.manual_seed(0)
for dtype in TOLERANCES:
    x, g = randn(256, 1024, dtype=dtype) * 2, randn(256, 1024, dtype=dtype)
    b = randn(1024, dtype=dtype)
    (fx, fb), (ex, eb) = leaves(x, b), leaves(x, b)
    fused, eager = ops.bias_gelu(fx, fb), F.gelu(ex + eb)
    fused.backward(g)
    eager.backward(g)
    close(fused, eager)
    close(fx.grad, ex.grad)
    close(fb.grad, eb.grad, sums=True)
    x, g = randn(32, 8, 1024, dtype=dtype) * 3 + 1, randn(32, 8, 1024, dtype=dtype)
    w, b = randn(1024, dtype=dtype), randn(1024, dtype=dtype)
    (fx, fw, fb), (ex, ew, eb) = leaves(x, w, b), leaves(x, w, b)
    fused, eager = ops.layer_norm(fx, fw, fb, 1e-5)[0], F.layer_norm(ex, (1024,), ew, eb, 1e-5)
    fused.backward(g)
    eager.backward(g)
    close(fused, eager)
    close(fx.grad, ex.grad)
    close(fw.grad, ew.grad, sums=True)
    close(fb.grad, eb.grad, sums=True)
    print(dtype, "ok")
print("interpreted", interpreted())
"""


def test_perflabs_triton_kernels_compiled_for_the_gpu_match_eager():
    # A fresh process without TRITON_INTERPRET: the kernels get Triton's compiler (the
    # variable is read once, when they are decorated: perflab/kernels/_triton.py).
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KERNELS_AGAINST_EAGER)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:4] == [
        "torch.float32 ok",
        "torch.bfloat16 ok",
        "torch.float16 ok",
        "interpreted False",
    ]


def test_a_fused_sweep_runs_the_compiled_kernels_with_eager_numerics(tmp_path):
    root = sweep(tmp_path, "+experiment=fused", *QUICK, "profile=false")
    fused = records(job_dirs(root)["fused=triton"])[0]
    evidence = fused.evidence["fused"]
    assert fused.status == "ok" and evidence.ok is True
    assert evidence.interpreted is False and evidence.timing_representative is True
    assert evidence.op_calls is not None and evidence.op_calls["perflab::bias_gelu"] > 0
    assert not any("Triton's interpreter" in w for w in fused.warnings)
    [c] = summary(root)["comparisons"]
    assert c["variant"] == "fused=triton" and c["numerics"]["ok"] is True, c["numerics"]


# --- torch.compile: Inductor's Triton kernels, CUDA graphs -----------------------------


@pytest.fixture(scope="module")
def compile_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("compile")
    small = ("model.d_model=128", "model.heads=4", "model.layers=2", "model.seq_len=64")
    return sweep(
        cwd,
        "compile=off,reduce-overhead",
        "model=transformer",
        *small,
        "data=memory",
        "batch_size=8",
        *QUICK,
    )


def test_inductor_triton_kernels_are_a_family_in_the_profile(compile_sweep):
    jobs = job_dirs(compile_sweep)
    assert any("triton" in name for name in family_names(profile(jobs["compile=reduce-overhead"])))
    assert not any("inductor" in name for name in family_names(profile(jobs["compile=off"])))


def test_every_kernel_is_counted_once_in_the_profile(compile_sweep):
    # the attribution's promise, on a trace made here (tests/test_attribution.py holds
    # it on the H100 traces): the families add up to the trace's kernel, copy and fill
    # time, and idle comes from those events only
    jobs = job_dirs(compile_sweep)
    for job in (jobs["compile=off"], jobs["compile=reduce-overhead"]):
        p = profile(job)
        assert sum(p["families_us"].values()) == pytest.approx(p["device_total_us"], rel=0.01)
        assert p["busy"]["basis"].startswith("CUDA kernels, copies and fills")
        assert 0 < p["busy"]["busy_share"] <= 1
        assert not [op for op in p["top_ops"] if op["name"].startswith(("##", "ProfilerStep"))]


def test_reduce_overhead_replays_cuda_graphs(compile_sweep):
    jobs = job_dirs(compile_sweep)
    compiled = records(jobs["compile=reduce-overhead"])
    assert compiled and all(r.status == "ok" for r in compiled)
    assert {r.settings["compile_mode"] for r in compiled} == {"reduce-overhead"}
    evidence = compiled[0].evidence["compile"]
    assert evidence.ok is True and evidence.observed["compiled_in_timed_window"] == 0
    # the graph replays are in the profiled steps' trace, and only in the compiled variant's
    assert "cudaGraphLaunch" in trace_event_names(jobs["compile=reduce-overhead"])
    assert "cudaGraphLaunch" not in trace_event_names(jobs["compile=off"])


# --- failures stay in their trial process -----------------------------------------------

HOG = """
import torch
from torch import nn


class Hog(nn.Module):
    # every forward asks the caching allocator for 1 PiB: more than any GPU has
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        torch.empty(2**50, dtype=torch.uint8, device=x.device)
        return self.lin(x)


def build():
    return Hog()
"""


def test_an_out_of_memory_trial_is_a_failed_record(tmp_path):
    (tmp_path / "hog.py").write_text(textwrap.dedent(HOG))
    run_dir = tmp_path / "run"
    result = perflab(
        tmp_path,
        "device=cuda",
        "model=custom",
        "model._target_=hog.build",
        "model.input.shape=[4]",
        "model.target.num_classes=2",
        "batch_size=2",
        "data=memory",
        "preset=quick",
        f"hydra.run.dir={run_dir}",
    )
    assert result.returncode == 1, said(result)
    record = load_record(run_dir / "trials" / "000.json")
    assert record.status == "failed" and record.samples is None
    assert record.settings["device"] == "cuda"
    assert record.error is not None and record.error.type == "OutOfMemoryError", record.error
    # the GPU is usable again once the trial process is gone
    assert torch.ones(1, device="cuda").add(1).item() == 2
