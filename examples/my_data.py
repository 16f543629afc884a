"""Data of your own, for docs/your-model.md: run perflab from this directory (``cd
examples``), where perflab finds this file as ``my_data``.

Each function is a dataset factory (data.dataset) returning a map-style torch Dataset;
its keyword arguments come from data.dataset_args. What an item may be:

- ``(input, target)``: the input a tensor (``model(x)``), a tuple of tensors
  (``model(*inputs)``) or a dict (``model(**inputs)``);
- a dict alone, as a tokenized Hugging Face dataset yields it: the model's keyword
  arguments, its ``labels`` among them, which are also the batch's target; a model that
  computes its own loss from them (every transformers model does) is trained on it.

``pad`` is a collate function (data.collate) for items of different lengths.
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class Sequences(Dataset):
    """``(x, label)``: x a [length, features] float tensor, a pure function of the index."""

    def __init__(self, n: int, length: int, features: int, num_classes: int) -> None:
        self.n, self.length, self.features, self.num_classes = n, length, features, num_classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        x = torch.randn(self.length, self.features, generator=g)
        return x, torch.randint(0, self.num_classes, (), generator=g)


def sequences(n: int = 256, length: int = 16, features: int = 32, num_classes: int = 4) -> Dataset:
    """Items ``(x, label)``: the model gets one tensor (my_model.build's input)."""
    return Sequences(n, length, features, num_classes)


class TwoInputs(Dataset):
    """Items with two inputs: a dict of keyword arguments or a tuple of positional ones."""

    def __init__(self, n: int, as_dict: bool) -> None:
        self.n, self.as_dict = n, as_dict

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[object, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        image, extra = torch.randn(3, 16, 16, generator=g), torch.randn(8, generator=g)
        label = torch.randint(0, 4, (), generator=g)
        return ({"image": image, "extra": extra} if self.as_dict else (image, extra)), label


def keyword_inputs(n: int = 256) -> Dataset:
    """Items ``({"image": ..., "extra": ...}, label)``: the step calls
    ``model(image=..., extra=...)``."""
    return TwoInputs(n, as_dict=True)


def positional_inputs(n: int = 256) -> Dataset:
    """Items ``((image, extra), label)``: the step calls ``model(image, extra)``."""
    return TwoInputs(n, as_dict=False)


class ImageAndExtra(torch.nn.Module):
    """A model of two inputs, for keyword_inputs and positional_inputs."""

    def __init__(self, num_classes: int = 4) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.extra = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, num_classes)

    def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        pooled = self.conv(image).relu().mean((2, 3))
        return self.head(pooled + self.extra(extra))


def image_and_extra(num_classes: int = 4) -> torch.nn.Module:
    return ImageAndExtra(num_classes)


class Tokenized(Dataset):
    """Items as a tokenized Hugging Face dataset yields them: ``{"input_ids": ...,
    "labels": ...}`` of different lengths (between min_len and max_len), labels the
    ids themselves (a causal LM shifts them)."""

    def __init__(self, n: int, vocab_size: int, min_len: int, max_len: int) -> None:
        self.n, self.vocab_size, self.min_len, self.max_len = n, vocab_size, min_len, max_len

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        length = int(torch.randint(self.min_len, self.max_len + 1, (), generator=g))
        ids = torch.randint(0, self.vocab_size, (length,), generator=g)
        return {"input_ids": ids, "labels": ids.clone()}


def tokenized(
    n: int = 256, vocab_size: int = 1024, min_len: int = 24, max_len: int = 64
) -> Dataset:
    return Tokenized(n, vocab_size, min_len, max_len)


# the label of a position the loss skips: the ignore_index of transformers' losses
IGNORED = -100


def pad(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """A collate function: pads every item to the longest of the batch, with an attention
    mask (1 for a token, 0 for padding) and the padded labels ignored by the loss, as
    transformers' DataCollatorWithPadding does."""
    longest = max(len(item["input_ids"]) for item in items)
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    mask = torch.zeros(len(items), longest, dtype=torch.long)
    labels = torch.full((len(items), longest), IGNORED, dtype=torch.long)
    for row, item in enumerate(items):
        n = len(item["input_ids"])
        ids[row, :n], mask[row, :n], labels[row, :n] = item["input_ids"], 1, item["labels"]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}
