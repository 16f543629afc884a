"""A user module that ends its process while being imported, for tests/test_import_exits.py.

    PERFLAB_TEST_EXIT_HOW=sys.exit perflab model=custom \\
        model._target_=tests.exits_at_import.build model.input.shape=[1] \\
        model.target.kind=none data=memory mode=infer

Environment variables (trial processes inherit them from the fork server, which inherits
them from the ``perflab`` command):

- ``PERFLAB_TEST_EXIT_HOW``: ``sys.exit`` (raises SystemExit) or ``os._exit`` (ends the
  process at once, nothing runs after it); unset: the module imports normally.
- ``PERFLAB_TEST_EXIT_CODE``: the exit code, 3 unless set; with sys.exit, text that is
  not a number is passed as it is (Python prints it and exits 1).
- ``PERFLAB_TEST_EXIT_AFTER_FIRST``: a file path. The first import creates the file and
  goes on; every later import exits. In a sweep the pre-check imports the module first,
  so it passes and the exit happens only in the trials.
"""

from __future__ import annotations

import os
import sys

import torch
from torch import nn


def _should_exit() -> bool:
    if not os.environ.get("PERFLAB_TEST_EXIT_HOW"):
        return False
    marker = os.environ.get("PERFLAB_TEST_EXIT_AFTER_FIRST")
    if not marker:
        return True
    try:
        # O_EXCL: exactly one importer creates it, even with imports in parallel
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return True
    return False


def _exit() -> None:
    code = os.environ.get("PERFLAB_TEST_EXIT_CODE", "3")
    if os.environ["PERFLAB_TEST_EXIT_HOW"] == "os._exit":
        os._exit(int(code))
    sys.exit(int(code) if code.isdigit() else code)  # sys.exit("text") exits 1


if _should_exit():
    _exit()


class Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def build() -> nn.Module:
    return Scale()
