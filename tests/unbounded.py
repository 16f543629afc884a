"""A model that reaches outside its trial, for the tests of what perflab bounds
(tests/test_trial_caps.py, tests/test_trial_escapes.py) and the fault matrix:

    perflab -m model=custom model._target_=tests.unbounded.build model.input.shape=[1] \\
        model.target.kind=none data=memory mode=infer device=cpu +model.args.print_kb=200

An editable install puts the repository root on sys.path, so trial processes import this
file as ``tests.unbounded``, as they do tests/faulty.py. When it is built it may change
the working directory (``chdir``) and start a child process that outlives nothing on its
own (``sleep 60``, its pid appended to ``child_log``); every forward busy-waits
``step_us``, keeps ``leak_mb`` MiB more alive for good and prints ``print_kb`` KiB.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import torch
from torch import nn

BYTES_PER_FLOAT32 = 4
LINE = "x" * 1023 + "\n"  # 1 KiB


class Unbounded(nn.Module):
    def __init__(self, leak_mb: float, print_kb: int, step_us: int) -> None:
        super().__init__()
        self.leak_floats = int(leak_mb * 2**20) // BYTES_PER_FLOAT32
        self.print_kb, self.step_ns = print_kb, step_us * 1000
        self.scale = nn.Parameter(torch.ones(1))
        self.kept: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        deadline = time.perf_counter_ns() + self.step_ns
        while time.perf_counter_ns() < deadline:
            pass
        if self.leak_floats:
            # filled, not torch.empty: untouched pages would not count in the RSS
            self.kept.append(torch.ones(self.leak_floats))
        if self.print_kb:
            sys.stdout.write(LINE * self.print_kb)
        return x * self.scale


def build(
    leak_mb: float = 0.0,
    print_kb: int = 0,
    step_us: int = 200,
    chdir: str = "",
    child_log: str = "",
) -> nn.Module:
    """``chdir``: the directory to change to; ``child_log``: start ``sleep 60`` and
    append its pid to this file (absolute: written after ``chdir``)."""
    if chdir:
        os.chdir(chdir)
    if child_log:
        child = subprocess.Popen(["sleep", "60"])
        with open(child_log, "a") as f:
            f.write(f"{child.pid}\n")
    return Unbounded(leak_mb, print_kb, step_us)


# --- the same misbehaviour as plain functions, for perflab.process.isolation's own tests --------
# (here, not in the test module: a child imports the module of the function it runs,
# and this one is light)

MiB = 2**20
CHUNK = 64 * 1024


def grows(_: object) -> str:
    """Take 32 MiB more every 10 ms (filled: untouched pages are not resident)."""
    kept = []
    for _ in range(200):  # 6.4 GiB: far past any cap of the tests
        kept.append(b"\x01" * (32 * MiB))
        time.sleep(0.01)
    return "never stopped"


def child_grows(_: object) -> str:
    """Stay small, but start a process that takes 768 MiB."""
    code = "import time; x = b'1' * (768 * 2**20); time.sleep(60)"
    subprocess.run([sys.executable, "-c", code], check=False)
    return "never stopped"


def prints(total: int) -> int:
    """Write ``total`` bytes to stdout in 64 KiB lines; return what was written."""
    for _ in range(total // CHUNK):
        sys.stdout.write("y" * (CHUNK - 1) + "\n")
    sys.stdout.flush()
    time.sleep(0.3)  # the parent's last cuts happen while it is quiet
    return total


def prints_and_watches(total: int) -> int:
    """Print ``total`` bytes over ~1 s; return the largest size the log reached."""
    largest, lines = 0, total // CHUNK
    for _ in range(lines):
        sys.stdout.write("z" * (CHUNK - 1) + "\n")
        sys.stdout.flush()
        largest = max(largest, os.fstat(1).st_size)
        time.sleep(1 / lines)
    return largest


def starts_sleep(log: str) -> int:
    """Start ``sleep 60``, note its pid in ``log`` (read by a test even if this call is
    killed) and return it."""
    child = subprocess.Popen(["sleep", "60"])
    with open(log, "a") as f:
        f.write(f"{child.pid}\n")
    return child.pid


def starts_sleep_and_hangs(log: str) -> None:
    starts_sleep(log)
    time.sleep(60)
