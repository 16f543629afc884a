"""Overrides shared by tests that run whole trials."""

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
