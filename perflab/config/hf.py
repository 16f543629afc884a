"""What model=hf's config can know without transformers: the sizes perflab gives a model
built from its config class, and what a local directory's config.json says (plain JSON,
read in the sweep process, so that a bad path stops a sweep before it starts).

The model itself is built in the trial process (perflab.workloads.hf), the only place
that imports transformers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from perflab.errors import ConfigError
from perflab.formats.json_file import read_json

# perflab's sizes for a model built from model.arch, for the size fields left null: a
# training step of the tiny GPT-2 (batch 32, seq_len 64) takes tens of milliseconds on
# one CPU core, where the architecture's own defaults (GPT-2 small: 12 layers of 768,
# 124M parameters) take seconds


@dataclass(frozen=True)
class ModelSizes:
    """model=hf's size fields (model.layers, .hidden, .heads, .vocab_size); None leaves a
    size to config.json (with model.path) or to perflab's tiny ones."""

    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    vocab_size: int | None = None

    def items(self) -> Iterator[tuple[str, int | None]]:
        """Each size as (its field's name, its value), in the order above."""
        return ((f.name, getattr(self, f.name)) for f in fields(self))

    def or_tiny(self) -> ModelSizes:
        """These sizes, TINY's where one is None (a model built from its config class)."""
        return ModelSizes(*(getattr(TINY, name) if v is None else v for name, v in self.items()))


@dataclass(frozen=True)
class TinySizes:
    """perflab's sizes of a model built from model.arch (ModelSizes' fields, every one set)."""

    layers: int = 2
    hidden: int = 64
    heads: int = 2
    vocab_size: int = 1024


TINY = TinySizes()
# what the intermediate (MLP) width of a config with one becomes when perflab sets the
# width: 4x, as in GPT-2 and BERT (Llama's config class keeps 11008 otherwise)
INTERMEDIATE_PER_HIDDEN = 4
CONFIG_FILE = "config.json"
LOCAL_DIR = (
    "a local directory holding a Hugging Face config.json (relative paths: from where perflab runs)"
)


def read_local_config(path: str) -> dict[str, Any]:
    """The config.json of ``model.path``, checked for what perflab needs of it."""
    directory = Path(path)
    if not directory.is_dir():
        raise ConfigError("model.path", path, LOCAL_DIR, "no such directory")
    try:
        data = read_json(directory / CONFIG_FILE)
    except FileNotFoundError:
        raise ConfigError("model.path", path, LOCAL_DIR, f"no {CONFIG_FILE} there") from None
    except (OSError, ValueError) as exc:
        problem = f"{CONFIG_FILE} cannot be read: {str(exc).splitlines()[0][:200]}"
        raise ConfigError("model.path", path, LOCAL_DIR, problem) from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise ConfigError("model.path", path, LOCAL_DIR, f"{CONFIG_FILE} names no model_type")
    return data


def vocabulary(vocab_size: int | None, local: Mapping[str, Any] | None, path: str | None) -> int:
    """The vocabulary the inputs are drawn from: model.vocab_size, else config.json's,
    else perflab's tiny size."""
    if vocab_size is not None:
        return vocab_size
    if local is None:
        return TINY.vocab_size
    size = local.get("vocab_size")
    if type(size) is not int or size < 1:
        raise ConfigError(
            "model.path",
            path,
            f"a text model's {CONFIG_FILE}, with a vocab_size (or set model.vocab_size)",
            f"{CONFIG_FILE} has no vocab_size",
        )
    return size


def mask_id(
    chosen: int | None,
    overrides: Mapping[str, Any],
    local: Mapping[str, Any] | None,
    vocab_size: int,
) -> int:
    """The id that masks a masked LM's input positions: model.input.mask_id, else the
    config's mask_token_id (model.config's, then config.json's), else the last id of the
    vocabulary (a mask token is a tokenizer's, which perflab does without)."""
    for candidate in (chosen, overrides.get("mask_token_id"), (local or {}).get("mask_token_id")):
        if type(candidate) is int:
            if not 0 <= candidate < vocab_size:
                raise ConfigError(
                    "model.input.mask_id",
                    candidate,
                    f"an id in the vocabulary, 0 to {vocab_size - 1}",
                    "outside the vocabulary",
                )
            return candidate
    return vocab_size - 1
