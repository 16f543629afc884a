"""Defaults by device.

The fields a user does not set take the defaults of the device the trials run on
(docs/configuration.md, "Defaults by device"). Hydra composes the config in the
launching process, before any trial, so the choice is made there: `device` is also a
config group (conf/device/) whose option the defaults list reads, and device=auto asks
whether CUDA is there. Whatever the user sets wins: a group chosen on the command line
(model=convnet) replaces the interpolation in conf/perflab.yaml, a value
(model.d_model=512) replaces the ${perflab.by_device:...} call in conf/model/.
"""

from __future__ import annotations

import functools
from typing import Any

# The group options each device's defaults choose. cpu: the defaults perflab always had.
# cuda: on an H100 those measured the data loader, not the GPU (the main command's convnet
# step waited 14.0 ms of 20.7 ms for the synthetic loader, NVML utilisation 1-3 %, and AMP
# read EQUIVALENT); the transformer at its cuda sizes with data=memory ran fp32 at
# 56.9 ms and bf16 at 8.9 ms a step, data wait 0.1 ms, utilisation 90-100 %.
DEVICE_DEFAULTS: dict[str, dict[str, str]] = {
    "cpu": {"model": "convnet", "data": "synthetic"},
    "cuda": {"model": "transformer", "data": "memory"},
}


@functools.cache
def cuda_available() -> bool:
    """``torch.cuda.is_available()`` as a trial process will see it, asked once per
    process without importing torch here (the launching process stays torch-free): no
    NVIDIA GPU for NVML means no CUDA, at once; otherwise a child of the trial processes'
    fork server, which has torch loaded anyway, answers."""
    if _nvml_gpu_count() == 0:
        return False
    from perflab.isolation import run_isolated

    outcome = run_isolated("perflab.measure.resolve:cuda_available", None, timeout_s=120)
    return outcome.kind == "ok" and outcome.value is True


def _nvml_gpu_count() -> int:
    try:
        import pynvml  # nvidia-ml-py, a dependency; pure Python, fails fast without a driver
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError:
        return 0
    finally:
        pynvml.nvmlShutdown()


def cuda_defaults(device: str) -> bool:
    """Whether a config with this ``device`` takes the cuda defaults."""
    return device == "cuda" or (device == "auto" and cuda_available())


def _default_option(group: str, device: str) -> str:
    """${perflab.default:GROUP,${device}} in conf/perflab.yaml's defaults list."""
    return DEVICE_DEFAULTS["cuda" if cuda_defaults(device) else "cpu"][group]


def by_device(cpu_value: Any, cuda_value: Any, *, _root_: Any) -> Any:
    """${perflab.by_device:CPU_VALUE,CUDA_VALUE}: a size whose default depends on the device."""
    return cuda_value if _root_.cuda_defaults else cpu_value
