"""The config's rules: every check that needs no torch, run once by
``PerflabConfig.__post_init__``. Each broken rule raises one ConfigError naming the
field, the value and what is allowed; checks that need torch live in perflab.measure.resolve."""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass
from typing import Any

from perflab.config.bounds import check_maxima
from perflab.config.schema import (
    DataConfig,
    PerflabConfig,
    ScaleOutConfig,
    ScheduleConfig,
    TrialConfig,
)
from perflab.config.user_code import lookup
from perflab.config.vocabulary import (
    AMP_VALUES,
    COMPILE_VALUES,
    DATA_SOURCES,
    DEVICES,
    EXECUTORS,
    FUSED_VALUES,
    INPUT_DTYPES,
    ISOLATIONS,
    MATMUL_PRECISIONS,
    METRICS,
    MODEL_RESERVED_KEYS,
    MODES,
    OPTIMIZERS,
    TARGET_KINDS,
)
from perflab.errors import ConfigError


def _require(ok: bool, field_name: str, value: Any, allowed: str, problem: str) -> None:
    if not ok:
        raise ConfigError(field_name, value, allowed, problem)


def _one_of(field_name: str, value: Any, choices: tuple[str, ...]) -> None:
    _require(value in choices, field_name, value, ", ".join(choices), "unknown value")


def _at_least(field_name: str, value: float, minimum: float, label: str = "") -> None:
    bound = f">= {minimum}" + (f" ({label})" if label else "")
    _require(value >= minimum, field_name, value, bound, "too small")


def _finite(obj: Any, prefix: str = "") -> None:
    """Every float field is a finite number: inf and nan pass most range checks (nan
    fails every comparison, inf passes every lower bound) and then break the trial."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        if is_dataclass(value):
            _finite(value, f"{prefix}{f.name}.")
        elif isinstance(value, float):
            _require(
                math.isfinite(value), f"{prefix}{f.name}", value, "a finite number", "not finite"
            )


def _is_factory_path(path: Any) -> bool:
    """module.function: at least two dot-separated Python identifiers."""
    parts = path.split(".") if isinstance(path, str) else []
    return len(parts) >= 2 and all(part.isidentifier() for part in parts)


def validate(cfg: PerflabConfig) -> None:
    """Check every rule that needs no torch; raise ConfigError on the first broken one."""
    _finite(cfg)
    # every number under its upper bound first: an absurd value is named as what it is,
    # not as the field that a rule between two fields compares it with
    check_maxima(cfg)
    _validate_knobs(cfg)
    _validate_model(cfg.model)
    _validate_data(cfg.data)
    _validate_trial(cfg.trial)
    _validate_schedule(cfg.schedule)
    _at_least("profiling.wait", cfg.profiling.wait, 0)
    _at_least("profiling.warmup", cfg.profiling.warmup, 0)
    _at_least("profiling.active", cfg.profiling.active, 1)
    _require(
        cfg.profiling.max_trace_mb > 0,
        "profiling.max_trace_mb",
        cfg.profiling.max_trace_mb,
        "> 0",
        "must be positive",
    )
    _validate_scaleout(cfg.scaleout)
    _validate_evidence(cfg)
    _validate_combinations(cfg)


def _validate_knobs(cfg: PerflabConfig) -> None:
    _at_least("batch_size", cfg.batch_size, 1)
    _one_of("mode", cfg.mode, MODES)
    _one_of("device", cfg.device, DEVICES)
    if cfg.device in ("cpu", "cuda"):
        # set by the device option (conf/device/), which chose the groups to match; with
        # device=auto the machine answered when the config was composed, and validating
        # asks nobody again (it starts no process: config/devices.py)
        expected = cfg.device == "cuda"
        _require(
            cfg.cuda_defaults == expected,
            "cuda_defaults",
            cfg.cuda_defaults,
            f"{str(expected).lower()} with device={cfg.device} (the device option sets it: "
            "device=cuda for the cuda defaults, device=cpu for the cpu ones)",
            "does not match the device",
        )
    _one_of("amp", cfg.amp, AMP_VALUES)
    _one_of("compile", cfg.compile, COMPILE_VALUES)
    _one_of("fused", cfg.fused, FUSED_VALUES)
    _at_least("num_workers", cfg.num_workers, 0)
    _at_least("threads", cfg.threads, 1)
    _one_of("matmul_precision", cfg.matmul_precision, MATMUL_PRECISIONS)
    _require(
        cfg.step is None or _is_factory_path(cfg.step),
        "step",
        cfg.step,
        "null (perflab's step) or a dotted path to your step's factory, e.g. mypkg.steps.make_step",
        "not a factory path",
    )
    _one_of("optimizer", cfg.optimizer, OPTIMIZERS)
    _require(cfg.lr > 0, "lr", cfg.lr, "> 0", "must be positive")
    _at_least("seed", cfg.seed, 0)  # its upper bound: perflab.config.bounds


# the fields every model config group option has (config.schema.ModelConfig's)
MODEL_CONFIG_FIELDS = frozenset({"_target_", "input", "target", "checkpoint"})
# model.loss besides a dotted path (perflab.workloads.outputs)
LOSS_CHOICES = ("auto", "model", "target")


def _is_model_config(model: Any) -> bool:
    """A ModelConfig by its fields (a user's own model config group subclasses nothing)."""
    return is_dataclass(model) and MODEL_CONFIG_FIELDS <= {f.name for f in fields(model)}


def _validate_model(model: Any) -> None:
    _require(
        _is_model_config(model),
        "model",
        model,
        "a model config group option (model=mlp, convnet, transformer, spin, custom, hf, function)",
        "not a model config",
    )
    _require(
        _is_factory_path(model._target_),
        "model._target_",
        model._target_,
        "a dotted path to a factory, e.g. mypkg.models.build",
        "not a factory path",
    )
    # Sizes of the built-in models (not the user's free-form args) must be positive;
    # checked first, as input and target derive from them (model.image_size=0 is named,
    # rather than the model.input.shape it makes).
    for f in fields(model):
        value = getattr(model, f.name)
        if f.name not in MODEL_RESERVED_KEYS and type(value) is int:
            _at_least(f"model.{f.name}", value, 1)
    shape = model.input.shape
    _require(
        # OmegaConf does not check the items' type through a list[int] of a subclass
        # reached from an Any field: [[1]] arrives as a list inside the list
        len(shape) >= 1 and all(type(d) is int and d >= 1 for d in shape),
        "model.input.shape",
        list(shape),
        "a non-empty list of positive sizes, e.g. [3, 32, 32]",
        "bad shape",
    )
    _one_of("model.input.dtype", model.input.dtype, INPUT_DTYPES)
    if model.input.dtype == "int64":
        _at_least("model.input.high", model.input.high, 1)
    _one_of("model.target.kind", model.target.kind, TARGET_KINDS)
    if model.target.kind == "classes":
        _at_least("model.target.num_classes", model.target.num_classes, 1)
    _validate_output_and_loss(model)
    _validate_function(model)


def _validate_function(model: Any) -> None:
    """model=function's fn and inputs (perflab.workloads.function): their form only;
    whether they import and run is the settings check's (perflab.measure.preflight)."""
    if not hasattr(model, "fn"):
        return
    _require(
        _is_factory_path(model.fn),
        "model.fn",
        model.fn,
        "a dotted path to your function, e.g. mypkg.ops.attention",
        "not a function path",
    )
    _require(
        model.inputs is None or _is_factory_path(model.inputs),
        "model.inputs",
        model.inputs,
        "null (perflab's synthetic inputs, as model.input describes them) or a dotted path "
        "to make_inputs(batch_size), e.g. mypkg.ops.make_inputs",
        "not a function path",
    )


def _validate_output_and_loss(model: Any) -> None:
    """model.output and model.loss (perflab.workloads.outputs): their form only; whether
    they fit the model's output is checked on the probe batch (perflab.measure.preflight)."""
    output, loss = getattr(model, "output", "auto"), getattr(model, "loss", "auto")
    _require(
        isinstance(output, str) and (output.isidentifier() or output.lstrip("-").isdigit()),
        "model.output",
        output,
        "auto, a field or key of the model's output (logits, last_hidden_state), or a position (0)",
        "not a field name or a position",
    )
    _require(
        loss in LOSS_CHOICES or _is_factory_path(loss),
        "model.loss",
        loss,
        f"{', '.join(LOSS_CHOICES)}, or a dotted path to fn(output, target) -> scalar",
        "not a loss",
    )


def _validate_data(data: DataConfig) -> None:
    _one_of("data.source", data.source, DATA_SOURCES)
    _require(
        data.dataset is None or _is_factory_path(data.dataset),
        "data.dataset",
        data.dataset,
        "null (perflab's synthetic dataset) or a dotted path to a factory, e.g. mypkg.data.build",
        "not a factory path",
    )
    _require(
        data.collate is None or _is_factory_path(data.collate),
        "data.collate",
        data.collate,
        "null (torch's default_collate) or a dotted path to a function fn(items) -> batch, "
        "e.g. mypkg.data.pad",
        "not a function path",
    )
    _at_least("data.num_samples", data.num_samples, 1)
    _at_least("data.augment_passes", data.augment_passes, 0)


def _validate_trial(trial: TrialConfig) -> None:
    _at_least("trial.warmup_steps", trial.warmup_steps, 0)
    _at_least("trial.warmup_s", trial.warmup_s, 0)
    _require(
        0 <= trial.steady_tolerance < 1,
        "trial.steady_tolerance",
        trial.steady_tolerance,
        "0 <= tolerance < 1, e.g. 0.02 (0 turns the steady-state rule off)",
        "out of range",
    )
    _at_least("trial.warmup_max_s", trial.warmup_max_s, trial.warmup_s, "trial.warmup_s")
    _at_least("trial.min_steps", trial.min_steps, 1)
    _at_least("trial.max_steps", trial.max_steps, trial.min_steps, "trial.min_steps")
    _at_least("trial.min_s", trial.min_s, 0)
    _require(
        trial.max_s > 0, "trial.max_s", trial.max_s, "> 0 (and >= trial.min_s)", "must be positive"
    )
    _at_least("trial.max_s", trial.max_s, trial.min_s, "trial.min_s")
    _require(trial.timeout_s > 0, "trial.timeout_s", trial.timeout_s, "> 0", "must be positive")
    _at_least("trial.min_event_window_us", trial.min_event_window_us, 0)
    _at_least("trial.telemetry_interval_ms", trial.telemetry_interval_ms, 0)
    _require(
        trial.max_memory_mb is None or trial.max_memory_mb >= 0,
        "trial.max_memory_mb",
        trial.max_memory_mb,
        "null (80 % of the machine's memory), 0 (no cap) or a number of MiB > 0",
        "out of range",
    )
    _at_least("trial.max_log_mb", trial.max_log_mb, 0, "0: no cap")


def _validate_schedule(s: ScheduleConfig) -> None:
    # an interval needs 3 paired rounds (perflab.analysis.summarize.MIN_PAIRED_ROUNDS)
    _at_least("schedule.min_rounds", s.min_rounds, 3)
    _at_least("schedule.max_rounds", s.max_rounds, s.min_rounds, "schedule.min_rounds")
    _require(
        s.target_half_width > 0,
        "schedule.target_half_width",
        s.target_half_width,
        "> 0, e.g. 0.02 for +-2 %",
        "must be positive",
    )
    _require(
        s.time_budget_s > 0, "schedule.time_budget_s", s.time_budget_s, "> 0", "must be positive"
    )
    _require(
        0.5 < s.confidence < 1,
        "schedule.confidence",
        s.confidence,
        "between 0.5 and 1, e.g. 0.95",
        "out of range",
    )
    _require(
        0 <= s.delta < 0.5, "schedule.delta", s.delta, "0 <= delta < 0.5, e.g. 0.01", "out of range"
    )
    _one_of("schedule.metric", s.metric, METRICS)
    _at_least("schedule.settle_s", s.settle_s, 0)
    _one_of("schedule.isolation", s.isolation, ISOLATIONS)
    _at_least("schedule.trials_per_worker", s.trials_per_worker, 1)


def _validate_evidence(cfg: PerflabConfig) -> None:
    """schedule.evidence: each key a field of this config, each value a function's
    dotted path or model.ATTRIBUTE (perflab.config.user_code); whether the function
    imports is the settings check's (perflab.workloads.check_factories)."""
    allowed = (
        "{KEY: pkg.module.fn}, fn(model) -> (observed, ok), or {KEY: model.ATTRIBUTE}, "
        "an attribute of the built model compared with KEY's value; KEY a field of the config"
    )
    for key, check in cfg.schedule.evidence.items():
        shown = {key: check}
        _require(
            isinstance(check, str) and _is_factory_path(check),
            "schedule.evidence",
            shown,
            allowed,
            "not a function path or model.ATTRIBUTE",
        )
        _require(
            _is_set(cfg, str(key)),
            "schedule.evidence",
            shown,
            allowed + " (+model.args.NAME=VALUE adds a field of your model's)",
            f"{key} is not set in this config",
        )


def _is_set(cfg: PerflabConfig, key: str) -> bool:
    try:
        lookup(cfg, key)
    except KeyError:
        return False
    return True


def _validate_scaleout(s: ScaleOutConfig) -> None:
    _one_of("scaleout.executor", s.executor, EXECUTORS)
    _at_least("scaleout.max_parallel", s.max_parallel, 1)
    _at_least("scaleout.slurm.gpus_per_node", s.slurm.gpus_per_node, 0)
    _at_least("scaleout.slurm.cpus_per_task", s.slurm.cpus_per_task, 1)
    _at_least("scaleout.slurm.mem_gb", s.slurm.mem_gb, 1)
    _at_least("scaleout.slurm.timeout_min", s.slurm.timeout_min, 1)


def _validate_combinations(cfg: PerflabConfig) -> None:
    # with a dataset of the user's own, model.input does not describe its batches: the
    # settings check looks for a 4-D tensor in the probe batch (perflab.measure.preflight)
    if cfg.channels_last and not cfg.data.dataset:
        shape = list(cfg.model.input.shape)
        _require(
            len(shape) == 3 and cfg.model.input.dtype == "float32",
            "channels_last",
            True,
            "true only for models with 4-D float inputs (per-sample shape [C, H, W]); "
            f"this model's model.input.shape is {shape} ({cfg.model.input.dtype})",
            "model has no 4-D inputs",
        )
    _validate_hf_knobs(cfg)
    if getattr(cfg.model, "inputs", None):
        _require(
            cfg.num_workers == 0,
            "num_workers",
            cfg.num_workers,
            "0 with model.inputs (make_inputs builds the inputs once and they stay on the "
            "device: no DataLoader runs)",
            "has no effect",
        )
    if cfg.data.source == "memory":
        _require(
            cfg.num_workers == 0,
            "num_workers",
            cfg.num_workers,
            "0 with data.source=memory (no DataLoader runs; data=memory is the default on "
            "cuda, add data=synthetic for a DataLoader)",
            "has no effect",
        )


def _validate_hf_knobs(cfg: PerflabConfig) -> None:
    """model=hf's checkpointing and cache knobs against the mode: settings transformers
    would ignore are refused, so that a comparison never measures a knob that is off."""
    model = cfg.model
    if getattr(model, "gradient_checkpointing", False):
        _require(
            cfg.mode == "train",
            "model.gradient_checkpointing",
            True,
            "false with mode=infer (it recomputes activations in the backward pass)",
            "has no effect without a backward pass",
        )
        _require(
            not getattr(model, "use_cache", False),
            "model.use_cache",
            True,
            "false with model.gradient_checkpointing=true (transformers turns the cache off "
            "while it checkpoints)",
            "has no effect",
        )
