"""model=hf: a Hugging Face transformers model, built from its config class with random
weights or from a local directory, never from the network.

The one module of perflab that imports transformers, and only inside its functions, in a
trial process: the sweep process never imports it (perflab.config.hf reads what it needs
of a local config.json), and a DataLoader worker that unpickles the token dataset
(perflab.workloads.data.TokenDataset) does not pay for it. transformers>=4.45: the
attention implementation is chosen with ``attn_implementation`` and read back from
``config._attn_implementation`` (4.36 and later), as in transformers 5.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from perflab.config.hf import INTERMEDIATE_PER_HIDDEN, ModelSizes
from perflab.config.schema import HFConfig
from perflab.errors import ConfigError

# the extra that brings transformers (pyproject.toml), and the oldest release perflab
# uses: sdpa attention for GPT-2 and BERT arrived in 4.41-4.42
MIN_VERSION = "4.45"
EXTRA = f"the hf extra: pip install 'perflab[hf]' (transformers>={MIN_VERSION})"
# model.task -> the transformers auto class that builds its head, and the name of its
# model_type -> class table in transformers.models.auto.modeling_auto
TASK_CLASSES = {
    "causal_lm": ("AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    "masked_lm": ("AutoModelForMaskedLM", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    "sequence_classification": (
        "AutoModelForSequenceClassification",
        "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    ),
}
# perflab's size fields -> transformers' common config names (a config's attribute_map
# maps them onto its own: GPT-2's n_layer, n_embd, n_head)
SIZE_NAMES = {
    "layers": "num_hidden_layers",
    "hidden": "hidden_size",
    "heads": "num_attention_heads",
    "vocab_size": "vocab_size",
}
# special token ids a config may hold; one outside a smaller vocabulary is moved into it
TOKEN_IDS = (
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "cls_token_id",
    "decoder_start_token_id",
)
# files whose presence in model.path means there are weights to load
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# model.attn values that need CUDA and a package of their own; without the package,
# transformers would fetch a kernel from the Hub, which perflab never lets it do
FLASH_PACKAGES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


def require_transformers() -> Any:
    """transformers, imported offline; a ConfigError naming the extra without it."""
    # transformers and huggingface_hub read it when first imported: no download, ever
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        raise ConfigError("model", "hf", EXTRA, "transformers is not installed") from None
    if _release(transformers.__version__) < _release(MIN_VERSION):
        raise ConfigError(
            "model", "hf", EXTRA, f"transformers {transformers.__version__} is too old"
        )
    return transformers


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def check(model: HFConfig, device: str, mode: str) -> None:
    """Everything that can stop model=hf before it is built, each a ConfigError in one
    line (resolved in every trial process, so the sweep's settings check and a single
    run's say it before anything is measured): transformers is there, the architecture,
    task and sizes make a config, and the attention implementation runs here."""
    transformers = require_transformers()
    _check_environment(model.attn, device, mode)
    hf_config = make_config(transformers, **_config_arguments(model))
    _check_task(transformers, hf_config, model.task)
    _check_attention(_auto_class(transformers, model.task), hf_config, model.attn)


def _config_arguments(model: HFConfig) -> dict[str, Any]:
    return {
        "arch": model.arch,
        "path": model.path,
        "task": model.task,
        "seq_len": model.seq_len,
        "num_labels": model.num_labels,
        "sizes": ModelSizes(model.layers, model.hidden, model.heads, model.vocab_size),
        "overrides": dict(model.config),
        "use_cache": model.use_cache,
    }


def _check_environment(attn: str, device: str, mode: str) -> None:
    """The attention implementation can run here: flash attention needs CUDA and its
    package, flex attention has no backward pass on a CPU."""
    if attn == "flex_attention" and device == "cpu" and mode == "train":
        raise ConfigError(
            "model.attn",
            attn,
            "eager or sdpa for training on cpu (flex_attention: mode=infer there)",
            "torch's flex attention has no backward pass on cpu",
        )
    if attn in FLASH_PACKAGES:
        if device != "cuda":
            raise ConfigError(
                "model.attn",
                attn,
                f"eager, sdpa or flex_attention on {device} (flash attention runs on CUDA only)",
                f"not available on {device}",
            )
        package = FLASH_PACKAGES[attn]
        if importlib.util.find_spec(package) is None:
            raise ConfigError(
                "model.attn",
                attn,
                f"eager, sdpa or flex_attention, or {attn} once its package ({package}) is "
                "installed",
                f"{package} is not installed",
            )


@dataclass(frozen=True)
class Built:
    """What the factory built, for the trial's evidence (perflab.measure.hf_knobs)."""

    model_class: str
    # "random" or the directory the weights came from
    weights: str
    parameters: int
    transformers: str
    # from_pretrained's loading info: parameters the checkpoint lacked (initialised at
    # random: a task head it was not trained with) and those it had that the model lacks
    missing: list[str]
    unexpected: list[str]


def build(
    arch: str,
    path: str | None,
    task: str,
    seq_len: int,
    num_labels: int,
    layers: int | None,
    hidden: int | None,
    heads: int | None,
    vocab_size: int | None,
    config: dict[str, Any],
    attn: str,
    gradient_checkpointing: bool,
    use_cache: bool,
) -> nn.Module:
    """The model of model=hf (perflab.config.schema.HFConfig), in float32, its knobs set;
    what was built is kept on it as ``perflab_hf`` (a Built) for the evidence."""
    transformers = require_transformers()
    auto = _auto_class(transformers, task)
    hf_config = make_config(
        transformers,
        arch=arch,
        path=path,
        task=task,
        seq_len=seq_len,
        num_labels=num_labels,
        sizes=ModelSizes(layers, hidden, heads, vocab_size),
        overrides=config,
        use_cache=use_cache,
    )
    _check_task(transformers, hf_config, task)  # check() ran the rest in this process
    missing: list[str] = []
    unexpected: list[str] = []
    weights = _weights(path)
    if weights is None:
        model = auto.from_config(hf_config, attn_implementation=attn)
    else:
        try:
            model, info = auto.from_pretrained(
                weights,
                config=hf_config,
                attn_implementation=attn,
                local_files_only=True,
                output_loading_info=True,
            )
        except (OSError, ValueError, RuntimeError) as exc:
            raise ConfigError(
                "model.path",
                path,
                "a directory whose weights fit its config.json and the sizes set",
                _first_line(exc),
            ) from exc
        missing, unexpected = list(info["missing_keys"]), list(info["unexpected_keys"])
    model = model.to(torch.float32)  # perflab's knob for lower precision is amp
    model.config.use_cache = use_cache
    if gradient_checkpointing:
        _enable_checkpointing(model)
    model.perflab_hf = Built(
        model_class=type(model).__name__,
        weights="random" if weights is None else str(weights),
        parameters=sum(p.numel() for p in model.parameters()),
        transformers=transformers.__version__,
        missing=missing,
        unexpected=unexpected,
    )
    return model


def _auto_class(transformers: Any, task: str) -> Any:
    return getattr(transformers, TASK_CLASSES[task][0])


def make_config(
    transformers: Any,
    *,
    arch: str,
    path: str | None,
    task: str,
    seq_len: int,
    num_labels: int,
    sizes: ModelSizes,
    overrides: dict[str, Any],
    use_cache: bool,
) -> Any:
    """The transformers config: config.json's (path) or the config class's defaults
    (arch) with perflab's sizes (the tiny ones for those left null, with arch), the
    task's, and model.config's attributes last."""
    from transformers import CONFIG_MAPPING

    if arch not in CONFIG_MAPPING:
        raise ConfigError(
            "model.arch",
            arch,
            f"a model_type transformers {transformers.__version__} knows, e.g. gpt2, bert, llama",
            "unknown architecture",
        )
    config_class = CONFIG_MAPPING[arch]
    defaults = config_class()
    values: dict[str, Any] = {}
    if path is not None:
        values.update(_local_config(path))
    # null sizes: config.json's with a path, perflab's tiny ones from the config class
    chosen = sizes if path is not None else sizes.or_tiny()
    for field_name, value in chosen.items():
        if value is None:
            continue
        name = SIZE_NAMES[field_name]
        if not hasattr(defaults, name):
            raise ConfigError(
                f"model.{field_name}",
                value,
                f"null, with {name} set by its own name (+model.config.NAME=VALUE)",
                f"{arch}'s config has no {name}",
            )
        values[_own_name(config_class, name)] = value
    if chosen.hidden is not None and hasattr(defaults, "intermediate_size"):
        values["intermediate_size"] = INTERMEDIATE_PER_HIDDEN * chosen.hidden
    if chosen.heads is not None and hasattr(defaults, "num_key_value_heads"):
        # grouped-query attention's key/value heads (Mistral's 8, Qwen2's 32) must divide
        # the heads: as many (plain multi-head attention) unless model.config says
        values["num_key_value_heads"] = chosen.heads
    if task == "sequence_classification":
        values["num_labels"] = num_labels
    values["use_cache"] = use_cache
    values.update({_own_name(config_class, k): v for k, v in overrides.items()})
    vocab = values.get("vocab_size", defaults.vocab_size)
    for name in TOKEN_IDS:
        token = values.get(name, getattr(defaults, name, None))
        if type(token) is int and token >= vocab:
            values[name] = vocab - 1
    pad = values.get("pad_token_id", defaults.pad_token_id)
    if task == "sequence_classification" and pad is None:
        # GPT-2-style heads pool the last token that is not padding: they need the id
        values["pad_token_id"] = vocab - 1
    positions = _own_name(config_class, "max_position_embeddings")
    limit = values.get(positions, getattr(defaults, positions, None))
    if type(limit) is int and seq_len > limit:
        if path is not None:
            raise ConfigError(
                "model.seq_len",
                seq_len,
                f"<= {limit}, the max_position_embeddings of model.path's config.json",
                "longer than the model's positions",
            )
        values[positions] = seq_len  # random weights: as many positions as the samples
    values.pop("model_type", None)
    try:
        hf_config = config_class.from_dict(values)
    except Exception as exc:  # noqa: BLE001 - transformers 5's strict fields raise their own
        raise ConfigError(
            "model.config", overrides, f"attributes {arch}'s config accepts", _first_line(exc)
        ) from exc
    if hf_config.is_encoder_decoder:
        raise ConfigError(
            "model.arch",
            arch,
            "a decoder-only or encoder-only architecture (gpt2, llama, bert, ...): perflab "
            "generates no decoder inputs",
            "an encoder-decoder model",
        )
    return hf_config


def _own_name(config_class: Any, name: str) -> str:
    """A config attribute under the name the config class stores it (GPT-2: n_embd)."""
    return dict(getattr(config_class, "attribute_map", {}) or {}).get(name, name)


def _local_config(path: str) -> dict[str, Any]:
    from perflab.config.hf import read_local_config

    return read_local_config(path)


def _weights(path: str | None) -> Path | None:
    if path is None:
        return None
    directory = Path(path)
    return directory if any((directory / f).is_file() for f in WEIGHT_FILES) else None


def _check_task(transformers: Any, hf_config: Any, task: str) -> None:
    from transformers.models.auto import modeling_auto

    auto_name, table = TASK_CLASSES[task]
    if hf_config.model_type not in getattr(modeling_auto, table):
        raise ConfigError(
            "model.task",
            task,
            f"a task {hf_config.model_type} has a head for in transformers "
            f"{transformers.__version__} (its {auto_name} has none)",
            f"no {task} head for {hf_config.model_type}",
        )


def _check_attention(auto: Any, hf_config: Any, attn: str) -> None:
    """Build the model on the meta device (no memory, no weights): first with eager
    attention, which every model has, so that sizes it cannot take are named as such;
    then with the implementation asked for, which transformers validates for this model
    class. Either refusal in one line."""
    arch = hf_config.model_type
    for implementation in dict.fromkeys(["eager", attn]):
        try:
            with torch.device("meta"):
                auto.from_config(hf_config, attn_implementation=implementation)
        except Exception as exc:  # noqa: BLE001 - a model that cannot be built is a config error
            if implementation == "eager":
                raise ConfigError(
                    "model.arch",
                    arch,
                    f"sizes and model.config attributes {arch}'s model accepts",
                    _first_line(exc),
                ) from exc
            raise ConfigError(
                "model.attn",
                attn,
                f"an implementation {arch} supports here (eager always)",
                _first_line(exc),
            ) from exc


def _first_line(exc: BaseException) -> str:
    """transformers' message, to its first full stop: the rest is advice on issues (a
    strict config field's error: its cause, the line that says what is wrong)."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    if first.startswith("Validation error for field") and len(lines) > 1:
        first = lines[1]
    return re.split(r"(?<=[a-z0-9_`)])\.\s", first)[0].rstrip(".")[:300]


def _enable_checkpointing(model: Any) -> None:
    """Activation checkpointing, non-reentrant (torch's recommended form, and the one
    that works with inputs that need no gradient); transformers 5 renamed the method."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ConfigError(
            "model.gradient_checkpointing",
            True,
            f"false: {type(model).__name__} does not support it",
            "not supported by this model",
        )
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def checkpointing_enabled(model: Any) -> bool:
    """Whether the model says it checkpoints (transformers 5 renamed the property)."""
    if hasattr(type(model), "is_activation_checkpointing"):
        return bool(model.is_activation_checkpointing)
    return bool(getattr(model, "is_gradient_checkpointing", False))
