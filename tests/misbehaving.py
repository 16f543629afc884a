"""A model that runs but misbehaves, for the leak and stall health flags (tests/test_health.py).

    perflab model=custom model._target_=tests.misbehaving.build model.input.shape=[1] \\
        model.target.kind=none data=memory mode=infer device=cpu +model.args.leak_mb=1

An editable install puts the repository root on sys.path, so trial processes import this
file as ``tests.misbehaving``, as they do tests/faulty.py. Every forward busy-waits
``step_us`` (a step long enough to time, like perflab's spin model), then keeps a new
tensor of ``leak_mb`` MiB alive for good (a leak, like appending each step's loss with
its graph to a list), and every ``every``-th forward sleeps ``stall_s`` (a stall, like a
checkpoint written from inside the training loop).
"""

from __future__ import annotations

import time

import torch
from torch import nn

BYTES_PER_FLOAT32 = 4


class Misbehaving(nn.Module):
    def __init__(self, leak_mb: float, stall_s: float, every: int, step_us: int) -> None:
        super().__init__()
        self.leak_floats = int(leak_mb * 2**20) // BYTES_PER_FLOAT32
        self.stall_s, self.every, self.step_ns = stall_s, every, step_us * 1000
        self.scale = nn.Parameter(torch.ones(1))
        self.kept: list[torch.Tensor] = []
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        deadline = time.perf_counter_ns() + self.step_ns
        while time.perf_counter_ns() < deadline:
            pass
        if self.leak_floats:
            # filled, not torch.empty: untouched pages would not count in the RSS
            self.kept.append(torch.ones(self.leak_floats))
        if self.stall_s and self.calls % self.every == 0:
            time.sleep(self.stall_s)
        return x * self.scale


def build(
    leak_mb: float = 0.0, stall_s: float = 0.0, every: int = 50, step_us: int = 200
) -> nn.Module:
    """``leak_mb``: MiB kept alive per forward; ``stall_s``: seconds slept every
    ``every``-th forward; ``step_us``: the busy-wait of every forward."""
    return Misbehaving(leak_mb, stall_s, every, step_us)
