"""One small function per optimization knob, and the evidence that each took effect.

Evidence is observed, not assumed: autocast dtypes are read off the outputs of the
matmul/conv layers, channels_last off the tensors that reach the convolutions, compile
off dynamo's counters, the DataLoader off its live worker processes. Each piece of
evidence is a KnobEvidence (perflab.formats.trial_parts): ``requested``, ``observed``,
``ok`` (True, False, or None when there was nothing to observe) and a ``detail`` sentence.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import random
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from perflab.config.schema import PerflabConfig
from perflab.config.user_code import MODEL_ATTRIBUTE, evidence_checks, lookup
from perflab.formats.trial_parts import KnobEvidence
from perflab.measure.resolve import Resolved
from perflab.workloads import locate

# Layers whose outputs show the autocast dtype (matmuls and convolutions run in it).
AUTOCAST_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def evidence(requested: Any, observed: Any, ok: bool | None, detail: str) -> KnobEvidence:
    return KnobEvidence(requested=requested, observed=observed, ok=ok, detail=detail)


# --- process-wide settings ------------------------------------------------------------


def apply_threads(threads: int) -> KnobEvidence:
    # OMP_NUM_THREADS is ignored in a fork-server child (the server initialised OpenMP),
    # so the count is set through torch and read back.
    torch.set_num_threads(threads)
    observed = torch.get_num_threads()
    return evidence(threads, observed, observed == threads, f"torch.get_num_threads() = {observed}")


def apply_seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def apply_matmul_precision(precision: str) -> KnobEvidence:
    torch.set_float32_matmul_precision(precision)
    observed = torch.get_float32_matmul_precision()
    return evidence(precision, observed, observed == precision, "float32 matmul precision")


def apply_cudnn_benchmark(enabled: bool, device: str) -> KnobEvidence:
    torch.backends.cudnn.benchmark = enabled
    observed = torch.backends.cudnn.benchmark
    ok = observed == enabled if device == "cuda" else None
    return evidence(enabled, observed, ok, "torch.backends.cudnn.benchmark (cuda only)")


def conditions() -> dict[str, Any]:
    """Settings that must be equal between compared variants; a comparison checks them."""
    return {
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "mkldnn_enabled": torch.backends.mkldnn.enabled,
    }


# --- the model ------------------------------------------------------------------------


def apply_channels_last(model: nn.Module, enabled: bool) -> nn.Module:
    return model.to(memory_format=torch.channels_last) if enabled else model  # type: ignore[call-overload]


def channels_last_batch(value: Any) -> Any:
    """A batch with every 4-D floating tensor in it channels_last: a tensor, or the
    tensors of a tuple, list or dict batch (a user's dataset may yield any of them; a
    tuple batch once failed with "'list' object has no attribute 'contiguous'")."""
    if isinstance(value, torch.Tensor):
        four_d = value.dim() == 4 and value.is_floating_point()
        return value.contiguous(memory_format=torch.channels_last) if four_d else value
    if isinstance(value, (list, tuple)):
        return type(value)(channels_last_batch(v) for v in value)
    if isinstance(value, dict):
        return {k: channels_last_batch(v) for k, v in value.items()}
    return value


def four_d_tensors(value: Any) -> list[torch.Tensor]:
    """The 4-D floating tensors of a batch: what channels_last can change."""
    if isinstance(value, torch.Tensor):
        return [value] if value.dim() == 4 and value.is_floating_point() else []
    items = value.values() if isinstance(value, dict) else value
    if isinstance(value, (list, tuple, dict)):
        return [t for v in items for t in four_d_tensors(v)]
    return []


def apply_compile(model: nn.Module, resolved: Resolved, dynamic: bool | None) -> nn.Module:
    if resolved.compile_mode is None:
        return model
    return torch.compile(model, mode=resolved.compile_mode, dynamic=dynamic)  # type: ignore[return-value]


def apply_fused(model: nn.Module, fused: str, device: str) -> list[str]:
    """fused=triton: swap perflab's fused Triton modules into the model in place and
    return what was replaced. The kernels are imported here (interpreted on CPU), so a
    problem with them surfaces while building, not inside the first timed call."""
    if fused == "off":
        return []
    from perflab import kernels

    kernels.load(device)
    return kernels.fuse_model(model)


def autocast(resolved: Resolved) -> contextlib.AbstractContextManager[Any]:
    if resolved.amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(resolved.device, dtype=getattr(torch, resolved.amp_dtype))


def build_optimizer(cfg: PerflabConfig, model: nn.Module) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=0.9)


# --- compile counters -------------------------------------------------------------------


@dataclass(frozen=True)
class CompileCounts:
    """Dynamo's counters: graphs compiled, frames captured, graph breaks and
    recompilations; cumulative over the process, so a trial counts its part ``since``
    an earlier reading."""

    graphs: int = 0
    frames_compiled: int = 0
    graph_breaks: int = 0
    recompiles: int = 0

    def since(self, earlier: CompileCounts) -> CompileCounts:
        """What was added after ``earlier``."""
        return CompileCounts(
            graphs=self.graphs - earlier.graphs,
            frames_compiled=self.frames_compiled - earlier.frames_compiled,
            graph_breaks=self.graph_breaks - earlier.graph_breaks,
            recompiles=self.recompiles - earlier.recompiles,
        )


def compile_counters() -> CompileCounts:
    """Dynamo's cumulative counters now: its ``counters`` dict, read by its own keys."""
    from torch._dynamo.utils import counters

    stats = counters["stats"]
    return CompileCounts(
        graphs=int(stats.get("unique_graphs", 0)),
        frames_compiled=int(stats.get("calls_captured", 0)),
        graph_breaks=int(sum(counters["graph_break"].values())),
        recompiles=int(sum(counters["recompiles"].values())),
    )


def compile_evidence(
    resolved: Resolved,
    at_start: CompileCounts,
    before_timed: CompileCounts,
    after_timed: CompileCounts,
) -> KnobEvidence:
    """Dynamo's counters are process-wide and cumulative: count what this trial added."""
    trial = after_timed.since(at_start)
    in_window = after_timed.since(before_timed)
    # the record's observed object: the trial's counts, then the timed window's captures
    observed = {**asdict(trial), "compiled_in_timed_window": in_window.frames_compiled}
    if resolved.compile_mode is None:
        return evidence("off", observed, trial.graphs == 0, "no graphs compiled")
    detail = (
        f"{trial.graphs} graph(s), {trial.graph_breaks} graph break(s), "
        f"{in_window.frames_compiled} compilation(s) inside the timed window"
    )
    return evidence(resolved.compile_mode, observed, trial.graphs > 0, detail)


def fused_op_calls() -> dict[str, int]:
    """Real calls of perflab's fused custom ops so far in this process. Cumulative, like
    dynamo's counters, so a trial counts what it added; {} while they are not loaded."""
    ops = sys.modules.get("perflab.kernels.ops")
    return {} if ops is None else {f"perflab::{k}": n for k, n in sorted(ops.CALLS.items())}


def fused_evidence(
    requested: str, replaced: list[str], calls_at_start: dict[str, int]
) -> KnobEvidence:
    """What fused=triton swapped in, and whether the fused custom ops really ran: their
    Python implementations count real calls (traced, fake calls do not count)."""
    calls = {
        k: n - calls_at_start.get(k, 0)
        for k, n in fused_op_calls().items()
        if n > calls_at_start.get(k, 0)
    }
    ran = ", ".join(f"{name} x{n}" for name, n in calls.items()) or "none"
    if requested == "off":
        return evidence("off", replaced, not calls, f"fused ops that ran: {ran}")
    ops = sys.modules.get("perflab.kernels.ops")
    interpreted = ops is not None and ops.interpreted() is True
    detail = (
        f"{len(replaced)} module(s) fused; fused ops that ran: {ran}"
        if replaced
        else "nothing to fuse: no Linear+GELU in an nn.Sequential, no affine LayerNorm"
    )
    if interpreted:
        detail += "; Triton's interpreter on cpu: correct, but timing not representative"
    return KnobEvidence(
        requested=requested,
        observed=replaced,
        ok=bool(replaced) and bool(calls),
        detail=detail,
        op_calls=calls,
        interpreted=interpreted,
        timing_representative=not interpreted,
    )


# --- observing layers during the evidence pass -----------------------------------------


@dataclass
class LayerObservations:
    """What the evidence pass saw reach the layers (observe_layers)."""

    # the dtype of each matmul/conv layer's output, as torch names it without "torch."
    output_dtypes: list[str] = field(default_factory=list)
    # for each Conv2d call: its input was 4-D and channels_last
    conv_input_channels_last: list[bool] = field(default_factory=list)


@contextlib.contextmanager
def observe_layers(model: nn.Module) -> Iterator[LayerObservations]:
    """Record output dtypes of matmul/conv layers and the memory format of conv inputs."""
    seen = LayerObservations()

    def on_forward(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
        if isinstance(output, torch.Tensor):
            seen.output_dtypes.append(str(output.dtype).removeprefix("torch."))
        if isinstance(module, nn.Conv2d) and inputs and isinstance(inputs[0], torch.Tensor):
            x = inputs[0]
            seen.conv_input_channels_last.append(
                x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)
            )

    handles = [
        m.register_forward_hook(on_forward)
        for m in model.modules()
        if isinstance(m, AUTOCAST_LAYERS)
    ]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def amp_evidence(resolved: Resolved, seen: LayerObservations) -> KnobEvidence:
    dtypes = sorted(set(seen.output_dtypes))
    expected = resolved.amp_dtype or "float32"
    if not dtypes:
        return evidence(expected, dtypes, None, "no matmul/conv layers to observe")
    ok = expected in dtypes if resolved.amp_dtype else dtypes == ["float32"]
    return evidence(expected, dtypes, ok, f"matmul/conv output dtypes: {', '.join(dtypes)}")


def channels_last_evidence(enabled: bool, seen: LayerObservations) -> KnobEvidence:
    flags = seen.conv_input_channels_last
    if not flags:
        return evidence(enabled, None, None, "no Conv2d layers to observe")
    share = sum(flags) / len(flags)
    ok = share == 1.0 if enabled else True
    return evidence(
        enabled, round(share, 3), ok, f"{sum(flags)}/{len(flags)} conv inputs are channels_last"
    )


def loader_evidence(cfg: PerflabConfig, first_batch: Any, device: str) -> dict[str, KnobEvidence]:
    """Count the live worker processes and check whether batches arrive pinned: the
    ``data_loader`` entry (workers, and pinning on CUDA) and the ``pin_memory`` one,
    whose ``ok`` is None where nothing can be pinned: pinned memory is page-locked host
    memory for copies to an accelerator, and DataLoader pins nothing without one."""
    if cfg.data.source != "loader":
        none = evidence({"num_workers": 0}, {"source": "memory"}, None, "no DataLoader")
        return {
            "data_loader": none,
            "pin_memory": evidence(cfg.pin_memory, None, None, "no DataLoader"),
        }
    workers = len(multiprocessing.active_children())
    tensor = first_tensor(first_batch)
    pinned = tensor is not None and tensor.is_pinned() if device == "cuda" else False
    ok = workers == cfg.num_workers and (pinned == cfg.pin_memory or device != "cuda")
    detail = f"{workers} live worker process(es); batches pinned: {pinned}"
    if device != "cuda":
        pin = evidence(
            cfg.pin_memory,
            pinned,
            None,
            f"nothing to pin on {device}: DataLoader pins batches only for an accelerator "
            f"(batches pinned: {pinned})",
        )
        detail += f" (pin_memory has no effect on {device})"
    else:
        pin = evidence(
            cfg.pin_memory, pinned, pinned == cfg.pin_memory, f"batches pinned: {pinned}"
        )
    loader = evidence(
        {"num_workers": cfg.num_workers, "pin_memory": cfg.pin_memory},
        {"num_workers": workers, "pinned": pinned},
        ok,
        detail,
    )
    return {"data_loader": loader, "pin_memory": pin}


def first_tensor(value: Any) -> torch.Tensor | None:
    """The first tensor of a batch (a tensor, or one inside a tuple, list or dict)."""
    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, dict) else value
    if not isinstance(items, (tuple, list)) and not isinstance(value, dict):
        return None
    return next((t for t in map(first_tensor, items) if t is not None), None)


# --- your own knobs ---------------------------------------------------------------------


def user_evidence(cfg: PerflabConfig, model: nn.Module, taken: Any = ()) -> dict[str, KnobEvidence]:
    """The evidence of the user's knobs that schedule.evidence names a check for, under
    each knob's key (its report column reads it as perflab's knobs' own): after the timed
    block, on the eager model the step ran,

    - ``pkg.module.fn``: ``fn(model)`` returns ``(observed, ok)`` (ok True, False or None
      when it cannot tell), or only what it observed, compared with the knob's value;
    - ``model.ATTRIBUTE``: that attribute of the model (``model.config._attn_implementation``,
      ``model.attn_used``), compared with the knob's value.

    A check that raises, or an attribute the model lacks, is evidence with ``ok`` None
    that says why; it never fails the trial, which has been measured. Keys in ``taken``
    (perflab's own evidence, e.g. ``amp``) are left to perflab's."""
    found: dict[str, KnobEvidence] = {}
    for knob, check in evidence_checks(cfg).items():
        if knob in taken:
            continue
        requested = lookup(cfg, knob, None)
        if check.startswith(MODEL_ATTRIBUTE):
            path = check.removeprefix(MODEL_ATTRIBUTE)
            try:
                observed = lookup(model, path)
            except KeyError:
                found[knob] = evidence(
                    requested, None, None, f"{check}: the model has no attribute {path}"
                )
                continue
            found[knob] = _compared(requested, observed, check)
            continue
        try:
            answer = locate(check)(model)
        except Exception as exc:  # noqa: BLE001 - evidence, never a failed trial
            problem = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            found[knob] = evidence(
                requested, None, None, f"{check} raised {type(exc).__name__}: {problem}"
            )
            continue
        if isinstance(answer, tuple) and len(answer) == 2 and answer[1] in (True, False, None):
            observed, ok = answer
            found[knob] = evidence(
                requested, _plain(observed), None if ok is None else bool(ok), f"{check}(model)"
            )
        else:
            found[knob] = _compared(requested, answer, f"{check}(model)")
    return found


def _compared(requested: Any, observed: Any, source: str) -> KnobEvidence:
    """Evidence that reads ``observed`` and compares it with the knob's value (as the
    command line wrote it: true, 8, sdpa)."""
    same = observed == requested or _text(observed) == _text(requested)
    return evidence(
        requested,
        _plain(observed),
        same,
        f"{source} = {_text(observed)!s} (the knob asks for {_text(requested)})",
    )


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _plain(value: Any) -> Any:
    """A value a record can hold (JSON): itself, or its text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)[:300]
