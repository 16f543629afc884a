"""What a trial ran on: software versions, hardware, load, and where the user's code came from.

:func:`machine` runs in the trial process, where torch is already imported; the command
line and git state are read in the launching process (perflab.experiment.invocation).
Nothing here dumps environment variables: a record should not reveal more than it needs.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from importlib import metadata
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


@functools.cache
def machine() -> dict[str, Any]:
    """Versions and hardware, read in the trial process (torch is imported there); once
    per process, so that a warm worker's later trials do not read them again."""
    import torch

    cuda = torch.cuda.is_available()
    count = torch.cuda.device_count() if cuda else 0
    devices = [torch.cuda.get_device_name(i) for i in range(count)]
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        # read from package metadata: importing triton costs seconds and is not needed
        "triton": _package_version("triton"),
        "transformers": _package_version("transformers"),
        "hydra": _package_version("hydra-core"),
        "perflab": _package_version("perflab"),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(affinity) if affinity is not None else None,
        "cuda_devices": devices,
        "cuda_driver": _cuda_driver() if cuda else None,
    }


def _cuda_driver() -> str | None:
    """The driver's version: from NVML in this process where it answers (no process to
    start), else from nvidia-smi."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - no module, no driver, an old NVML: ask nvidia-smi
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None
