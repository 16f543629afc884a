"""perflab's Hydra launcher: a thin shell; the work is in perflab.experiment.launcher
(imported lazily so Hydra's plugin scan does not import perflab and torch).

No ``from __future__ import annotations`` here: Hydra's scan executes this module before
registering it in sys.modules, and dataclasses cannot resolve string annotations then.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclass
class PerflabLauncherConf:
    _target_: str = "hydra_plugins.perflab_launcher.perflab_launcher.PerflabLauncher"


ConfigStore.instance().store(
    group="hydra/launcher", name="perflab", node=PerflabLauncherConf, provider="perflab"
)


class PerflabLauncher(Launcher):
    """Runs a sweep as one interleaved experiment: rounds x shuffled variants, each trial
    in a fresh process, a hidden A/A sentinel, adaptive stopping."""

    def __init__(self) -> None:
        self.config: Optional[DictConfig] = None  # noqa: UP045 - see the module docstring
        self.hydra_context: Optional[HydraContext] = None  # noqa: UP045
        self.lock: Any = None  # perflab.formats.sweepdir.SweepLock, once set up

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        from perflab.experiment.launcher import prepare

        self.config = config
        self.hydra_context = hydra_context
        # Hydra creates the sweep directory and writes into it right after this: check it
        # and take its lock first
        self.lock = prepare(config)

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from perflab.experiment.launcher import launch

        assert self.config is not None and self.hydra_context is not None
        try:
            return launch(self.hydra_context, self.config, job_overrides, initial_job_idx)
        finally:
            self.lock.release()
