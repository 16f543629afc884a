from __future__ import annotations

from collections.abc import Callable

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from perflab.config import PerflabConfig, register_configs

register_configs()


@pytest.fixture
def make_config() -> Callable[..., PerflabConfig]:
    """Compose perflab's config with overrides, exactly as the CLI does, and validate it."""

    def make(*overrides: str) -> PerflabConfig:
        with initialize_config_module(config_module="perflab.conf", version_base=None):
            cfg = compose(config_name="perflab", overrides=list(overrides))
        return OmegaConf.to_object(cfg)  # type: ignore[return-value]

    return make


# A workload small enough that a whole trial takes well under a second.
TINY = (
    "model=mlp",
    "model.in_features=16",
    "model.hidden=16",
    "model.depth=1",
    "batch_size=4",
    "data.num_samples=64",
    "trial.warmup_steps=2",
    "trial.warmup_s=0",
    "trial.min_steps=5",
    "trial.min_s=0",
    "trial.max_s=2",
)
