"""Overrides shared by tests that run whole trials."""

# A workload small enough that a whole trial takes well under a second, on the CPU: the
# default tier names its device (tests/conftest.py), and device=auto would pick a GPU.
TINY = (
    "device=cpu",
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

# A user's model (model=custom: add model._target_) of 5 features and 3 classes, with
# whole trials well under a second on the CPU
USER_MODEL = (
    "device=cpu",
    "model=custom",
    "model.input.shape=[5]",
    "model.target.num_classes=3",
    "batch_size=4",
    "trial.warmup_steps=1",
    "trial.warmup_s=0",
    "trial.min_steps=3",
    "trial.min_s=0",
    "trial.max_s=2",
)


def cpu_runs_fp16_natively() -> bool:
    """perflab refuses amp=fp16 on a CPU that only emulates it; the tests of that refusal
    skip on a CPU with AVX512-FP16 or AMX-FP16 (perflab.measure.resolve's own check)."""
    from perflab.measure.resolve import _cpu_has_fast_fp16

    return _cpu_has_fast_fp16()
