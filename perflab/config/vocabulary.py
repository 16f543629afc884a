"""The words perflab's config accepts: the allowed values of every string knob, and the
limits the rules check numbers against. Torch-free; the schema and the rules share them."""

from __future__ import annotations

# Allowed values of the string knobs. "true"/"false" arrive from the command line as
# booleans that OmegaConf turns into "True"/"False"; they are normalised in __post_init__.
AMP_VALUES = ("off", "bf16", "fp16", "true", "false")
COMPILE_VALUES = ("off", "default", "reduce-overhead", "max-autotune", "true", "false")
FUSED_VALUES = ("off", "triton", "true", "false")
EXECUTORS = ("local", "slurm")
MODES = ("train", "infer")
DEVICES = ("auto", "cpu", "cuda")
MATMUL_PRECISIONS = ("highest", "high", "medium")
OPTIMIZERS = ("sgd", "adamw")
DATA_SOURCES = ("loader", "memory")
INPUT_DTYPES = ("float32", "int64")
TARGET_KINDS = ("classes", "regression", "none")
METRICS = ("latency", "throughput")
# schedule.isolation: warm workers serving several trials, or a fresh process per trial
ISOLATIONS = ("worker", "process")
# model=hf: the task heads perflab builds and feeds (transformers' AutoModelFor... classes)
HF_TASKS = ("causal_lm", "masked_lm", "sequence_classification")
# model.attn: transformers' attention implementations (attn_implementation); whether one
# runs here (flash attention needs CUDA and its package) is checked in the trial process
HF_ATTENTION = ("eager", "sdpa", "flex_attention", "flash_attention_2", "flash_attention_3")


# torch.manual_seed takes seeds up to 2**64 - 1; a larger one failed the trial
SEED_MAX = 2**64 - 1


# Keys of a model node that perflab reads itself; every other key goes to the factory.
MODEL_RESERVED_KEYS = ("_target_", "input", "target", "args", "checkpoint", "output", "loss")
