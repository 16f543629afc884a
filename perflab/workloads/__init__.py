"""Build what a trial runs: the model, its data, its loss, and the fixed probe batch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from perflab.config.compose import instantiation_problem
from perflab.config.schema import PerflabConfig, TargetSpec, model_factory_kwargs
from perflab.errors import ConfigError
from perflab.workloads.data import build_dataset, build_loader, probe_batch

LossFn = Callable[[Any, torch.Tensor], torch.Tensor]


@dataclass
class Workload:
    model: nn.Module
    loss_fn: LossFn
    # yields (input, target) batches on the host; the trial moves them to the device
    batches: Iterator[Any]
    # the DataLoader behind batches, or None for data.source=memory
    loader: torch.utils.data.DataLoader[Any] | None
    # the fixed (input, target) batch of the numerics probe, on the host
    probe: Any


def build_model(cfg: PerflabConfig) -> nn.Module:
    """Call the model factory; a factory that cannot take its arguments is a config error."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    kwargs = model_factory_kwargs(cfg.model)
    try:
        model = instantiate({"_target_": cfg.model._target_, **kwargs}, _convert_="all")
    except InstantiationException as exc:
        raise ConfigError(
            "model._target_",
            cfg.model._target_,
            f"an importable factory accepting {sorted(kwargs) or 'no arguments'} "
            "(start from model=custom and pass arguments as +model.args.NAME=VALUE)",
            instantiation_problem(exc),
        ) from exc
    if not isinstance(model, nn.Module):
        raise ConfigError(
            "model._target_",
            cfg.model._target_,
            "a factory returning a torch.nn.Module",
            f"returned {type(model).__name__}",
        )
    if cfg.model.checkpoint:
        load_checkpoint(model, cfg.model.checkpoint)
    return model


def locate(path: str) -> Any:
    """Import ``package.module.attr`` quietly (hydra's locator logs multi-line errors)."""
    import importlib

    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"no importable module in {path!r}")


def load_checkpoint(model: nn.Module, path: str) -> None:
    """Load a state_dict into the built model. ``weights_only=True``: the file may hold
    tensors and plain containers only; a pickle that would run code is refused, never
    executed. A {"state_dict": ...} wrapper, as training loops often save, is unwrapped."""
    import pickle

    allowed = "a state_dict saved with torch.save (tensors only: loaded with weights_only=True)"
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError as exc:
        raise ConfigError("model.checkpoint", path, allowed, "no such file") from exc
    except (pickle.UnpicklingError, RuntimeError, OSError, EOFError) as exc:
        problem = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError("model.checkpoint", path, allowed, problem[:300]) from exc
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise ConfigError("model.checkpoint", path, allowed, f"holds a {type(state).__name__}")
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        lines = str(exc).strip().splitlines()
        raise ConfigError(
            "model.checkpoint",
            path,
            "a state_dict of this model (same parameter names and shapes)",
            " ".join(line.strip() for line in lines[:3])[:300],
        ) from exc


def check_factories(cfg: PerflabConfig) -> None:
    """Import the model (and dataset) factory and bind its arguments without calling it,
    so a factory that cannot be built stops a sweep before anything is measured."""
    import inspect

    if cfg.model.checkpoint and not Path(cfg.model.checkpoint).is_file():
        raise ConfigError(
            "model.checkpoint",
            cfg.model.checkpoint,
            "an existing state_dict file (relative paths: from where perflab runs)",
            "no such file",
        )
    targets = [("model._target_", cfg.model._target_, model_factory_kwargs(cfg.model))]
    if cfg.data.dataset:
        targets.append(("data.dataset", cfg.data.dataset, dict(cfg.data.dataset_args)))
    for field_name, target, kwargs in targets:
        try:
            inspect.signature(locate(target)).bind(**kwargs)
        except TypeError as exc:  # the arguments do not fit the signature
            raise ConfigError(
                field_name, target, f"a factory accepting {sorted(kwargs)}", str(exc)
            ) from exc
        except (ImportError, ValueError, AttributeError) as exc:  # not importable
            raise ConfigError(
                field_name, target, "an importable module.function", str(exc).splitlines()[0]
            ) from exc


def make_loss(target: TargetSpec) -> LossFn:
    def classes(out: Any, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out.flatten(0, -2), y.flatten())

    def regression(out: Any, y: torch.Tensor) -> torch.Tensor:
        y = y.view(y.shape[0], *([1] * (out.dim() - 1))).expand_as(out)
        return nn.functional.mse_loss(out.float(), y.float())

    def mean(out: Any, y: torch.Tensor) -> torch.Tensor:
        return out.float().mean()

    return {"classes": classes, "regression": regression, "none": mean}[target.kind]


def _memory_batches(batch: Any) -> Iterator[Any]:
    while True:
        yield batch


def build_workload(cfg: PerflabConfig, seed: int) -> Workload:
    torch.manual_seed(seed)
    model = build_model(cfg)
    dataset = build_dataset(
        cfg.data.dataset,
        dict(cfg.data.dataset_args),
        cfg.model.input,
        cfg.model.target,
        cfg.data.num_samples,
        seed,
        cfg.data.augment_passes,
    )
    probe = probe_batch(dataset, cfg.batch_size)
    loader = None
    if cfg.data.source == "loader":
        loader = build_loader(dataset, cfg.batch_size, cfg.num_workers, cfg.pin_memory, seed)
        batches: Iterator[Any] = iter(loader)
    else:
        # The memory source reuses one batch; the trial moves it to the device once.
        batches = _memory_batches(probe_batch(dataset, cfg.batch_size))
    return Workload(model, make_loss(cfg.model.target), batches, loader, probe)
