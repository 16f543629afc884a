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

Each is a plain evidence dict (perflab.measure.knobs.evidence), under the knob's name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from perflab.config.schema import PerflabConfig
from perflab.measure import knobs
from perflab.measure.knobs import Evidence, evidence
from perflab.measure.resolve import Resolved
from perflab.measure.steps import Prepared, call_model, to_device
from perflab.workloads import hf

# what each attention implementation calls, by the torch function's name
ATTENTION_CALLS = {
    "scaled_dot_product_attention": "sdpa",
    "softmax": "softmax",
    "flex_attention": "flex_attention",
}
# the calls that show each implementation ran (flash attention's, by their operators'
# namespace: flash_attn, flash_attn_3)
SHOWN_BY = {"eager": "softmax", "sdpa": "sdpa", "flex_attention": "flex_attention"}
# the output fields that hold a key/value cache (transformers 4: past_key_values; 5: cache)
CACHE_FIELDS = ("past_key_values", "cache")


class _AttentionCalls(TorchFunctionMode):
    """Counts the attention functions called while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        name = getattr(func, "__name__", "")
        namespace = str(getattr(func, "namespace", ""))
        if name in ATTENTION_CALLS:
            self.counts[ATTENTION_CALLS[name]] += 1
        elif "flash" in namespace or "flash_attn" in name:
            self.counts["flash"] += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def _module_calls(model: torch.nn.Module) -> Iterator[Counter[str]]:
    """Counts the forward calls of the model's modules (under "forward")."""
    calls: Counter[str] = Counter()

    def on_forward(*_: Any) -> None:
        calls["forward"] += 1

    handles = [m.register_forward_hook(on_forward) for m in model.modules()]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def evidence_of(cfg: PerflabConfig, resolved: Resolved, prep: Prepared) -> dict[str, Evidence]:
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
            forward_calls = calls["forward"]
            loss.backward()
            recomputed = calls["forward"] - forward_calls
            model.zero_grad(set_to_none=True)
        else:
            with torch.inference_mode(), attention, knobs.autocast(resolved):
                out = call_model(model, x)
    return {
        "model": _model_evidence(cfg, built),
        "model.attn": attention_evidence(
            cfg.model.attn, model.config._attn_implementation, attention.counts
        ),
        "model.gradient_checkpointing": checkpointing_evidence(
            cfg.model.gradient_checkpointing,
            hf.checkpointing_enabled(model),
            recomputed if cfg.mode == "train" else None,
        ),
        "model.use_cache": cache_evidence(cfg.model.use_cache, _has_cache(out)),
    }


def _model_evidence(cfg: PerflabConfig, built: hf.Built) -> Evidence:
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


def attention_evidence(requested: str, configured: str | None, counts: Counter[str]) -> Evidence:
    """The implementation in the config, and the calls that show it ran in the forward:
    eager's softmax (and no sdpa), sdpa's or flex attention's own call, or for flash
    attention its operators (or at least neither softmax nor sdpa)."""
    seen = {name: counts.get(name, 0) for name in ("softmax", "sdpa", "flex_attention", "flash")}
    if requested == "eager":
        ran = seen["softmax"] > 0 and seen["sdpa"] == 0
    elif requested in SHOWN_BY:
        ran = seen[SHOWN_BY[requested]] > 0
    else:  # flash attention: its operators, or at least no other implementation's calls
        ran = seen["flash"] > 0 or (seen["softmax"] == 0 and seen["sdpa"] == 0)
    calls = ", ".join(f"{name} x{n}" for name, n in seen.items() if n) or "none"
    detail = f"config._attn_implementation = {configured}; attention calls in one forward: {calls}"
    return evidence(
        requested, {"config": configured, "calls": seen}, configured == requested and ran, detail
    )


def checkpointing_evidence(requested: bool, enabled: bool, recomputed: int | None) -> Evidence:
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


def cache_evidence(requested: bool, returned: bool) -> Evidence:
    detail = (
        "the forward returned a key/value cache"
        if returned
        else "the forward returned no key/value cache"
        + ("" if not requested else " (an encoder has none to build)")
    )
    return evidence(requested, returned, returned == requested, detail)
