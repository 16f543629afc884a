"""Build what a trial runs: the model, its data, its loss, and the fixed probe batch."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from perflab.config.compose import instantiation_problem
from perflab.config.schema import ModelConfig, PerflabConfig, model_factory_kwargs
from perflab.config.user_code import user_code
from perflab.errors import ConfigError
from perflab.workloads import outputs
from perflab.workloads.data import build_dataset, build_loader, probe_batch
from perflab.workloads.function import make_inputs as make_function_inputs
from perflab.workloads.outputs import LossFn


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
        if isinstance(exc.__cause__, ConfigError):
            raise exc.__cause__ from None  # the factory's own words on one of its fields
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
        module = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            ours = exc.name is None or f"{module}.".startswith(f"{exc.name}.")
            if not ours:
                raise  # the module exists but needs one that does not: that is the cause
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
    """Import every function of the user's the config names (perflab.config.user_code:
    the model's and dataset's factories, the collate function, the loss, the evidence
    checks) and bind its arguments without calling it, so that one that cannot be
    called stops a sweep before anything is measured."""
    import inspect

    if cfg.model.checkpoint and not Path(cfg.model.checkpoint).is_file():
        raise ConfigError(
            "model.checkpoint",
            cfg.model.checkpoint,
            "an existing state_dict file (relative paths: from where perflab runs)",
            "no such file",
        )
    for field_name, target in user_code(cfg).items():
        factory = _importable(field_name, target)
        args, kwargs = _call_of(cfg, field_name)
        if args is None:
            continue  # a function perflab does not call with arguments of the config's
        try:
            inspect.signature(factory).bind(*args, **kwargs)
        except TypeError as exc:  # the arguments do not fit the signature
            wanted = f"fn({', '.join(args)})" if args else f"a factory accepting {sorted(kwargs)}"
            raise ConfigError(field_name, target, wanted, str(exc)) from exc
        except ValueError as exc:  # no signature to bind (a builtin): called as it is
            if "no signature found" not in str(exc):
                raise


def _call_of(cfg: PerflabConfig, field_name: str) -> tuple[Any, dict[str, Any]]:
    """How perflab calls the function a field names: (positional argument names, keyword
    arguments), or (None, {}) for a field it does not know the call of (only imported)."""
    if field_name == "model._target_":
        return (), model_factory_kwargs(cfg.model)
    if field_name == "data.dataset":
        return (), dict(cfg.data.dataset_args)
    if field_name == "data.collate":
        return ("items",), {}
    if field_name == "model.loss":
        return ("output", "target"), {}
    if field_name == "model.inputs":
        return ("batch_size",), {}
    if field_name == "step":
        return ("ctx",), {}
    if field_name.startswith("schedule.evidence."):
        return ("model",), {}
    return None, {}


def _importable(field_name: str, target: str) -> Any:
    """The object ``target`` names, imported; ConfigError naming the field and the real
    cause when it cannot be: torchvision on a torch it was not built for once read
    "Error loading 'torchvision.models.resnet18':" with its cause, a RuntimeError
    ("operator torchvision::nms does not exist"), nowhere on the line."""
    try:
        return locate(target)
    except (ImportError, AttributeError) as exc:  # no such module or function
        cause = exc.__cause__ or exc.__context__
        why = _first_line(exc) + (
            f" ({type(cause).__name__}: {_first_line(cause)})" if cause else ""
        )
        raise ConfigError(field_name, target, "an importable module.function", why) from exc
    except Exception as exc:  # noqa: BLE001 - the module raised while it was imported
        raise ConfigError(
            field_name,
            target,
            "a factory whose module imports",
            f"importing it raised {type(exc).__name__}: {_first_line(exc)}",
        ) from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def make_loss(model: ModelConfig) -> LossFn:
    """The step's loss (perflab.workloads.outputs.make_loss), with the user's function
    imported when model.loss names one."""
    user = locate(model.loss) if model.loss not in ("auto", "model", "target") else None
    return outputs.make_loss(model, user)


def _memory_batches(batch: Any) -> Iterator[Any]:
    while True:
        yield batch


def _function_workload(
    cfg: PerflabConfig, model: nn.Module, inputs: str, seed: int, batches: bool
) -> Workload:
    """model=function with model.inputs: make_inputs(batch_size) builds the function's
    inputs, seeded, once for the probe and once for the steps (a function that writes
    into its inputs leaves the probe's alone); like data=memory, the trial moves them to
    the device once, outside any timing. The target is zeros: nothing to learn."""
    target = torch.zeros(cfg.batch_size)
    probe = (make_function_inputs(inputs, cfg.batch_size, seed), target)
    source: Iterator[Any] = iter(())
    if batches:
        source = _memory_batches(
            (make_function_inputs(inputs, cfg.batch_size, seed), target.clone())
        )
    return Workload(model, make_loss(cfg.model), source, None, probe)


def build_workload(cfg: PerflabConfig, seed: int, batches: bool = True) -> Workload:
    """The model, its data and loss, and the probe batch. ``batches=False``: no batches
    and no DataLoader (no worker processes started): the settings check needs the probe
    batch only."""
    torch.manual_seed(seed)
    model = build_model(cfg)
    inputs = getattr(cfg.model, "inputs", None)
    if inputs:  # model=function's make_inputs: one batch, built once
        return _function_workload(cfg, model, inputs, seed, batches)
    dataset = build_dataset(
        cfg.data.dataset,
        dict(cfg.data.dataset_args),
        cfg.model.input,
        cfg.model.target,
        cfg.data.num_samples,
        seed,
        cfg.data.augment_passes,
    )
    collate = locate(cfg.data.collate) if cfg.data.collate else None
    probe = probe_batch(dataset, cfg.batch_size, collate)
    loader = None
    source: Iterator[Any] = iter(())
    if batches and cfg.data.source == "loader":
        loader = build_loader(
            dataset, cfg.batch_size, cfg.num_workers, cfg.pin_memory, seed, collate
        )
        source = iter(loader)
    elif batches:
        # The memory source reuses one batch; the trial moves it to the device once.
        source = _memory_batches(probe_batch(dataset, cfg.batch_size, collate))
    return Workload(model, make_loss(cfg.model), source, loader, probe)


# The public face: what a trial builds its workload with, and the modules other packages
# use (model=hf's, the outputs' loss). tests/test_layout.py checks that no other package
# imports a module not listed.
__all__ = [
    "Workload",
    "build_model",
    "build_workload",
    "check_factories",
    "load_checkpoint",
    "locate",
    "make_loss",
    "hf",
    "outputs",
]
