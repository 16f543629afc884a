# %% [markdown]
# # perflab from a notebook
#
# Two implementations of attention, defined in this notebook, compared by `perflab.run`:
# the same experiment as `perflab -m model=function model.fn=...` (isolated warm
# workers, interleaved rounds, a hidden A/A copy, a numerics check), run from Python.
# The functions are defined here, not in a module: perflab ships them to its trial
# processes by value. Each cell runs as written (tests/test_api.py runs this file).

# %%
import torch

import perflab


def inputs(batch_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The function's inputs, built once per trial with torch seeded: the same for both."""
    return tuple(torch.randn(batch_size, 4, 128, 32) for _ in range(3))  # type: ignore[return-value]


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
    return weights @ v


def attention_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


# %% Run the experiment: progress shows below the cell; Ctrl-C (interrupt the kernel)
# stops it cleanly, and the same call with the same sweep_dir resumes it.
result = perflab.run(
    model="function",
    model__fn=[attention_ref, attention_sdpa],  # a list sweeps; the first is the baseline
    model__inputs=inputs,
    device="cpu",
    preset="quick",
    profile="off",  # no profiler pass: a shorter run (profiles: docs/profiles.md)
)
print(result)

# %% The verdict, the speedup and its interval, typed (perflab.formats.summary.Comparison)
sdpa = result.comparison(model__fn=attention_sdpa)
print(sdpa.verdict, f"{sdpa.estimate.speedup:.2f}x" if sdpa.estimate else "")

# %% A claim checked on the interval, with the decision's error rates
print(result.check_faster(model__fn=attention_sdpa, by=0.05))

# %% pandas: one row per comparison, the swept knobs as columns
frame = result.to_frame()
print(frame[["variant", "speedup", "ci_low", "ci_high", "verdict"]])
