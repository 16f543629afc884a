"""What perflab takes from a model's output: the tensor the numerics check compares and a
loss function receives (``model.output``), and the loss the step backpropagates
(``model.loss``).

Models return a tensor, a tuple, a dict or a Hugging Face ``ModelOutput`` (a dict whose
fields are also attributes, None where not computed). perflab once assumed a tensor: a
GPT-2 failed its first step with "'CausalLMOutputWithCrossAttentions' object has no
attribute 'flatten'", and a model that computes its own loss from ``labels=`` needed a
wrapper. The defaults here take what such models give:

- ``model.output=auto``: the output's ``logits`` if it has them, else its first tensor;
  a name picks a field or key, a number a position;
- ``model.loss=auto``: the model's own ``loss`` when its output carries one, else
  perflab's loss for ``model.target.kind`` on the picked tensor; ``model`` insists on the
  model's own; ``target`` ignores it; ``pkg.module.fn`` is the user's
  ``fn(output, target) -> scalar``, given the picked tensor.

A choice that does not fit the output (no such field, a loss that is not a scalar, an
output and a target whose shapes the loss cannot pair) is a ConfigError naming the field,
what the output holds and what is allowed: the settings check runs the probe batch
through a user's model before anything is measured (perflab.measure.preflight).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from perflab.config.schema import ModelConfig, TargetSpec
from perflab.errors import ConfigError

LossFn = Callable[[Any, Any], torch.Tensor]

AUTO = "auto"
# model.loss values besides a dotted path
OWN, TARGET = "model", "target"


def fields_of(out: Any) -> list[str]:
    """The fields of an output that hold a tensor, as model.output names them."""
    if isinstance(out, torch.Tensor):
        return []
    if isinstance(out, dict):
        return [str(k) for k, v in out.items() if isinstance(v, torch.Tensor)]
    if isinstance(out, (list, tuple)):
        return [str(i) for i, v in enumerate(out) if isinstance(v, torch.Tensor)]
    attributes = getattr(out, "__dict__", {})  # an object of the user's own
    return [k for k, v in attributes.items() if isinstance(v, torch.Tensor)]


def _field(out: Any, name: str) -> Any:
    """``out``'s field ``name`` (a key, an attribute, or a position), None if absent."""
    if isinstance(out, dict):
        return out.get(name)
    if isinstance(out, (list, tuple)):
        position = int(name) if name.lstrip("-").isdigit() else len(out)
        return out[position] if -len(out) <= position < len(out) else None
    return getattr(out, name, None)


def own_loss(out: Any) -> torch.Tensor | None:
    """The loss a model computed itself (a Hugging Face model given ``labels=``)."""
    if isinstance(out, torch.Tensor) or isinstance(out, (list, tuple)):
        return None
    loss = _field(out, "loss")
    return loss if isinstance(loss, torch.Tensor) else None


def output_tensor(out: Any, choice: str = AUTO) -> torch.Tensor:
    """The tensor ``model.output`` picks from a model's output."""
    if isinstance(out, torch.Tensor):
        return out
    if choice == AUTO:
        logits = _field(out, "logits")
        if isinstance(logits, torch.Tensor):
            return logits
        found = fields_of(out)
        picked = _field(out, found[0]) if found else None
        problem = "the model's output holds no tensor"
    else:
        picked = _field(out, choice)
        problem = f"the model's output has no tensor {choice!r}"
    if not isinstance(picked, torch.Tensor):
        raise ConfigError(
            "model.output",
            choice,
            f"auto (logits, else the first tensor) or one of {fields_of(out) or '(none)'}",
            f"{problem} (it is a {type(out).__name__})",
        )
    return picked


def target_loss(target: TargetSpec) -> LossFn:
    """perflab's loss for ``model.target.kind`` on the picked output tensor."""

    def classes(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out.flatten(0, -2), y.flatten())

    def regression(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        y = y.view(y.shape[0], *([1] * (out.dim() - 1))).expand_as(out)
        return nn.functional.mse_loss(out.float(), y.float())

    def mean(out: torch.Tensor, y: Any) -> torch.Tensor:
        return out.float().mean()

    return {"classes": classes, "regression": regression, "none": mean}[target.kind]


def make_loss(model: ModelConfig, user_fn: LossFn | None = None) -> LossFn:
    """The step's loss: ``(model output, target) -> scalar`` (module docstring).
    ``user_fn``: the function a dotted ``model.loss`` names, already imported."""
    on_tensor = user_fn or target_loss(model.target)

    def loss(out: Any, y: Any) -> torch.Tensor:
        if model.loss in (AUTO, OWN):
            computed = own_loss(out)
            if computed is not None:
                return _scalar(computed, "model.loss", model.loss, "the model's own loss")
            if model.loss == OWN:
                raise ConfigError(
                    "model.loss",
                    OWN,
                    "auto, target or a dotted path to fn(output, target) -> scalar",
                    f"the model's output carries no loss (it is a {type(out).__name__}: a "
                    "Hugging Face model computes one when its batch has labels)",
                )
        picked = output_tensor(out, model.output)
        if y is None and user_fn is None and model.target.kind != "none":
            raise ConfigError(
                "model.loss",
                model.loss,
                "a model that computes its own loss from the labels in its batch (a 'labels' "
                "key in each dict item), a dataset of (input, target) items, "
                "model.target.kind=none, or a dotted path to fn(output, target) -> scalar",
                "the batch carries no target (its items are dicts without 'labels') and the "
                f"model's output carries no loss (it is a {type(out).__name__})",
            )
        try:
            value = on_tensor(picked, y)
        except (RuntimeError, ValueError) as exc:
            if not _shapes_disagree(exc):
                raise  # a label out of range, a dtype: the trial records it as it is
            raise _pairing_error(model, picked, y, exc) from exc
        return _scalar(value, "model.loss", model.loss, "the loss")

    return loss


def _scalar(value: Any, field: str, setting: str, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        shown = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise ConfigError(
            field,
            setting,
            "a loss that returns one number (a scalar tensor) per batch",
            f"{what} is {shown}",
        )
    return value.reshape(())


# how torch words a loss whose output and target shapes do not fit: cross-entropy's
# "Expected input batch_size (512) to match target batch_size (8)", a broadcast's "The size
# of tensor a (3) must match the size of tensor b (4)", a view's "shape '[4, 1, 1, 1]' is
# invalid for input of size 12288"
_SHAPE_WORDS = ("batch_size", "size of tensor", "shape", "must match the size")


def _shapes_disagree(exc: Exception) -> bool:
    return any(word in str(exc) for word in _SHAPE_WORDS)


def _pairing_error(model: ModelConfig, out: torch.Tensor, y: Any, exc: Exception) -> ConfigError:
    """A loss that cannot pair the output with the target, with the field to set."""
    target_shape = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if model.loss == AUTO or model.loss == TARGET:
        field, value = "model.target", f"kind={model.target.kind} shape={model.target.shape}"
        allowed = (
            "a target that fits the output: for one label per token set model.target.shape="
            "[SEQ_LEN] (kind=classes, num_classes the vocabulary); for one number per sample, "
            "kind=regression; for no target, kind=none; or model.output to pick another tensor"
        )
    else:
        field, value = "model.loss", model.loss
        allowed = "a function fn(output, target) -> scalar that takes this output and target"
    return ConfigError(
        field,
        value,
        allowed,
        f"the loss cannot pair output {tuple(out.shape)} with target {target_shape} ({first})",
    )
