"""The isolation layer: every way a child can end comes back as an Outcome, never a hang."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from perflab.errors import ConfigError
from perflab.process.isolation import describe_exit, hf_preload, run_isolated


def returns_pid_and_preloaded(_: object) -> tuple[int, bool]:
    return os.getpid(), "torch" in sys.modules


def frozen_and_walked(_: object) -> tuple[int, int]:
    import gc

    return gc.get_freeze_count(), len(gc.get_objects())


def raises_config_error(_: object) -> None:
    raise ConfigError("amp", "fp16", "off, bf16", "unwise")


def raises_runtime_error(_: object) -> None:
    raise RuntimeError("boom")


def segfaults(_: object) -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def hangs(_: object) -> None:
    time.sleep(60)


def test_child_runs_in_a_fresh_process_with_torch_preloaded():
    outcome = run_isolated(returns_pid_and_preloaded, None, timeout_s=120)
    assert outcome.kind == "ok" and outcome.exitcode == 0
    pid, preloaded = outcome.value
    assert pid != os.getpid() and preloaded
    assert run_isolated(returns_pid_and_preloaded, None, timeout_s=120).value[0] != pid


def test_a_child_inherits_the_preloads_frozen_so_its_collections_skip_them():
    # perflab/process/frozen_heap.py: torch's, Hydra's and perflab's objects sit in the frozen
    # generation; a full collection in the child walks only what the child made itself
    frozen, walked = run_isolated(frozen_and_walked, None, timeout_s=120).value
    assert frozen > 100_000 and walked < frozen / 10


def test_config_error_is_reported_as_such():
    outcome = run_isolated(raises_config_error, None, timeout_s=120)
    assert outcome.kind == "config_error"
    assert outcome.message == "amp=fp16: unwise; allowed: off, bf16"


def test_exception_comes_back_with_its_traceback():
    outcome = run_isolated(raises_runtime_error, None, timeout_s=120)
    assert outcome.kind == "error"
    assert outcome.message.startswith("RuntimeError: boom") and "Traceback" in outcome.message


def test_crash_is_reported_with_the_signal():
    outcome = run_isolated(segfaults, None, timeout_s=120)
    assert outcome.kind == "crashed"
    assert "SIGSEGV" in outcome.message and outcome.exitcode == -signal.SIGSEGV


def test_hung_child_is_killed_at_the_timeout():
    start = time.monotonic()
    outcome = run_isolated(hangs, None, timeout_s=0.5)
    assert outcome.kind == "timeout"
    assert time.monotonic() - start < 10


def test_describe_exit():
    assert describe_exit(-9) == "killed by signal SIGKILL"
    assert describe_exit(3) == "exited with code 3"


def test_the_processes_that_only_run_trials_never_import_torch():
    # The CLI, the launcher and a scale-out job send requests to trial processes (which
    # have torch preloaded) and read records: importing torch there would cost seconds.
    import subprocess
    import sys

    code = (
        "import sys, perflab.cli, perflab.experiment.launcher, perflab.experiment.scaleout, "
        "perflab.experiment.schedule, perflab.experiment.resume, perflab.report.merge, "
        "perflab.report.__main__; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["batch_size=32"], ()),
        (["model=convnet", "model.arch=gpt2"], ()),
        (["-m", "model=hf"], ("transformers", "transformers.models.gpt2.modeling_gpt2")),
        (
            ["-m", "+experiment=hf_attention", "model.arch=bert,gpt2"],
            (
                "transformers",
                "transformers.models.bert.modeling_bert",
                "transformers.models.gpt2.modeling_gpt2",
            ),
        ),
    ],
)
def test_the_fork_server_preloads_transformers_only_for_hugging_face_commands(argv, expected):
    # device: none (reads the command line only)
    assert hf_preload(argv) == expected
