"""Config composition and validation: every rule has a case that asserts its message."""

from __future__ import annotations

from pathlib import Path

import pytest

from perflab.config.schema import (
    ConvNetConfig,
    CustomModelConfig,
    MLPConfig,
    SpinConfig,
    TransformerConfig,
    model_factory_kwargs,
)
from perflab.errors import ConfigError


def test_default_config_composes(make_config):
    cfg = make_config("device=cpu")  # the cpu defaults (the cuda ones: test_device_defaults.py)
    assert isinstance(cfg.model, ConvNetConfig)
    assert cfg.model.input.shape == [3, 32, 32]
    assert cfg.threads == 1 and cfg.amp == "off" and cfg.compile == "off"
    assert cfg.trial.min_steps == 3 and cfg.schedule.isolation == "worker"
    assert cfg.schedule.trials_per_worker == 2  # on CPU (4 on CUDA: test_device_defaults.py)


@pytest.mark.parametrize(
    ("choice", "kind", "shape"),
    [
        ("mlp", MLPConfig, [256]),
        ("convnet", ConvNetConfig, [3, 32, 32]),
        ("transformer", TransformerConfig, [64]),
        ("spin", SpinConfig, [1]),
    ],
)
def test_every_builtin_model_composes(make_config, choice, kind, shape):
    cfg = make_config(f"model={choice}", "device=cpu")  # the transformer's cpu sizes
    assert type(cfg.model) is kind
    assert cfg.model.input.shape == shape


def test_input_shape_follows_model_size(make_config):
    cfg = make_config("model=convnet", "model.image_size=64", "model.num_classes=7")
    assert cfg.model.input.shape == [3, 64, 64]
    assert cfg.model.target.num_classes == 7


def test_booleans_from_the_command_line_map_to_knob_values(make_config):
    assert make_config("amp=true").amp == "true"
    assert make_config("amp=false").amp == "off"
    assert make_config("compile=true").compile == "default"
    assert make_config("compile=false").compile == "off"


@pytest.mark.parametrize("preset", ["quick", "default", "rigorous"])
def test_presets_compose(make_config, preset):
    cfg = make_config(f"preset={preset}")
    assert cfg.trial.max_s >= cfg.trial.min_s


def test_custom_model_passes_args_to_its_factory(make_config):
    cfg = make_config(
        "model=custom",
        "model._target_=torch.nn.Linear",
        "+model.args.in_features=4",
        "+model.args.out_features=3",
        "model.input.shape=[4]",
    )
    assert isinstance(cfg.model, CustomModelConfig)
    assert model_factory_kwargs(cfg.model) == {"in_features": 4, "out_features": 3}


def test_builtin_factory_kwargs_exclude_perflab_keys(make_config):
    kwargs = model_factory_kwargs(make_config("model=mlp").model)
    assert kwargs == {"in_features": 256, "hidden": 512, "depth": 3, "num_classes": 10}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["batch_size=0"], "batch_size=0: too small; allowed: >= 1"),
        (["amp=maybe"], "amp=maybe: unknown value; allowed: off, bf16, fp16, true, false"),
        (["compile=fast"], "compile=fast: unknown value; allowed: off, default"),
        (["mode=eval"], "mode=eval: unknown value; allowed: train, infer"),
        # device is a config group: device=tpu is refused by Hydra (tests/test_device_defaults.py)
        (["device=cpu", "cuda_defaults=true"], "cuda_defaults=true: does not match the device"),
        (["num_workers=-1"], "num_workers=-1: too small; allowed: >= 0"),
        (["threads=0"], "threads=0: too small; allowed: >= 1"),
        (["matmul_precision=low"], "matmul_precision=low: unknown value"),
        (["optimizer=lion"], "optimizer=lion: unknown value; allowed: sgd, adamw"),
        (["lr=0"], "lr=0.0: must be positive"),
        (["seed=-1"], "seed=-1: too small"),
        (["model=mlp", "channels_last=true"], "channels_last=true: model has no 4-D inputs"),
        (["model=transformer", "channels_last=true"], "channels_last=true: model has no 4-D"),
        (["data=memory", "num_workers=2"], "num_workers=2: has no effect; allowed: 0 with"),
        (["data.source=disk"], "data.source=disk: unknown value; allowed: loader, memory"),
        (["data.num_samples=0"], "data.num_samples=0: too small"),
        (["data.augment_passes=-1"], "data.augment_passes=-1: too small"),
        (["model.width=0"], "model.width=0: too small; allowed: >= 1"),
        (["model=transformer", "model.heads=3"], "model.heads=3: does not divide the model"),
        (["model.input.shape=[]"], "model.input.shape=[]: bad shape"),
        (["model.input.dtype=float16"], "model.input.dtype=float16: unknown value"),
        (["model.target.kind=ranking"], "model.target.kind=ranking: unknown value"),
        (["model=custom", "model._target_=nodots"], "model._target_=nodots: not a factory path"),
        (["trial.min_steps=0"], "trial.min_steps=0: too small"),
        (["trial.max_steps=2"], "trial.max_steps=2: too small; allowed: >= 3 (trial.min_steps)"),
        (["trial.max_s=0.1"], "trial.max_s=0.1: too small; allowed: >= 0.2 (trial.min_s)"),
        (["trial.timeout_s=0"], "trial.timeout_s=0.0: must be positive"),
        (["trial.warmup_s=-1"], "trial.warmup_s=-1.0: too small"),
        # found by tests/test_fuzz.py: these passed validation and broke the trial
        (["lr=inf"], "lr=inf: not finite; allowed: a finite number"),
        (["trial.max_s=nan"], "trial.max_s=nan: not finite; allowed: a finite number"),
        (["schedule.time_budget_s=inf"], "schedule.time_budget_s=inf: not finite"),
        (["data.dataset=x"], "data.dataset=x: not a factory path; allowed: null"),
        (["model=custom", "model._target_=a..b"], "model._target_=a..b: not a factory path"),
        (["seed=18446744073709551616"], "seed=18446744073709551616: too large; allowed: <="),
        (["model=spin", "model.input.shape=[[1]]"], "model.input.shape=[[1]]: bad shape"),
        (["trial.steady_tolerance=1.5"], "trial.steady_tolerance=1.5: too large; allowed: < 1"),
        (["trial.warmup_max_s=0.1"], "trial.warmup_max_s=0.1: too small; allowed: >= 0.5"),
        (["schedule.settle_s=-1"], "schedule.settle_s=-1.0: too small"),
        (["schedule.min_rounds=2"], "schedule.min_rounds=2: too small; allowed: >= 3"),
        # the size the user set is named, not the input shape derived from it
        (["model.image_size=0"], "model.image_size=0: too small; allowed: >= 1"),
        (["model=transformer", "model.vocab_size=0"], "model.vocab_size=0: too small"),
    ],
)
def test_invalid_values_name_field_value_and_allowed(make_config, overrides, message):
    with pytest.raises(ConfigError) as info:
        make_config(*overrides)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_experiments_run_by_name(make_config):
    cfg = make_config("+experiment=spin_ground_truth", "model.step_us=2000")
    assert isinstance(cfg.model, SpinConfig) and cfg.model.step_us == 2000
    assert cfg.data.source == "memory" and cfg.mode == "infer"


EXPERIMENTS = sorted(
    p.stem for p in (Path(__file__).resolve().parent.parent / "experiments").glob("*.yaml")
)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_and_each_of_its_variants_composes(make_config, name):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="perflab.conf", version_base=None):
        cfg = compose(
            config_name="perflab",
            overrides=["device=cpu", f"+experiment={name}"],
            return_hydra_config=True,
        )
    params = dict(cfg.hydra.sweeper.params or {})
    assert params or name == "spin_ground_truth"
    for key, values in params.items():
        for value in str(values).split(","):
            make_config(f"+experiment={name}", f"{key}={value}")
