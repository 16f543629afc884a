"""The user's code a config names, in one place: the functions perflab imports and calls
(the model's factory, the dataset's, the collate function, the loss, the evidence checks
of the user's knobs), and the words that name the workload on the console.

Torch-free and import-free: the sweep process reads these names (the code fingerprint,
the console header, the factory whose import ends a check process) without importing
the user's code; the trial process imports what they name (perflab.workloads). Each
function takes the typed config (perflab.config.schema.PerflabConfig) or its composed
dict (a record's ``config``) alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The fields that name a factory perflab calls, "package.module.function". A new one (a
# user step, say) is added here: the settings check imports it, the code fingerprint hashes
# its module, and the console names it (WORKLOAD_WORDS) without further changes.
FACTORY_FIELDS = (
    "model._target_",
    "data.dataset",
    "data.collate",
    # model=function's function and its inputs, and the user's step (perflab.step)
    "model.fn",
    "model.inputs",
    "step",
)
# model.loss values that name no function (perflab.workloads.outputs)
LOSS_WORDS = ("auto", "model", "target")
# schedule.evidence: a value starting with this reads an attribute of the built model
# (model.config._attn_implementation); any other names a function fn(model)
MODEL_ATTRIBUTE = "model."
# What the console's header names of the user's code besides the model's factory, in
# this order: (field, the word before it)
WORKLOAD_WORDS = (
    ("model.fn", "fn"),
    ("model.inputs", "inputs"),
    ("data.dataset", "data"),
    ("data.collate", "collate"),
    ("step", "step"),
)

_MISSING = object()


def lookup(config: Any, key: str, default: Any = _MISSING) -> Any:
    """``config``'s value at a dotted ``key`` (``model.args.attn``), through attributes
    and mappings alike; ``default`` when it is absent (KeyError without one)."""
    node = config
    for part in key.split("."):
        if isinstance(node, Mapping):
            node = node.get(part, _MISSING)
        else:
            node = getattr(node, part, _MISSING)
        if node is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
    return node


def evidence_checks(config: Any) -> dict[str, str]:
    """schedule.evidence: knob key -> a function's dotted path or ``model.ATTRIBUTE``."""
    return {str(k): str(v) for k, v in dict(lookup(config, "schedule.evidence", {})).items()}


def user_code(config: Any) -> dict[str, str]:
    """Every function a config names, by the field that names it: the factories of
    FACTORY_FIELDS, model.loss when it is a function, and each function of
    schedule.evidence (as ``schedule.evidence.KNOB``). perflab's own models are among
    them: their factory is a function too."""
    named = {f: lookup(config, f, None) for f in FACTORY_FIELDS}
    loss = lookup(config, "model.loss", "auto")
    if loss not in LOSS_WORDS:
        named["model.loss"] = loss
    for knob, check in evidence_checks(config).items():
        if not check.startswith(MODEL_ATTRIBUTE):
            named[f"schedule.evidence.{knob}"] = check
    return {field: str(target) for field, target in named.items() if target}


def workload_name(model_choice: str, config: Any) -> str:
    """The workload as the console names it: the model option, then the user's code
    (``custom (mypkg.build; data mypkg.pairs, collate mypkg.pad)``) or model=hf's
    architecture and task (``hf (gpt2 causal_lm)``)."""
    model = lookup(config, "model", {})
    inside = []
    if model_choice == "hf":
        where = lookup(model, "path", None)
        inside.append(
            f"{lookup(model, 'arch', '?')} {lookup(model, 'task', '?')}"
            + (f" from {where}" if where else "")
        )
    elif not str(lookup(model, "_target_", "")).startswith("perflab."):
        inside.append(str(lookup(model, "_target_", "?")))
    extra = [
        f"{word} {lookup(config, field, None)}"
        for field, word in WORKLOAD_WORDS
        if lookup(config, field, None)
    ]
    if extra:
        inside.append(", ".join(extra))
    return f"{model_choice} ({'; '.join(inside)})" if inside else model_choice


def workloads_named(models: list[tuple[Mapping[str, str], Any]]) -> str:
    """The workloads of a sweep's variants, each once, in order: ``(config group
    choices, config)`` pairs (Hydra's runtime.choices: the model option is the model
    group's); one workload unless the sweep varies the model or its code."""
    names = list(dict.fromkeys(workload_name(c.get("model", "?"), cfg) for c, cfg in models))
    return " | ".join(names)
