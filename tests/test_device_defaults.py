"""Defaults by device: the fields a user does not set take the cpu defaults perflab always
had, or on CUDA a GPU-bound workload; what the user sets wins. No GPU needed: device=cuda
composes the cuda defaults anywhere (composition needs no torch), and device=auto is
pointed at a machine with or without CUDA by replacing perflab.config.devices.cuda_available."""

from __future__ import annotations

from typing import Any

import pytest
from hydra import compose, initialize_config_module
from hydra.errors import MissingConfigException
from omegaconf import OmegaConf, open_dict

from perflab.config import compose as perflab_compose
from perflab.config import devices
from perflab.config.schema import ConvNetConfig, MLPConfig, PerflabConfig, TransformerConfig
from perflab.errors import ConfigError
from perflab.measure import resolve as resolve_mod
from perflab.process import cuda_probe
from perflab.process.isolation import Outcome

# The cpu defaults as they were before the defaults depended on the device: the README's
# `perflab` and main command measure exactly this on a machine without CUDA.
CPU_DEFAULTS = {
    "device": "cpu",
    "cuda_defaults": False,
    "batch_size": 32,
    "num_workers": 0,
    "pin_memory": False,
    "amp": "off",
    "threads": 1,
    "data": {
        "source": "loader",
        "dataset": None,
        "num_samples": 2048,
        "augment_passes": 2,
        "dataset_args": {},
    },
    "model": {
        "_target_": "perflab.workloads.models.convnet",
        "width": 32,
        "stages": 3,
        "blocks": 1,
        "image_size": 32,
        "num_classes": 10,
    },
}
# What the cuda defaults change: the transformer at the size that kept an H100 busy, with
# one batch kept on the device
CUDA_MODEL = {"vocab_size": 1024, "seq_len": 256, "d_model": 1024, "heads": 16, "layers": 4}


def composed(*overrides: str) -> tuple[Any, dict[str, Any], dict[str, str]]:
    """The validated config, the resolved dict a record stores, and the group choices
    (a record's `choices`), composed as the CLI does."""
    with initialize_config_module(config_module="perflab.conf", version_base=None):
        cfg = compose(config_name="perflab", overrides=list(overrides), return_hydra_config=True)
    choices = {k: str(v) for k, v in cfg.hydra.runtime.choices.items() if "hydra" not in k}
    with open_dict(cfg):
        del cfg["hydra"]  # what the launcher hands to perflab (perflab/launcher.py, compose)
    task = cfg
    return perflab_compose.to_config(task), OmegaConf.to_container(task, resolve=True), choices


def subset(full: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    return {
        k: subset(full[k], v) if isinstance(v, dict) and v else full[k] for k, v in wanted.items()
    }


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Point device=auto at a machine with or without CUDA; count the questions."""
    asked: list[bool] = []

    def set_cuda(available: bool) -> None:
        def answer() -> bool:
            asked.append(available)
            return available

        monkeypatch.setattr(devices, "cuda_available", answer)

    set_cuda.asked = asked  # type: ignore[attr-defined]
    return set_cuda


def test_the_cpu_defaults_are_unchanged():
    cfg, record, choices = composed("device=cpu")
    assert subset(record, CPU_DEFAULTS) == CPU_DEFAULTS
    assert isinstance(cfg, PerflabConfig) and type(cfg.model) is ConvNetConfig
    assert cfg.model.input.shape == [3, 32, 32] and cfg.trial.min_steps == 3
    assert cfg.schedule.trials_per_worker == 2
    assert (choices["model"], choices["data"], choices["device"]) == ("convnet", "synthetic", "cpu")


def test_the_transformer_keeps_its_cpu_sizes_on_the_cpu():
    _, record, _ = composed("device=cpu", "model=transformer")
    sizes = {k: record["model"][k] for k in CUDA_MODEL}
    assert sizes == {"vocab_size": 1024, "seq_len": 64, "d_model": 128, "heads": 4, "layers": 2}


@pytest.mark.device_agnostic  # composes device=auto on a machine faked without CUDA
def test_auto_without_cuda_takes_the_cpu_defaults(machine):
    machine(False)
    _, record, choices = composed()
    assert subset(record, CPU_DEFAULTS) == {**CPU_DEFAULTS, "device": "auto"}
    assert choices["model"] == "convnet" and machine.asked


@pytest.mark.device_agnostic  # composes device=auto on a machine faked with CUDA
def test_auto_with_cuda_takes_the_cuda_defaults(machine):
    machine(True)
    cfg, record, choices = composed()
    assert type(cfg.model) is TransformerConfig and cfg.model.input.shape == [256]
    assert {k: record["model"][k] for k in CUDA_MODEL} == CUDA_MODEL
    assert record["data"]["source"] == "memory" and record["batch_size"] == 32
    assert record["cuda_defaults"] is True and record["device"] == "auto"
    assert (choices["model"], choices["data"]) == ("transformer", "memory")
    # a fresh CUDA context, build and first call cost more there: a worker serves 4 rounds
    assert cfg.schedule.trials_per_worker == 4


def test_device_cuda_takes_the_cuda_defaults_without_asking_the_machine(machine):
    machine(False)  # this machine has no CUDA; device=cuda composes its defaults anyway
    cfg, record, _ = composed("device=cuda")
    assert type(cfg.model) is TransformerConfig and cfg.data.source == "memory"
    assert {k: record["model"][k] for k in CUDA_MODEL} == CUDA_MODEL
    assert cfg.cuda_defaults is True and not machine.asked


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["model=convnet"], {"model._target_": "perflab.workloads.models.convnet"}),
        (["data=synthetic"], {"data.source": "loader", "model.d_model": 1024}),
        (["model.d_model=512", "model.heads=8"], {"model.d_model": 512, "model.heads": 8}),
        (["model=transformer", "model.layers=2"], {"model.layers": 2, "model.seq_len": 256}),
        (["batch_size=64", "amp=true"], {"batch_size": 64, "amp": "True", "data.source": "memory"}),
        (["model=mlp"], {"model._target_": "perflab.workloads.models.mlp"}),
    ],
)
def test_what_the_user_sets_wins_over_the_cuda_defaults(overrides, expected):
    _, record, _ = composed("device=cuda", *overrides)
    got = {key: OmegaConf.select(OmegaConf.create(record), key) for key in expected}
    assert got == expected


def test_the_main_command_on_cuda_runs_a_gpu_bound_step():
    # perflab -m batch_size=32,64 amp=true,false: every variant on the transformer, no loader
    for batch, amp in [(32, "true"), (32, "false"), (64, "true"), (64, "false")]:
        cfg, _, _ = composed("device=cuda", f"batch_size={batch}", f"amp={amp}")
        assert type(cfg.model) is TransformerConfig and cfg.model.d_model == 1024
        assert cfg.data.source == "memory" and cfg.batch_size == batch


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_dataloader_study_overrides_the_cuda_defaults(device):
    cfg, _, _ = composed(f"device={device}", "+experiment=dataloader")
    assert type(cfg.model) is ConvNetConfig and cfg.model.width == 32
    assert cfg.data.source == "loader" and cfg.data.augment_passes == 8


def test_experiments_that_choose_a_model_keep_it_on_cuda():
    assert type(composed("device=cuda", "+experiment=fused")[0].model) is MLPConfig
    assert type(composed("device=cuda", "+experiment=compile_modes")[0].model) is MLPConfig


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["device=cpu", "cuda_defaults=true"],
            "cuda_defaults=true: does not match the device; allowed: false with device=cpu",
        ),
        (
            ["device=cuda", "cuda_defaults=false"],
            "cuda_defaults=false: does not match the device; allowed: true with device=cuda",
        ),
        (
            ["device=cuda", "num_workers=2"],
            "num_workers=2: has no effect; allowed: 0 with data.source=memory (no DataLoader "
            "runs; data=memory is the default on cuda, add data=synthetic for a DataLoader)",
        ),
    ],
)
def test_settings_that_contradict_the_device_defaults_name_field_value_and_allowed(
    overrides, message
):
    with pytest.raises(ConfigError) as info:
        composed(*overrides)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_an_unknown_device_names_the_field_value_and_allowed():
    # device is a config group: Hydra refuses the option, the CLI says it in one line
    with pytest.raises(MissingConfigException) as info:
        composed("device=tpu")
    assert (
        perflab_compose.one_line(info.value)
        == "device=tpu: no such option; allowed: auto, cpu, cuda"
    )


def test_the_record_of_a_cuda_trial_says_which_defaults_applied_and_why(monkeypatch):
    monkeypatch.setattr(resolve_mod.torch.cuda, "is_available", lambda: True)
    cfg, _, _ = composed("device=cuda")
    notes = [w for w in resolve_mod.resolve(cfg).warnings if w.startswith("cuda defaults")]
    assert len(notes) == 1
    assert notes[0].startswith("cuda defaults (device=cuda): the fields you did not set take")
    assert "+experiment=dataloader" in notes[0] and "\n" not in notes[0]
    assert resolve_mod.resolve(composed("device=cpu")[0]).warnings == []


@pytest.mark.parametrize(("composed_cuda", "device"), [(False, "cuda"), (True, "cpu")])
def test_defaults_composed_for_another_device_are_flagged(composed_cuda, device):
    # device=auto composed where perflab started (a SLURM submit host) and run elsewhere
    cfg = composed("device=cpu")[0]
    cfg.device, cfg.cuda_defaults = "auto", composed_cuda  # as a trial receives it
    warnings: list[str] = []
    resolve_mod._note_device_defaults(cfg, device, warnings)
    assert len(warnings) == 1
    assert f"but this trial runs on {device}: set device={device}" in warnings[0]


def test_without_an_nvidia_gpu_the_launching_process_starts_nothing(monkeypatch):
    monkeypatch.setattr(cuda_probe, "_nvml_gpu_count", lambda: 0)
    monkeypatch.setattr("perflab.process.isolation.run_isolated", pytest.fail)
    cuda_probe.cuda_available.cache_clear()
    try:
        assert cuda_probe.cuda_available() is False
    finally:
        cuda_probe.cuda_available.cache_clear()


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [(Outcome("ok", True), True), (Outcome("ok", False), False), (Outcome("crashed"), False)],
)
def test_with_an_nvidia_gpu_a_trial_process_answers_once(monkeypatch, outcome, expected):
    asked: list[str] = []

    def run_isolated(fn: str, arg: object, timeout_s: float) -> Outcome:
        asked.append(fn)
        return outcome

    monkeypatch.setattr(cuda_probe, "_nvml_gpu_count", lambda: 1)
    monkeypatch.setattr("perflab.process.isolation.run_isolated", run_isolated)
    cuda_probe.cuda_available.cache_clear()
    try:
        assert cuda_probe.cuda_available() is expected
        assert cuda_probe.cuda_available() is expected
    finally:
        cuda_probe.cuda_available.cache_clear()
    assert asked == ["perflab.measure.resolve:cuda_available"]


def test_composing_or_validating_a_config_asks_no_machine(monkeypatch, make_config):
    """device=auto is answered by whoever starts the sweep, never by the config layer."""
    monkeypatch.setattr(cuda_probe, "cuda_available", pytest.fail)
    monkeypatch.setattr("perflab.process.isolation.run_isolated", pytest.fail)
    devices.ask_cuda_with(None)
    make_config("device=cpu")  # validated in its __post_init__
    with pytest.raises(Exception) as refused:
        composed("device=auto")
    assert perflab_compose.one_line(refused.value).startswith("device=auto: cannot be resolved")
