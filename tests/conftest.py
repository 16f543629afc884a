"""Test tiers and the rules every test follows (docs/contributing.md).

- The default tier runs on the CPU and names its device: a test that runs a trial, a
  sweep or an experiment passes ``device=cpu`` (tests/tiny.py's TINY carries it, and
  ``make_config`` composes for it unless told otherwise). perflab's ``device=auto``
  picks CUDA whenever a GPU is present, and on an H100 such tests asserted CPU behaviour
  on the GPU. ``_device_explicit`` fails a test that lets perflab resolve ``device=auto``
  in this process, on any machine, so the mistake shows on a CPU-only one too; a test
  that holds on any device says so with ``@pytest.mark.device_agnostic``.
- The ``cuda`` tier (``@pytest.mark.cuda``, tests/test_cuda.py) is skipped where
  ``torch.cuda.is_available()`` is False; ``pytest -m cuda`` runs it alone.
"""

from __future__ import annotations

import gc
import signal
from collections.abc import Callable, Iterator

import pytest
from hydra import compose, initialize_config_module

from perflab.config.compose import register_configs, to_config
from perflab.config.schema import PerflabConfig

register_configs()

# The Ctrl-C tests send SIGINT to a perflab they started. A shell starts a background
# job (`pytest &` in a script) with SIGINT ignored, and an ignored signal stays ignored
# across exec: perflab would never see it. A handled one is reset to the default on
# exec, so Python in the child installs its own KeyboardInterrupt again.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cuda = [item for item in items if item.get_closest_marker("cuda")]
    if not cuda:
        return  # torch is imported only when a cuda test was collected
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in cuda:
        item.add_marker(skip)


@pytest.fixture(autouse=True)
def _device_explicit(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail a test that lets perflab resolve ``device=auto`` in this process.

    Subprocesses (the console scripts, trial processes) are out of its reach: there the
    rule is kept by passing ``device=cpu`` (tests/tiny.py's TINY carries it)."""
    node = request.node
    if node.get_closest_marker("cuda") or node.get_closest_marker("device_agnostic"):
        return
    from perflab.measure import resolve

    real = resolve._resolve_device

    def explicit(requested: str) -> str:
        if requested == "auto":  # Failed is a BaseException: perflab's handlers let it by
            pytest.fail(
                "perflab resolved device=auto, which is cuda on a GPU machine: pass "
                "device=cpu, or mark the test device_agnostic (it holds on any device) or cuda"
            )
        return real(requested)

    monkeypatch.setattr(resolve, "_resolve_device", explicit)


@pytest.fixture
def make_config() -> Callable[..., PerflabConfig]:
    """Compose perflab's config with overrides, exactly as the CLI does, and validate it.

    For ``device=cpu`` unless an override names the device: the device decides what
    ``device=auto`` resolves to and which defaults the fields left unset take, and the
    default tier's answer must not depend on the machine it runs on."""

    def make(*overrides: str) -> PerflabConfig:
        if not any(o.startswith("device=") for o in overrides):
            overrides = ("device=cpu", *overrides)
        with initialize_config_module(config_module="perflab.conf", version_base=None):
            cfg = compose(config_name="perflab", overrides=list(overrides))
        return to_config(cfg)

    return make


@pytest.fixture(scope="module")
def frozen_heap() -> Iterator[None]:
    """For modules whose trials run in the pytest process.

    That heap holds what every earlier test left alive; each trial's collection before it
    measures would walk all of it, which took seconds a trial late in the suite. Frozen, as
    a trial process's preloads are (perflab/process/frozen_heap.py), and thawed again for the
    modules after this one. Use it with ``pytestmark = pytest.mark.usefixtures("frozen_heap")``.
    """
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()
