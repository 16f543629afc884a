"""Synthetic data: deterministic from the seed, with real per-sample CPU work.

Every sample is a pure function of (seed, index), so any process, worker or variant
sees the same data. ``augment_passes`` rounds of decode/augment-like tensor work per
sample give the loader a real cost that ``num_workers`` can parallelise and
``pin_memory`` can speed up the copy of.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler, default_collate

from perflab.config.compose import instantiation_problem
from perflab.config.schema import InputSpec, TargetSpec, TokenInputSpec
from perflab.errors import ConfigError


class SyntheticDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(
        self,
        input_spec: InputSpec,
        target_spec: TargetSpec,
        num_samples: int,
        seed: int,
        augment_passes: int,
    ) -> None:
        self.input_spec = input_spec
        self.target_spec = target_spec
        self.num_samples = num_samples
        self.seed = seed
        self.augment_passes = augment_passes

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        shape = list(self.input_spec.shape)
        # "Decode": bytes to floats, the way an image decoder ends.
        x = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8).float().div_(255.0)
        for _ in range(self.augment_passes):
            x = _augment(x, gen)
        x = (x - x.mean()) / (x.std(correction=0) + 1e-6)
        if self.input_spec.dtype == "int64":
            x = (x.abs() * 1000).long().remainder_(self.input_spec.high)
        return x, self._target(gen)

    def _target(self, gen: torch.Generator) -> torch.Tensor:
        spec = self.target_spec
        if spec.kind == "classes":
            return torch.randint(0, spec.num_classes, list(spec.shape), generator=gen)
        # regression and none: a scalar per sample; the loss reshapes as needed
        return torch.randn([], generator=gen)


# the share of a masked LM's positions that are masked, as in BERT's pre-training
MASKED_SHARE = 0.15
# the label of a position the loss skips: the ignore_index of transformers' losses and
# of torch's cross_entropy
IGNORED = -100


class TokenDataset(Dataset[tuple[dict[str, torch.Tensor], torch.Tensor]]):
    """model=hf's samples, in Hugging Face's convention: ``({input_ids, attention_mask,
    labels}, labels)``, a pure function of (seed, index) as the synthetic samples are.
    The model computes its own loss from the labels in the dict (model.loss=auto); the
    target beside it serves perflab's loss (model.loss=target)."""

    def __init__(
        self, input_spec: TokenInputSpec, target_spec: TargetSpec, num_samples: int, seed: int
    ) -> None:
        self.input_spec = input_spec
        self.target_spec = target_spec
        self.num_samples = num_samples
        self.seed = seed

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        spec = self.input_spec
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        ids = torch.randint(0, spec.high, list(spec.shape), generator=gen)
        if spec.task == "causal_lm":
            labels = ids.clone()  # the model shifts them: each position predicts the next
        elif spec.task == "masked_lm":
            labels = torch.full_like(ids, IGNORED)
            count = max(1, round(MASKED_SHARE * ids.numel()))
            where = torch.randperm(ids.numel(), generator=gen)[:count]
            labels.view(-1)[where] = ids.view(-1)[where]
            assert spec.mask_id is not None  # HFConfig sets it for masked_lm
            ids.view(-1)[where] = spec.mask_id
        else:
            target = self.target_spec
            labels = torch.randint(0, target.num_classes, list(target.shape), generator=gen)
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
        return batch, labels


def _augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One round of flip, brightness jitter plus noise, a 3-tap blur along the last axis, clamp."""
    if torch.rand((), generator=gen) < 0.5:
        x = x.flip(-1)
    x = x * (0.8 + 0.4 * torch.rand((), generator=gen)) + 0.05 * torch.randn(x.shape, generator=gen)
    x = (x.roll(1, -1) + x + x.roll(-1, -1)) / 3.0
    return x.clamp_(0.0, 1.0)


class InfiniteSampler(Sampler[int]):
    """Seeded permutations, one after another, forever.

    An epoch boundary inside a timed window would stall the loader (a new iterator
    restarts prefetching), so the loader never ends.
    """

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator().manual_seed(self.seed)
        while True:
            yield from torch.randperm(self.size, generator=gen).tolist()


def build_dataset(
    dataset_target: str | None,
    dataset_args: dict[str, Any],
    input_spec: InputSpec,
    target_spec: TargetSpec,
    num_samples: int,
    seed: int,
    augment_passes: int,
) -> Dataset[Any]:
    if dataset_target is None and isinstance(input_spec, TokenInputSpec):
        return TokenDataset(input_spec, target_spec, num_samples, seed)
    if dataset_target is None:
        return SyntheticDataset(input_spec, target_spec, num_samples, seed, augment_passes)
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate({"_target_": dataset_target, **dataset_args}, _convert_="all")
    except InstantiationException as exc:  # as build_model says it of model._target_
        raise ConfigError(
            "data.dataset",
            dataset_target,
            f"an importable factory accepting {sorted(dataset_args) or 'no arguments'} "
            "(pass them as +data.dataset_args.NAME=VALUE)",
            instantiation_problem(exc),
        ) from exc


# the key of a dict item (or batch) that holds its target: Hugging Face's convention, as a
# tokenized batch carries it
LABELS = "labels"


class Pairs:
    """A collate function whose batches are ``(input, target)`` pairs, whatever the
    dataset's items are: the collate (torch's default_collate, or data.collate) makes the
    batch, then

    - a dict (any mapping: transformers' BatchEncoding too) is the model's keyword
      arguments, labels included, and its target is its ``labels``, None without them
      (the model computes its own loss from them: model.loss=auto takes it);
    - a pair ``(input, target)`` stays as it is, with an input mapping made a dict, so
      that the step calls ``model(**input)``; a tuple or list input is called as
      ``model(*input)``, a tensor as ``model(input)``.

    It runs where the batch is made (in the DataLoader's workers with num_workers > 0),
    so it is a class, not a closure: workers receive it pickled."""

    def __init__(self, collate: Callable[[list[Any]], Any] | None = None) -> None:
        self.collate = collate

    def __call__(self, items: list[Any]) -> tuple[Any, Any]:
        batch = (self.collate or default_collate)(items)
        return as_pair(batch)


def as_pair(batch: Any) -> tuple[Any, Any]:
    """A batch as ``(input, target)`` (Pairs)."""
    if isinstance(batch, Mapping):
        inputs = dict(batch)
        return inputs, inputs.get(LABELS)
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        x, y = batch
        return (dict(x) if isinstance(x, Mapping) else x), y
    raise ConfigError(
        "data.dataset",
        "(its batches)",
        "items that are (input, target) pairs, or dicts of the model's keyword arguments "
        f"(the target under {LABELS!r}), or a data.collate that makes batches of either",
        f"a batch is a {type(batch).__name__}"
        + (f" of {len(batch)}" if isinstance(batch, (tuple, list)) else ""),
    )


def build_loader(
    dataset: Dataset[Any],
    batch_size: int,
    num_workers: int,
    pin_memory: bool,
    seed: int,
    collate: Callable[[list[Any]], Any] | None = None,
) -> DataLoader[Any]:
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=InfiniteSampler(len(dataset), seed),  # type: ignore[arg-type]
        num_workers=num_workers,
        pin_memory=pin_memory,
        collate_fn=Pairs(collate),
        # Workers must survive for the whole trial: the sampler never ends, and a restart
        # would put worker start-up inside the timed window.
        persistent_workers=num_workers > 0,
        drop_last=True,
    )


def probe_batch(
    dataset: Dataset[Any], batch_size: int, collate: Callable[[list[Any]], Any] | None = None
) -> tuple[Any, Any]:
    """The fixed batch every variant's numerics probe uses: samples 0..batch_size-1, as
    ``(input, target)`` (Pairs)."""
    items = [dataset[i % len(dataset)] for i in range(batch_size)]  # type: ignore[arg-type]
    return Pairs(collate)(items)
