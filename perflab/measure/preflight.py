"""What a sweep asks a trial process before measuring anything: do this variant's
settings resolve on this machine, and do its factories import and build? An impossible
setting or a broken factory is a ConfigError (exit 2, nothing measured); unwise settings
come back as warnings."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import torch

from perflab.config.schema import PerflabConfig
from perflab.config.user_code import user_code
from perflab.errors import ConfigError
from perflab.measure.knobs import (
    apply_channels_last,
    autocast,
    build_optimizer,
    four_d_tensors,
)
from perflab.measure.resolve import Resolved, resolve
from perflab.measure.steps import (
    Prepared,
    UserStep,
    call_model,
    make_input_fn,
    step_output,
    to_device,
)
from perflab.process.trial_request import TrialRequest
from perflab.workloads import Workload, build_workload, check_factories, locate
from perflab.workloads.outputs import output_tensor


def user_code_importable(request: TrialRequest) -> None:
    cwd = request.invocation.cwd
    if cwd and cwd not in sys.path:
        sys.path.insert(0, cwd)  # the user's own factories live beside their command


def check_settings(request: TrialRequest) -> list[str]:
    """Resolve the config on this machine without timing anything: raises ConfigError
    for impossible settings (sizes that cannot fit among them), factories that cannot
    be imported or built with their arguments, or a user's model whose output or loss
    does not fit (check_probe_batch); returns the warnings for unwise ones."""
    with _marked_as_check():
        user_code_importable(request)
        resolved = resolve(request.config)
        for field_name, target in factory_fields(request.config).items():
            _import_factory(field_name, target)
        check_factories(request.config)
        cfg = request.config
        if (
            cfg.data.dataset
            or cfg.data.collate
            or cfg.step
            or not cfg.model._target_.startswith(BUILT_IN_MODELS)
        ):
            check_probe_batch(cfg, resolved)
    return resolved.warnings


@contextlib.contextmanager
def _marked_as_check() -> Iterator[None]:
    """PROCESS_ENV=check while the check runs the user's code, so that the code can tell
    it from a trial (and skip what it does once per trial); restored afterwards, as a
    test may run the check in its own process and start trials after it."""
    before = os.environ.get(PROCESS_ENV)
    os.environ[PROCESS_ENV] = "check"
    try:
        yield
    finally:
        if before is None:
            del os.environ[PROCESS_ENV]
        else:
            os.environ[PROCESS_ENV] = before


def _shapes(value: Any) -> str:
    """The shapes of a batch's tensors, for a message."""
    if isinstance(value, torch.Tensor):
        return str(list(value.shape))
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_shapes(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_shapes(v) for v in value)
    return type(value).__name__


# set to "check" in the settings check's process (docs/configuration.md, "Your own model")
PROCESS_ENV = "PERFLAB_PROCESS"
# perflab's own models: their output and loss are known to fit (tests/test_workloads.py),
# so the settings check does not build them
BUILT_IN_MODELS = ("perflab.workloads.models.", "perflab.workloads.spin.")


def check_probe_batch(cfg: PerflabConfig, resolved: Resolved) -> None:
    """Build the user's model and run its probe batch through it once, forward and loss,
    as the step will: an output that model.output cannot pick from, a loss that is not a
    scalar or cannot pair the output with the target, or a forward that raises, is a
    ConfigError naming the field before anything is measured, rather than a failed
    first trial after other variants have spent the budget. A model or loss that fails
    in any other way (raises, runs out of memory, crashes, hangs) is left to the trial,
    which records it as failed while the sweep goes on: that may depend on the batch or
    the machine, not only on the config. With a step of the user's own (``step=``) the
    step runs instead of perflab's forward and loss (_run_user_step)."""
    try:
        workload = build_workload(cfg, cfg.seed, batches=False)
        device = torch.device(resolved.device)
        model = workload.model.to(device).train(cfg.mode == "train")
        x, y = workload.probe
        x, y = to_device(x, device, False), to_device(y, device, False)
        if cfg.channels_last and not four_d_tensors(x):
            raise ConfigError(
                "channels_last",
                True,
                "true only for batches holding a 4-D float tensor ([N, C, H, W])",
                f"no tensor of this workload's batch is 4-D ({_shapes(x)})",
            )
        if cfg.step:  # the user's step computes (or not) perflab's loss: run it instead
            return _run_user_step(cfg, resolved, workload, model, (x, y))
        with torch.set_grad_enabled(cfg.mode == "train"), autocast(resolved):
            out = call_model(model, x)
            loss = workload.loss_fn(out, y)
            output_tensor(out, cfg.model.output)
    except ConfigError:
        raise
    except Exception:  # noqa: BLE001 - the trial records it, with its traceback
        return
    if cfg.mode == "train" and not loss.requires_grad:
        raise ConfigError(
            "model.loss",
            cfg.model.loss,
            "a loss computed from the model's output, so that backward reaches its weights",
            "the loss does not depend on the model's parameters",
        )


def _run_user_step(
    cfg: PerflabConfig, resolved: Resolved, workload: Workload, model: Any, batch: Any
) -> None:
    """A user's step (step=), built as a trial builds it, run once on the probe batch:
    a factory that returns no step, a phase name perflab cannot record, or a return that
    holds no tensor for the numerics check is a ConfigError naming ``step``. Not
    compiled here: compile's first call would cost the check seconds."""
    device = torch.device(resolved.device)
    model = apply_channels_last(model, cfg.channels_last)
    optimizer = build_optimizer(cfg, model) if cfg.mode == "train" else None
    input_fn = make_input_fn(cfg, device)
    prep = Prepared(workload, model, model, optimizer, device, input_fn)
    step_output(UserStep(cfg, resolved, prep).run((input_fn(batch[0]), batch[1])), cfg)


def factory_fields(cfg: PerflabConfig) -> dict[str, str]:
    """The functions a config names, by field (perflab.config.user_code)."""
    return user_code(cfg)


# what a factory whose module ends the process on import is told to be instead
IMPORTS_CLEANLY = "a factory whose module imports without ending the process"


def _import_factory(field_name: str, target: str) -> None:
    """Import a factory's module. sys.exit() there raises SystemExit, which no handler
    below the process's own expects: it would end the check with a traceback."""
    try:
        locate(target)
    except SystemExit as exc:
        raise ConfigError(
            field_name, target, IMPORTS_CLEANLY, f"{exit_status(exc)} while importing it"
        ) from None
    except Exception:  # noqa: BLE001 - check_factories names the problem, as it always has
        return


def exit_status(exc: SystemExit) -> str:
    """As perflab.process.isolation.describe_exit says it of a process: sys.exit() and
    sys.exit(None) exit 0, sys.exit("text") prints the text and exits 1."""
    if exc.code is None or isinstance(exc.code, int):
        return f"exited with code {exc.code or 0}"
    return f"exited with code 1 ({exc.code})"


def import_factory(job: tuple[TrialRequest, str]) -> None:
    """Import one factory of a request, alone in its process: perflab.experiment.schedule.check_all
    runs it for each factory after a check process died (os._exit, a signal), to name the
    factory whose import ends the process."""
    request, field_name = job
    user_code_importable(request)
    locate(factory_fields(request.config)[field_name])
