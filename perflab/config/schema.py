"""The config schema: typed dataclasses registered with Hydra's ConfigStore, validated once.

YAML files in ``conf/`` only set values; the types and the rules live here. The Hydra
config is turned into these objects once, with ``OmegaConf.to_object``, which runs
``PerflabConfig.__post_init__`` and so the validation; everything below the CLI sees
typed, validated objects. Checks that need torch (is CUDA there? does this CPU do fp16
well?) happen in :mod:`perflab.measure.resolve`, inside the trial process, still before any
measurement.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any

from omegaconf import MISSING

from perflab.config.bounds import check_maxima
from perflab.config.hf import TINY, mask_id, read_local_config, vocabulary
from perflab.config.vocabulary import HF_ATTENTION, HF_TASKS, MODEL_RESERVED_KEYS
from perflab.errors import ConfigError


def ref(key: str) -> Any:
    """An OmegaConf interpolation, typed Any so it can stand where an int is declared."""
    return "${" + key + "}"


@dataclass
class InputSpec:
    # shape of one sample, without the batch dimension, e.g. [3, 32, 32]
    shape: list[int] = field(default_factory=lambda: [64])
    # element type: float32, or int64 for token ids drawn from [0, high)
    dtype: str = "float32"
    # exclusive upper bound of int64 inputs (vocabulary size); unused for float32
    high: int = 0


@dataclass
class TargetSpec:
    # classes: cross-entropy on class ids; regression: MSE against outputs' shape;
    # none: the loss is the mean of the outputs (any model can be trained with it)
    kind: str = "classes"
    # number of classes for kind=classes
    num_classes: int = 10
    # shape of one sample's target for kind=classes, [] for one label per sample,
    # [seq_len] for one label per token
    shape: list[int] = field(default_factory=list)


@dataclass
class ModelConfig:
    # factory "module.function" returning a torch.nn.Module; receives every other key
    # of this node (except input/target) as keyword arguments, and the items of args
    _target_: str = MISSING
    # what one input sample looks like
    input: InputSpec = field(default_factory=InputSpec)
    # what one target looks like, and so which loss is used
    target: TargetSpec = field(default_factory=TargetSpec)
    # a state_dict file (torch.save) loaded into the built model with
    # torch.load(weights_only=True): tensors and plain containers only, never code
    checkpoint: str | None = None
    # what the numerics check compares and a loss function receives, from an output that
    # is not a tensor: auto (its logits, else its first tensor), or a field, key or
    # position (perflab.workloads.outputs)
    output: str = "auto"
    # the loss backpropagated: auto (the model's own loss when its output carries one,
    # e.g. a Hugging Face model given labels, else perflab's for target.kind), model (its
    # own, required), target (perflab's), or pkg.module.fn: fn(output, target) -> scalar
    loss: str = "auto"


@dataclass
class MLPConfig(ModelConfig):
    _target_: str = "perflab.workloads.models.mlp"
    # width of the input vector
    in_features: int = 256
    # width of the hidden layers
    hidden: int = 512
    # number of hidden Linear+GELU layers
    depth: int = 3
    num_classes: int = 10
    input: InputSpec = field(default_factory=lambda: InputSpec(shape=[ref("model.in_features")]))
    target: TargetSpec = field(
        default_factory=lambda: TargetSpec(num_classes=ref("model.num_classes"))
    )


@dataclass
class ConvNetConfig(ModelConfig):
    _target_: str = "perflab.workloads.models.convnet"
    # channels of the first stage; each later stage doubles them
    width: int = 32
    # number of stages (each halves the resolution)
    stages: int = 3
    # residual blocks per stage (conv+BN+ReLU x2 with a skip)
    blocks: int = 1
    # side of the square input image
    image_size: int = 32
    num_classes: int = 10
    input: InputSpec = field(
        default_factory=lambda: InputSpec(
            shape=[3, ref("model.image_size"), ref("model.image_size")]
        )
    )
    target: TargetSpec = field(
        default_factory=lambda: TargetSpec(num_classes=ref("model.num_classes"))
    )


@dataclass
class TransformerConfig(ModelConfig):
    _target_: str = "perflab.workloads.models.transformer"
    vocab_size: int = 1024
    seq_len: int = 64
    d_model: int = 128
    heads: int = 4
    layers: int = 2
    input: InputSpec = field(
        default_factory=lambda: InputSpec(
            shape=[ref("model.seq_len")],
            dtype="int64",
            high=ref("model.vocab_size"),
        )
    )
    target: TargetSpec = field(
        default_factory=lambda: TargetSpec(
            num_classes=ref("model.vocab_size"),
            shape=[ref("model.seq_len")],
        )
    )

    def __post_init__(self) -> None:
        # runs before PerflabConfig's validation: model.d_model=10**20 is refused as too
        # large, not as a width that model.heads does not divide
        check_maxima(self, "model.")
        if not (self.heads >= 1 and self.d_model % self.heads == 0):
            raise ConfigError(
                "model.heads",
                self.heads,
                f"a divisor of model.d_model={self.d_model}",
                "does not divide the model width",
            )


@dataclass
class SpinConfig(ModelConfig):
    """Ground truth: each forward takes exactly ``step_us`` microseconds (the host
    busy-waits on CPU; a calibrated kernel spins on the GPU on CUDA)."""

    _target_: str = "perflab.workloads.spin.spin"
    # the wait per forward call, in microseconds
    step_us: int = 1000
    input: InputSpec = field(default_factory=lambda: InputSpec(shape=[1]))
    target: TargetSpec = field(default_factory=lambda: TargetSpec(kind="none"))


@dataclass
class CustomModelConfig(ModelConfig):
    """The user's own model: set _target_, input and target; arguments go in args."""

    # keyword arguments for the factory, e.g. +model.args.width=64
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class FunctionConfig(ModelConfig):
    """One function, not a model, timed with all of perflab's machinery: ``fn`` is
    called on each batch's inputs (``fn(x)``, ``fn(*x)`` for a tuple, ``fn(**x)`` for a
    dict) with the items of ``args`` as keyword arguments. Sweep ``model.fn`` to compare
    two implementations (docs/configuration.md, "Two implementations of one function")."""

    _target_: str = "perflab.workloads.function.build"
    # the function, "module.function"
    fn: str = MISSING
    # "module.function" called once as make_inputs(batch_size) (torch seeded with seed)
    # returning fn's inputs: a tensor, a tuple of positional or a dict of keyword
    # arguments, built once and kept on the device; null: perflab's synthetic inputs as
    # model.input describes them, one tensor [batch_size, *model.input.shape]
    inputs: str | None = None
    # keyword arguments of fn, e.g. +model.args.causal=true
    args: dict[str, Any] = field(default_factory=dict)
    target: TargetSpec = field(default_factory=lambda: TargetSpec(kind="none"))


@dataclass
class TokenInputSpec(InputSpec):
    """model=hf's input: one sample is a dict in Hugging Face's convention, input_ids
    (int64, ``shape``, drawn from [0, high)), attention_mask (ones) and labels (by
    ``task``), and the batch's target is its labels. HFConfig derives it from its task
    and sizes (perflab.workloads.data.TokenDataset draws the samples)."""

    shape: list[int] = field(default_factory=lambda: [ref("model.seq_len")])
    dtype: str = "int64"
    # the vocabulary: model.vocab_size, config.json's, or perflab's tiny 1024 (0 until
    # the config is validated)
    high: int = 0
    # causal_lm: labels are the input ids (the model shifts them); masked_lm: ~15 % of
    # the positions hold mask_id, labelled with the id they replace, -100 elsewhere;
    # sequence_classification: one class id per sample, below model.num_labels
    task: str = ref("model.task")
    # masked_lm's mask id; null: the config's mask_token_id (model.config's, then
    # config.json's), else high - 1
    mask_id: int | None = None


@dataclass
class HFConfig(ModelConfig):
    """A Hugging Face transformers model (pip install 'perflab[hf]'), built in the trial
    process from its config class with random weights, or from a local directory's
    config.json (its weights loaded when they are there); never from the network."""

    _target_: str = "perflab.workloads.hf.build"
    # a transformers model_type (gpt2, bert, llama, ...); with path, config.json's
    arch: str = "gpt2"
    # a local directory holding config.json, and the weights if they are to be loaded;
    # null: the model is built from arch's config class
    path: str | None = None
    # the head: causal_lm, masked_lm, sequence_classification
    task: str = "causal_lm"
    # tokens per sample
    seq_len: int = 64
    # classes of sequence_classification (>= 2: transformers makes 1 a regression)
    num_labels: int = 2
    # the sizes, as transformers' common config names (num_hidden_layers, hidden_size,
    # num_attention_heads, vocab_size); null: perflab's tiny size with arch (2 layers,
    # width 64, 2 heads, 1024 ids), config.json's with path
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    vocab_size: int | None = None
    # any other attribute of the transformers config, set last: +model.config.n_inner=512
    config: dict[str, Any] = field(default_factory=dict)
    # knobs: the attention implementation (config._attn_implementation), activation
    # (gradient) checkpointing, and whether the forward builds a key/value cache
    attn: str = "eager"
    gradient_checkpointing: bool = False
    use_cache: bool = False
    input: TokenInputSpec = field(default_factory=TokenInputSpec)

    def __post_init__(self) -> None:
        check_maxima(self, "model.")
        for name, allowed in (("task", HF_TASKS), ("attn", HF_ATTENTION)):
            if getattr(self, name) not in allowed:
                raise ConfigError(
                    f"model.{name}", getattr(self, name), ", ".join(allowed), "unknown value"
                )
        if "vocab_size" in self.config:
            raise ConfigError(
                "model.config.vocab_size",
                self.config["vocab_size"],
                "model.vocab_size=N instead: the input ids are drawn from it",
                "set through model.config",
            )
        if self.task == "sequence_classification" and self.num_labels < 2:
            raise ConfigError(
                "model.num_labels",
                self.num_labels,
                ">= 2 (transformers makes a head of 1 label a regression)",
                "too small",
            )
        local = None
        if self.path is not None:
            local = read_local_config(self.path)
            self.arch = local["model_type"]
        else:
            hidden, heads = self.hidden or TINY.hidden, self.heads or TINY.heads
            if hidden % heads:
                raise ConfigError(
                    "model.heads",
                    heads,
                    f"a divisor of the width (model.hidden, {hidden})",
                    "does not divide the model width",
                )
        vocab = vocabulary(self.vocab_size, local, self.path)
        self._derive_data(vocab)
        if self.task == "masked_lm":
            self.input.mask_id = mask_id(self.input.mask_id, self.config, local, vocab)

    def _derive_data(self, vocab: int) -> None:
        """model.input and model.target follow from the task and the sizes: set them, and
        refuse a value set by hand that disagrees (it would be ignored otherwise)."""
        if self.task == "sequence_classification":
            target = TargetSpec(num_classes=self.num_labels, shape=[])
        else:
            target = TargetSpec(num_classes=vocab, shape=[self.seq_len])
        derive = "model=hf derives its inputs from model.task and the sizes"
        derived = {
            "model.input.shape": (list(self.input.shape), [self.seq_len], "set model.seq_len"),
            "model.input.dtype": (self.input.dtype, "int64", "token ids"),
            "model.input.high": (self.input.high or vocab, vocab, "set model.vocab_size"),
            "model.input.task": (self.input.task, self.task, "set model.task"),
        }
        for name, (value, wanted, how) in derived.items():
            if value != wanted:
                raise ConfigError(
                    name, value, f"{wanted} ({how}: {derive})", "does not match the model"
                )
        if self.target not in (TargetSpec(), target):
            t = self.target
            raise ConfigError(
                "model.target",
                f"kind={t.kind} num_classes={t.num_classes} shape={t.shape}",
                f"the target model=hf derives from model.task and the sizes (leave it unset): "
                f"kind={target.kind} num_classes={target.num_classes} shape={target.shape}",
                "does not match the model",
            )
        self.input.high, self.target = vocab, target


@dataclass
class DataConfig:
    # loader: a DataLoader over a Dataset (num_workers and pin_memory apply);
    # memory: one batch built once and kept on the device (pure compute studies)
    source: str = "loader"
    # Dataset factory "module.function" called with dataset_args, returning a map-style
    # torch Dataset of (input, target) items, or of dicts of the model's keyword arguments
    # holding their labels (perflab.workloads.data.Pairs); null = perflab's synthetic
    # dataset
    dataset: str | None = None
    dataset_args: dict[str, Any] = field(default_factory=dict)
    # a collate function "module.function" that makes a batch of a list of items (the
    # DataLoader's collate_fn, the probe batch's too); null = torch's default_collate
    collate: str | None = None
    # samples in the synthetic dataset (the loader cycles through them forever)
    num_samples: int = 2048
    # rounds of augment-like CPU work per synthetic sample (flip, jitter, blur, normalise);
    # this is the per-sample cost that num_workers and pin_memory can hide
    augment_passes: int = 2


@dataclass
class TrialConfig:
    # warm-up lasts at least this many steps and at least warmup_s seconds
    warmup_steps: int = 5
    warmup_s: float = 0.5
    # then goes on until the step time is steady: the median of its latest window within
    # steady_tolerance (relative) of the window before, or within their own noise
    # (perflab.analysis.steady, docs/experiments.md); 0 turns the rule off
    steady_tolerance: float = 0.02
    # the warm-up ends here at the latest, steady or not (recorded as "cap")
    warmup_max_s: float = 5.0
    # the warm-up's last window, once the rule has judged it steady, opens the timed block
    # instead of being thrown away (its samples count toward min_steps and min_s); off:
    # the timed block starts after it, as before 2026-11-24
    keep_steady_window: bool = True
    # the timed block stops once it has min_steps and min_s, or at max_steps or max_s. In
    # a sweep the first trial of each configuration runs to these bounds and fixes its
    # step count (and steps per event window) for every later trial of it; max_s still
    # stops a later trial that runs far slower
    min_steps: int = 20
    min_s: float = 1.0
    max_steps: int = 5000
    max_s: float = 10.0
    # a trial process still running after this many seconds is killed and recorded
    timeout_s: float = 900.0
    # on accelerators, steps shorter than this are timed in groups (one event pair per
    # group) so event overhead stays negligible; per-phase times are then not recorded
    min_event_window_us: float = 500.0
    # run the numerics probe and the evidence pass in every round of a sweep, not only in
    # round 0 (they repeat the same answer; off saves about two steps per trial)
    checks_every_round: bool = False
    # on CUDA, sample GPU telemetry (NVML: utilization, SM clock, temperature, power,
    # throttle reasons) this often during the timed block; 0 turns it off
    telemetry_interval_ms: float = 100.0
    # a trial whose processes (the trial process and what it started) hold more host
    # memory (resident) than this many MiB is killed and recorded as failed
    # (MemoryCapExceeded); null: 80 % of the machine's memory (or its cgroup's limit);
    # 0: no cap (perflab.process.isolation, docs/configuration.md)
    max_memory_mb: float | None = None
    # a trial's log (rNNN.log: what its processes print) keeps its first this many MiB,
    # then a line saying how much was dropped; 0: no cap
    max_log_mb: float = 10.0


@dataclass
class ScheduleConfig:
    """How a sweep (perflab -m ...) is run as an interleaved experiment."""

    # every round runs one trial of every variant, in a freshly shuffled order; fewer
    # than 10 rounds made the t interval measurably anti-conservative
    # (docs/design.md#statistics)
    min_rounds: int = 10
    max_rounds: int = 30
    # stop once every comparison's CI half-width (relative, 0.02 = +-2 %) is this small
    target_half_width: float = 0.02
    # no new round starts once this many seconds have passed
    time_budget_s: float = 240.0
    # confidence level of every interval
    confidence: float = 0.95
    # practical-equivalence band: differences within +-delta do not matter to you.
    # FASTER needs the whole interval above 1 + delta, SLOWER below 1 - delta, and
    # EQUIVALENT inside [1 - delta, 1 + delta] (its half-width must be below delta)
    delta: float = 0.01
    # latency: median step time per trial; throughput: timed ns per item per trial
    metric: str = "latency"
    # run a hidden second copy of a baseline (A/A): it checks the method, never widens
    # the band (outside +-delta: UNRELIABLE; excluding 1 inside it: a bias note)
    sentinel: bool = True
    # before each trial wait up to this many seconds: on CUDA until NVML's power, clock
    # and temperature readings settle (perflab.experiment.settle), elsewhere a plain pause; 0: off
    settle_s: float = 0.0
    # your own treatments: swept key -> its baseline value, e.g. {model.args.fused: false}
    treatments: dict[str, Any] = field(default_factory=dict)
    # evidence of your own knobs: key -> a function pkg.mod.fn(model) -> (observed, ok),
    # or model.ATTRIBUTE, read off the built model and compared with the key's value
    # (perflab.measure.knobs.user_evidence), e.g. {model.args.attn: mypkg.checks.attention}
    evidence: dict[str, Any] = field(default_factory=dict)
    # seeds the order of variants in each round
    shuffle_seed: int = 0
    # "worker": every variant's trials run in a warm worker process that builds the
    # workload once (first call and compilation included) and serves trials_per_worker
    # rounds before a fresh one replaces it; the analysis takes each such generation of
    # workers as one independent unit (docs/design.md#warm-workers). "process": every
    # trial in a fresh process (build, first call and compilation every time)
    isolation: str = "worker"
    trials_per_worker: int = 2
    # a label printed on every result, e.g. "exploratory" for the quick preset
    label: str = ""


@dataclass
class ProfilingConfig:
    # torch.profiler schedule of the separate profiling trial, in steps
    wait: int = 1
    warmup: int = 1
    active: int = 3
    # record input shapes, memory, Python stacks (stacks make traces much larger)
    shapes: bool = True
    memory: bool = True
    stacks: bool = False
    # the compressed trace is kept only up to this size
    max_trace_mb: float = 20.0
    # on CUDA, also export a memory snapshot (memory_snapshot.pickle) of the profiled
    # steps for https://pytorch.org/memory_viz; ignored with a warning on CPU
    memory_snapshot: bool = False


@dataclass
class SlurmConfig:
    """submitit's SLURM parameters for each group's job (scaleout.executor=slurm)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    # a node feature, e.g. a GPU type (sbatch --constraint)
    constraint: str | None = None
    gpus_per_node: int = 1
    cpus_per_task: int = 8
    mem_gb: int = 32
    # wall-clock limit of one group's job, minutes
    timeout_min: int = 120
    # any other sbatch option, e.g. {reservation: perf} or {exclusive: user}
    additional_parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class ScaleOutConfig:
    """Independent groups of a sweep, each run as one job through submitit."""

    # swept keys whose values split the sweep into independent groups, e.g. [model];
    # variants are compared only within a group, on one machine. Empty: no groups.
    group_by: list[str] = field(default_factory=list)
    # where the groups' jobs run: local (processes on this machine) or slurm
    executor: str = "local"
    # groups running at once with the local executor; more than 1 lets groups on one
    # machine disturb each other's timing
    max_parallel: int = 1
    slurm: SlurmConfig = field(default_factory=SlurmConfig)


@dataclass
class ReportConfig:
    # a sweep also publishes its report (report.md, plots, CSVs, summary.json) into this
    # directory, relative to where perflab runs, e.g. reports/amp-study; null: only into
    # the sweep directory
    dir: str | None = None


@dataclass
class PerflabConfig:
    model: Any = MISSING
    data: DataConfig = field(default_factory=DataConfig)
    trial: TrialConfig = field(default_factory=TrialConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    # split a sweep into groups that run as separate jobs (submitit: local or SLURM)
    scaleout: ScaleOutConfig = field(default_factory=ScaleOutConfig)
    # a sweep runs one separate, untimed profiling trial per variant (profile=off: none)
    profile: bool = True
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)
    # samples per step
    batch_size: int = 32
    # train: forward, backward, optimizer step; infer: forward under inference_mode
    mode: str = "train"
    # auto: cuda when available, else cpu. Also a config group (conf/device/), so that
    # the device picks the defaults of the fields you do not set
    device: str = "auto"
    # whether the fields you did not set took the cuda defaults rather than the cpu ones:
    # set by the device option (auto: when torch.cuda.is_available() where perflab
    # started), recorded with the config; not a knob
    cuda_defaults: bool = False
    # autocast dtype: off, bf16, fp16; true = the device's sensible default (bf16 on cpu)
    amp: str = "off"
    # torch.compile mode, or off; true = default
    compile: str = "off"
    # torch.compile(dynamic=...): null lets torch decide, true/false force it
    compile_dynamic: bool | None = None
    # convert model and inputs to torch.channels_last (4-D inputs only)
    channels_last: bool = False
    # perflab's own fused Triton kernels (bias+GELU, LayerNorm) in the built-in models:
    # off or triton (true = triton). On CPU they run in Triton's interpreter: correct,
    # but their timing is not representative.
    fused: str = "off"
    # DataLoader worker processes (0 = load in the training process)
    num_workers: int = 0
    # DataLoader pin_memory (only has an effect with an accelerator)
    pin_memory: bool = False
    # intra-op CPU threads, always set explicitly. 1 by default: on a shared 2-core
    # machine 2 threads under contention made steps 10x slower while 1 stayed stable
    # (measured, see docs/configuration.md); raise it on a dedicated machine.
    threads: int = 1
    # torch.backends.cudnn.benchmark (cuda only)
    cudnn_benchmark: bool = False
    # torch.set_float32_matmul_precision
    matmul_precision: str = "highest"
    # seeds weights, synthetic data and the numerics probe
    seed: int = 0
    # your own step instead of perflab's: "module.function", a factory called once per
    # trial with a perflab.StepContext and returning step(batch) -> output (docs/
    # configuration.md, "Your own step"); null: perflab's step for mode
    step: str | None = None
    # optimizer used in train mode
    optimizer: str = "sgd"
    lr: float = 0.01
    # run settings that are legal but unwise (fp16 autocast on a CPU) with a warning
    # instead of refusing them
    allow_unwise: bool = False

    def __post_init__(self) -> None:
        self.amp = _normalise_switch(self.amp, on="true")
        self.compile = _normalise_switch(self.compile, on="default")
        self.fused = _normalise_switch(self.fused, on="triton")
        # validated by config.compose.to_config, which builds every config from Hydra's
        # (config.rules, which imports these types: the schema does not import it back)


def _normalise_switch(value: str, on: str) -> str:
    """Map the booleans Hydra hands over ("True"/"False") onto the knob's vocabulary."""
    lowered = str(value).lower()
    if lowered == "false":
        return "off"
    if lowered == "true":
        return on
    return lowered


def without_keys(config: dict[str, Any], dotted: tuple[str, ...]) -> dict[str, Any]:
    """A deep copy of a composed config (a plain dict) with the dotted keys removed."""
    out = copy.deepcopy(config)
    for key in dotted:
        *parents, last = key.split(".")
        node: Any = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return out


def model_factory_kwargs(model: ModelConfig) -> dict[str, Any]:
    """The keyword arguments perflab passes to ``model._target_``."""
    kwargs = {f.name: getattr(model, f.name) for f in fields(model)}
    extra = kwargs.pop("args", None) or {}
    for key in MODEL_RESERVED_KEYS:
        kwargs.pop(key, None)
    return {**kwargs, **dict(extra)}


MODEL_SCHEMAS: dict[str, type[ModelConfig]] = {
    "mlp": MLPConfig,
    "convnet": ConvNetConfig,
    "transformer": TransformerConfig,
    "spin": SpinConfig,
    "custom": CustomModelConfig,
    "hf": HFConfig,
    "function": FunctionConfig,
}
