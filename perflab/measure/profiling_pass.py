"""The profiling pass: one more trial per variant, built like a timed one, then stepped
under torch.profiler in its own process, so profiling never shares a process with the
timings. Writes profile.json (perflab.formats.profile_json), the Chrome trace and, when
asked, a CUDA memory snapshot."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import torch

from perflab.formats.profile_json import TOP_OPS, MemorySnapshot, Overhead, write_profile
from perflab.formats.sweepdir import MEMORY_SNAPSHOT_FILE, log_beside
from perflab.measure import knobs
from perflab.measure.preflight import user_code_importable
from perflab.measure.resolve import resolve
from perflab.measure.steps import (
    Prepared,
    first_call,
    make_step,
    phases_of,
    prepare,
)
from perflab.measure.timing import make_timer
from perflab.measure.trial import settings_of
from perflab.process.isolation import output_to
from perflab.process.trial_request import TrialRequest

# allocation events kept for the snapshot: enough for a few steps of a large model
MEMORY_HISTORY_ENTRIES = 100_000


def run_profile(request: TrialRequest) -> str:
    """The profiling trial: build the variant like a timed trial, run its first call and
    a few unprofiled steps (the overhead reference), then profile; write profile.json
    and the trace (trace/perflab.pt.trace.json.gz) next to request.record_path. Returns "ok".
    Its output goes to profile.log beside profile.json (perflab.process.isolation.log_beside)."""
    # absolute before the user's code runs (an os.chdir in it must not move the outputs);
    # a fresh process from the fork server starts in the sweep process's directory
    absolute = str(Path(request.record_path).absolute())
    request = dataclasses.replace(request, record_path=absolute)
    with output_to(log_beside(request.record_path)):
        return _profile(request)


def _profile(request: TrialRequest) -> str:
    from perflab.profile import attribution, capture, operators
    from perflab.profile.trace_events import trace_events

    cfg = request.config
    user_code_importable(request)
    resolved = resolve(cfg)
    knobs.apply_threads(cfg.threads)
    knobs.apply_seed(cfg.seed)
    knobs.apply_matmul_precision(cfg.matmul_precision)
    knobs.apply_cudnn_benchmark(cfg.cudnn_benchmark, resolved.device)
    if resolved.compile_mode is not None:
        # Inductor names its C++ kernels in the profiler only when asked before compiling.
        import torch._inductor.config as inductor_config

        inductor_config.cpp.enable_kernel_profile = True
    prep = prepare(cfg, resolved)
    step = make_step(cfg, resolved, prep)
    first_call(step, prep, make_timer(resolved.device, capacity=2))
    phases = phases_of(cfg, step)
    unprofiled = [_wall_step(step, prep, resolved.device) for _ in range(3)]
    p = cfg.profiling
    out = Path(request.record_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    snapshot = _start_memory_snapshot(p.memory_snapshot, resolved.device)
    prof, profiled_s = capture.profile_steps(
        step, prep.workload.batches, phases, resolved.device, p
    )
    exported = capture.export_trace(prof, out.parent)
    # parsed once for the operator table and the attribution (READ_CATEGORIES covers both)
    events = trace_events(exported.events, operators.READ_CATEGORIES)
    table = operators.table_of(events)
    memory_snapshot = _finish_memory_snapshot(snapshot, out)
    trace_file = capture.write_trace(exported, out.parent, int(p.max_trace_mb * 2**20))
    # on CUDA, every kernel counted once under the operator that launched it
    cuda = resolved.device == "cuda"
    device_side = attribution.device_side(events, TOP_OPS) if cuda else None
    profile = capture.profile_of(
        variant={"choices": request.choices, "settings": settings_of(cfg, resolved)},
        device=resolved.device,
        rows=table.rows,
        trace_file=trace_file,
        profiled_steps=p.active,
        busy=table.busy,
        host_annotations=None if cuda else attribution.annotation_table(events, TOP_OPS),
        memory_snapshot=memory_snapshot,
        device_side=device_side,
        overhead=_overhead(unprofiled, profiled_s),
    )
    write_profile(out, profile)
    return "ok"


def _overhead(unprofiled: list[float], profiled_s: float) -> Overhead:
    """The profiled step against the median of the unprofiled ones."""
    reference = sorted(unprofiled)[len(unprofiled) // 2]
    return Overhead(
        unprofiled_step_s=reference,
        profiled_step_s=profiled_s,
        ratio=profiled_s / reference if reference else None,
    )


def _start_memory_snapshot(requested: bool, device: str) -> str | None:
    """Start recording allocator history for a memory snapshot when asked and possible;
    return why not otherwise."""
    if not requested:
        return "off (profiling.memory_snapshot=false)"
    if device != "cuda":
        return f"not available on {device}: the snapshot records the CUDA caching allocator"
    torch.cuda.memory._record_memory_history(max_entries=MEMORY_HISTORY_ENTRIES)
    return None


def _finish_memory_snapshot(not_started: str | None, out: Path) -> MemorySnapshot:
    if not_started is not None:
        return MemorySnapshot(file=None, note=not_started)
    path = out.with_name(MEMORY_SNAPSHOT_FILE)
    # A pickle, because that is the visualizer's format; perflab writes it, never loads it.
    torch.cuda.memory._dump_snapshot(str(path))
    torch.cuda.memory._record_memory_history(enabled=None)
    return MemorySnapshot(file=path.name, note="open it in https://pytorch.org/memory_viz")


def _wall_step(step: Any, prep: Prepared, device: str) -> float:
    start = time.perf_counter()
    step(prep.workload.batches, lambda: None)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start
