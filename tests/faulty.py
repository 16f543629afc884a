"""A model that fails on purpose, for the resilience tests and benchmarks/fault_matrix.py.

    perflab -m model=custom model._target_=tests.faulty.build model.input.shape=[1] \\
        model.target.kind=none data=memory mode=infer +model.args.fault=none,oom \\
        '+schedule.treatments={model.args.fault:none}'

An editable install puts the repository root on sys.path, so trial processes import this
file as ``tests.faulty``. Each forward busy-waits ``step_us`` (like perflab's spin model),
then does its fault: the trial fails at its first call, before anything is timed.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import torch
from torch import nn


def _raise() -> None:
    raise RuntimeError("injected fault")


def _oom() -> None:
    # What the CUDA caching allocator raises; constructible on a CPU-only build too.
    raise torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 20.00 GiB (simulated by tests/faulty.py)"
    )


def _segfault() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def _sigkill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer does


def _hang() -> None:
    time.sleep(3600)


# this model on short trial settings (~0.1 s per trial with trial.min_s=0), as the tests'
# and benchmarks' command lines start
ARGS = (
    "model=custom",
    "model._target_=tests.faulty.build",
    "model.input.shape=[1]",
    "model.target.kind=none",
    "data=memory",
    "mode=infer",
    "profile=off",
    "trial.warmup_steps=2",
    "trial.warmup_s=0",
    "trial.min_steps=5",
)

FAULTS: dict[str, Callable[[], None]] = {
    "none": lambda: None,
    "raise": _raise,
    "oom": _oom,
    "segfault": _segfault,
    "sigkill": _sigkill,
    "hang": _hang,
}


class Faulty(nn.Module):
    def __init__(self, fault: str, step_us: int, started_log: str, hold_while: str) -> None:
        super().__init__()
        self.fault, self.step_ns, self.started_log = FAULTS[fault], step_us * 1000, started_log
        self.hold_while = hold_while
        # a machine that became slower between two sessions of one sweep: the model's
        # arguments are part of the experiment's fingerprint, the environment is not
        self.step_ns += int(os.environ.get("FAULTY_EXTRA_US", "0")) * 1000
        self.scale = nn.Parameter(torch.ones(1))
        self.started = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if os.environ.get("PERFLAB_PROCESS") == "check":
            # perflab's settings check runs the model once on its probe batch, before the
            # trials: the faults (and the trial-start log) are the trials' to show
            return x * self.scale
        if self.started_log and not self.started:
            # one line per trial process that reached its first step
            with open(self.started_log, "a") as f:
                f.write(f"{os.getpid()}\n")
        self.started = True
        while self.hold_while and os.path.exists(self.hold_while):
            time.sleep(0.01)
        deadline = time.perf_counter_ns() + self.step_ns
        while time.perf_counter_ns() < deadline:
            pass
        self.fault()
        return x * self.scale


def build(
    fault: str = "none", step_us: int = 200, started_log: str = "", hold_while: str = ""
) -> nn.Module:
    """``fault``: one of FAULTS; ``started_log``: a file each trial process appends its
    pid to when its model first runs (tests use it to interrupt a trial mid-way);
    ``hold_while``: every step waits while this file exists (a sweep kept running for as
    long as a test needs it to)."""
    return Faulty(fault, step_us, started_log, hold_while)
