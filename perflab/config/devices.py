"""Defaults by device.

The fields a user does not set take the defaults of the device the trials run on
(docs/configuration.md, "Defaults by device"). Hydra composes the config in the
launching process, before any trial, so the choice is made there: `device` is also a
config group (conf/device/) whose option the defaults list reads, and device=auto asks
whether CUDA is there (whoever starts the sweep answers: ask_cuda_with). Whatever the
user sets wins: a group chosen on the command line (model=convnet) replaces the
interpolation in conf/perflab.yaml, a value (model.d_model=512) replaces the
${perflab.by_device:...} call in conf/model/.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perflab.errors import ConfigError

# The group options each device's defaults choose. cpu: the defaults perflab always had.
# cuda: on an H100 those measured the data loader, not the GPU (the main command's convnet
# step waited 14.0 ms of 20.7 ms for the synthetic loader, NVML utilisation 1-3 %, and AMP
# read EQUIVALENT); the transformer at its cuda sizes with data=memory ran fp32 at
# 56.9 ms and bf16 at 8.9 ms a step, data wait 0.1 ms, utilisation 90-100 %.
DEVICE_DEFAULTS: dict[str, dict[str, str]] = {
    "cpu": {"model": "convnet", "data": "synthetic"},
    "cuda": {"model": "transformer", "data": "memory"},
}


# device=auto asks whether CUDA is there, which starts a process (a child of the fork
# server answers as a trial would) and asks the NVIDIA driver. Composing or validating a
# config never asks by itself: the command that starts a sweep hands the question over
# (perflab.cli: perflab.process.cuda_probe.cuda_available) before Hydra composes.
_ask_cuda: Callable[[], bool] | None = None


def ask_cuda_with(question: Callable[[], bool] | None) -> None:
    """Who answers device=auto in this process from now on (None: nobody)."""
    global _ask_cuda
    _ask_cuda = question


def cuda_available() -> bool:
    """The answer of whoever starts the sweep; device=auto is refused where nobody can."""
    if _ask_cuda is None:
        raise ConfigError(
            "device",
            "auto",
            "cpu or cuda (device=auto is resolved by the command that starts a sweep)",
            "cannot be resolved here",
        )
    return _ask_cuda()


def cuda_defaults(device: str) -> bool:
    """Whether a config with this ``device`` takes the cuda defaults."""
    return device == "cuda" or (device == "auto" and cuda_available())


def _default_option(group: str, device: str) -> str:
    """${perflab.default:GROUP,${device}} in conf/perflab.yaml's defaults list."""
    return DEVICE_DEFAULTS["cuda" if cuda_defaults(device) else "cpu"][group]


def by_device(cpu_value: Any, cuda_value: Any, *, _root_: Any) -> Any:
    """${perflab.by_device:CPU_VALUE,CUDA_VALUE}: a size whose default depends on the device."""
    return cuda_value if _root_.cuda_defaults else cpu_value
