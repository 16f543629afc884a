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
