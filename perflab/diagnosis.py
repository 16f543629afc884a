"""The "why": delta breakdowns between variants and a bottleneck diagnosis per variant.

Pure functions over summary.json entries and profile.json files. The seed methodology
(baseline -> bottleneck type -> component -> operation) done automatically: the timed
phase split says which kind of bottleneck, the profile says which operations. Next steps
are hypotheses for the next perflab run, never facts.
"""

from __future__ import annotations

from typing import Any

# Thresholds are data, each with its reason.
INPUT_BOUND_SHARE = 0.20  # a fifth of the step spent waiting for the loader
MEMORY_MOVEMENT_SHARE = 0.20  # a fifth of the profiled time in copies and conversions
DIAGNOSIS_RULES = [
    (
        "input-bound",
        f"data wait >= {INPUT_BOUND_SHARE:.0%} of the median step",
        "the step waits for the DataLoader: loading, not compute, sets the pace",
    ),
    (
        "memory-movement-heavy",
        f"memcpy/memset/conversions >= {MEMORY_MOVEMENT_SHARE:.0%} of profiled time",
        "time goes to moving and converting data, not computing on it",
    ),
    ("compute-bound", "otherwise", "the model's own operators set the pace"),
]


def per_step_families(profile: dict[str, Any]) -> dict[str, float]:
    """Self time per kernel family per profiled step, in ms."""
    steps = int(profile["profiled_steps"])
    return {k: v / 1e3 / steps for k, v in profile["families_us"].items()}


def delta_breakdown(
    base_profile: dict[str, Any], var_profile: dict[str, Any], measured_ms: float
) -> dict[str, Any]:
    """Which kernel families gained or lost time from baseline to variant (ms per step,
    negative = the variant spends less), and what the profiles leave unexplained of the
    measured difference (baseline p50 step - variant p50 step, timed trials)."""
    base, var = per_step_families(base_profile), per_step_families(var_profile)
    deltas = {f: var.get(f, 0.0) - base.get(f, 0.0) for f in dict.fromkeys([*base, *var])}
    deltas = dict(sorted(deltas.items(), key=lambda kv: kv[1]))
    explained = -sum(deltas.values())  # time saved according to the profiles
    return {
        "families_ms": deltas,
        "measured_saving_ms": measured_ms,
        "profiled_saving_ms": explained,
        "unexplained_ms": measured_ms - explained,
    }


def diagnose(variant: dict[str, Any], profile: dict[str, Any] | None) -> dict[str, Any]:
    """Bottleneck type, slowest phase, top operations and hypotheses for one variant
    (a summary.json variant entry and its profile)."""
    phases = variant.get("phase_median_ns") or {}
    step = (variant.get("step_ns") or {}).get("p50") or 0.0
    data_share = phases.get("data", 0.0) / step if step else 0.0
    compute = {k: v for k, v in phases.items() if k in ("forward", "backward", "optimizer")}
    slowest = max(compute, key=compute.__getitem__) if compute else None
    moving = 0.0
    if profile:
        total = sum(profile["families_us"].values()) or 1.0
        moving = profile["families_us"].get("memcpy/memset", 0.0) / total
    kind = (
        "input-bound"
        if data_share >= INPUT_BOUND_SHARE
        else "memory-movement-heavy"
        if moving >= MEMORY_MOVEMENT_SHARE
        else "compute-bound"
    )
    return {
        "bottleneck": kind,
        "data_wait_share": data_share,
        "memory_movement_share": moving,
        "slowest_phase": slowest,
        "top_operations": [op["name"] for op in (profile or {}).get("top_ops", [])[:3]],
        "hypotheses": hypotheses(kind, variant.get("settings") or {}, profile),
    }


def hypotheses(kind: str, settings: dict[str, Any], profile: dict[str, Any] | None) -> list[str]:
    """Next experiments worth running, each a hypothesis with the command to test it."""
    out = []
    cuda = settings.get("device") == "cuda"
    if kind == "input-bound" and not settings.get("num_workers"):
        out.append("more DataLoader workers may hide the loading: perflab -m num_workers=0,2")
    if kind == "input-bound" and cuda and not settings.get("pin_memory"):
        out.append("pinned memory may speed the copies: perflab -m pin_memory=false,true")
    if not settings.get("amp_dtype"):
        out.append(
            "reduced precision may speed the matmuls/convolutions: perflab -m amp=false,true"
        )
    if not settings.get("compile_mode"):
        out.append("torch.compile may fuse the elementwise work: perflab -m compile=off,default")
    convs = profile and any("conv" in op["name"] for op in profile.get("top_ops", []))
    if convs and not settings.get("channels_last"):
        out.append("channels_last may suit the convolutions: perflab -m channels_last=false,true")
    return out
