"""Whether CUDA is there, as a trial process will see it: the answer to device=auto.

Asked once per process by the command that starts a sweep (perflab.cli hands it to
perflab.config.devices), never by composing or validating a config: answering starts a
process and asks the NVIDIA driver."""

from __future__ import annotations

import functools


@functools.cache
def cuda_available() -> bool:
    """``torch.cuda.is_available()`` as a trial process will see it, asked once per
    process without importing torch here (the launching process stays torch-free): no
    NVIDIA GPU for NVML means no CUDA, at once; otherwise a child of the trial processes'
    fork server, which has torch loaded anyway, answers."""
    if _nvml_gpu_count() == 0:
        return False
    from perflab.process.isolation import run_isolated

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
