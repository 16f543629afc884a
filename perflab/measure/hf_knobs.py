"""The evidence that model=hf's knobs took effect, observed, not read back from what was
asked: one step of the eager model on the probe batch (forward and, in train mode,
backward), after the timed block, watched two ways.

- **Attention** (``model.attn``): the torch functions the forward calls, seen by a
  ``TorchFunctionMode``: ``scaled_dot_product_attention`` for sdpa, ``softmax`` for
  eager (transformers' eager attention is matmul, softmax, matmul), ``flex_attention``,
  and flash attention's own operators; with ``config._attn_implementation`` beside them.
- **Activation checkpointing** (``model.gradient_checkpointing``): forward hooks on every
  module. Without checkpointing no module runs forward during the backward pass; with
  it, the checkpointed layers run again there (the recomputation).
- **The cache** (``model.use_cache``): whether the forward returned a key/value cache.

Each is a KnobEvidence (perflab.measure.knobs.evidence), under the knob's name.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from perflab.config.schema import PerflabConfig
from perflab.formats.trial_parts import KnobEvidence
from perflab.measure import knobs
from perflab.measure.knobs import evidence
from perflab.measure.resolve import Resolved
from perflab.measure.steps import Prepared, call_model, to_device
from perflab.workloads import hf

# the output fields that hold a key/value cache (transformers 4: past_key_values; 5: cache)
CACHE_FIELDS = ("past_key_values", "cache")


@dataclass
class AttentionCalls:
    """The attention functions one forward called, by implementation: eager attention's
    softmax, sdpa's scaled_dot_product_attention, flex_attention, and flash attention's
    operators (by their namespace: flash_attn, flash_attn_3)."""

    softmax: int = 0
    sdpa: int = 0
    flex_attention: int = 0
    flash: int = 0

    def count(self, func: Any) -> None:
        """Count ``func`` if it is one of the attention functions."""
        name = getattr(func, "__name__", "")
        if name == "softmax":
            self.softmax += 1
        elif name == "scaled_dot_product_attention":
            self.sdpa += 1
        elif name == "flex_attention":
            self.flex_attention += 1
        elif "flash" in str(getattr(func, "namespace", "")) or "flash_attn" in name:
            self.flash += 1

    def show(self, implementation: str) -> bool:
        """The calls show that ``implementation`` ran: eager's softmax (and no sdpa), sdpa's
        or flex attention's own call, or for flash attention its operators (or at least
        neither softmax nor sdpa)."""
        if implementation == "eager":
            return self.softmax > 0 and self.sdpa == 0
        if implementation == "sdpa":
            return self.sdpa > 0
        if implementation == "flex_attention":
            return self.flex_attention > 0
        return self.flash > 0 or (self.softmax == 0 and self.sdpa == 0)


class _AttentionCalls(TorchFunctionMode):
    """Counts the attention functions called while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = AttentionCalls()

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        self.calls.count(func)
        return func(*args, **(kwargs or {}))


@dataclass
class _ModuleCalls:
    """The forward calls of a model's modules so far."""

    forward: int = 0


@contextmanager
def _module_calls(model: torch.nn.Module) -> Iterator[_ModuleCalls]:
    """Counts the forward calls of the model's modules."""
    calls = _ModuleCalls()

    def on_forward(*_: Any) -> None:
        calls.forward += 1

    handles = [m.register_forward_hook(on_forward) for m in model.modules()]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def evidence_of(cfg: PerflabConfig, resolved: Resolved, prep: Prepared) -> dict[str, KnobEvidence]:
    """model=hf's evidence entries ({} for any other model), from one step of the eager
    model on the probe batch; the gradients it leaves are cleared."""
    built = getattr(prep.model, "perflab_hf", None)
    if built is None:
        return {}
    model: Any = prep.model
    x, y = prep.workload.probe
    x, y = prep.input_fn(x), to_device(y, prep.device, False)
    attention = _AttentionCalls()
    recomputed = 0
    with _module_calls(model) as calls:
        if cfg.mode == "train":
            model.zero_grad(set_to_none=True)
            with attention, knobs.autocast(resolved):
                out = call_model(model, x)
                loss = prep.workload.loss_fn(out, y)
            forward_calls = calls.forward
            loss.backward()
            recomputed = calls.forward - forward_calls
            model.zero_grad(set_to_none=True)
        else:
            with torch.inference_mode(), attention, knobs.autocast(resolved):
                out = call_model(model, x)
    return {
        "model": _model_evidence(cfg, built),
        "model.attn": attention_evidence(
            cfg.model.attn, model.config._attn_implementation, attention.calls
        ),
        "model.gradient_checkpointing": checkpointing_evidence(
            cfg.model.gradient_checkpointing,
            hf.checkpointing_enabled(model),
            recomputed if cfg.mode == "train" else None,
        ),
        "model.use_cache": cache_evidence(cfg.model.use_cache, _has_cache(out)),
    }


def _model_evidence(cfg: PerflabConfig, built: hf.Built) -> KnobEvidence:
    """What was built: information, not a knob (ok is None)."""
    source = cfg.model.path or f"{cfg.model.arch}'s config class"
    weights = "random weights" if built.weights == "random" else f"weights from {built.weights}"
    detail = (
        f"{built.model_class} from {source}, {built.parameters / 1e6:.2f}M parameters, "
        f"{weights}, transformers {built.transformers}"
    )
    if built.missing:
        detail += (
            f"; {len(built.missing)} parameter(s) not in the checkpoint, initialised at random"
        )
    observed = {
        "class": built.model_class,
        "parameters": built.parameters,
        "weights": built.weights,
        "missing": built.missing,
        "unexpected": built.unexpected,
        "transformers": built.transformers,
    }
    return evidence({"arch": cfg.model.arch, "task": cfg.model.task}, observed, None, detail)


def attention_evidence(
    requested: str, configured: str | None, calls: AttentionCalls
) -> KnobEvidence:
    """The implementation in the config, and the calls that show it ran in the forward
    (AttentionCalls.show)."""
    seen = asdict(calls)
    ran = ", ".join(f"{name} x{n}" for name, n in seen.items() if n) or "none"
    detail = f"config._attn_implementation = {configured}; attention calls in one forward: {ran}"
    ok = configured == requested and calls.show(requested)
    return evidence(requested, {"config": configured, "calls": seen}, ok, detail)


def checkpointing_evidence(requested: bool, enabled: bool, recomputed: int | None) -> KnobEvidence:
    """Whether the model says it checkpoints, and (train mode) how many module calls the
    backward pass ran again: some with checkpointing, none without."""
    observed = {"enabled": enabled, "recomputed_module_calls": recomputed}
    if recomputed is None:
        detail = f"checkpointing {'on' if enabled else 'off'}; no backward pass in mode=infer"
        return evidence(requested, observed, enabled == requested, detail)
    ok = enabled == requested and (recomputed > 0) == requested
    detail = (
        f"checkpointing {'on' if enabled else 'off'}; {recomputed} module call(s) "
        "recomputed in the backward pass"
    )
    return evidence(requested, observed, ok, detail)


def _has_cache(out: Any) -> bool:
    getter = getattr(out, "get", None)
    return callable(getter) and any(getter(name) is not None for name in CACHE_FIELDS)


def cache_evidence(requested: bool, returned: bool) -> KnobEvidence:
    detail = (
        "the forward returned a key/value cache"
        if returned
        else "the forward returned no key/value cache"
        + ("" if not requested else " (an encoder has none to build)")
    )
    return evidence(requested, returned, returned == requested, detail)
