"""The "why": delta breakdowns between variants and a bottleneck diagnosis per variant.

Pure functions over what summary.json says a variant measured (perflab.formats.summary.variant)
and profile.json files (perflab.formats.profile_json). The seed methodology (baseline ->
bottleneck type -> component -> operation) done automatically: the timed phase split says
which kind of bottleneck, the profile says which operations. Next steps are hypotheses for
the next perflab run, never facts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from perflab.formats.profile_json import Profile
from perflab.formats.summary.variant import Measured

# Thresholds are data, each with its reason.
INPUT_BOUND_SHARE = 0.20  # a fifth of the step spent waiting for the loader
# Idle device (on CPU: time outside operators) in the profiled steps. The profiler's own
# host overhead inflates it (about 1.2-2x step time on small CPU models here), so the
# bar is set well above what a busy model shows.
IDLE_SHARE = 0.40
MEMORY_MOVEMENT_SHARE = 0.20  # a fifth of the profiled time in copies and conversions
# pointwise, reduction and normalisation operators move a few bytes per flop: when they
# take half the operator time, memory bandwidth, not arithmetic, sets the pace
MEMORY_BOUND_SHARE = 0.50


@dataclass(frozen=True)
class Signals:
    """The shares the rules judge: from the timed phases and from the profile."""

    # "cuda" or "cpu": the variant's device
    device: str
    # the loader's wait, as a share of the median step
    data_wait_share: float
    # the device idle (on CPU: time outside ATen operators) in the profiled steps (None:
    # no profile, or it did not measure it)
    idle_share: float | None
    # copies and conversions, as a share of the profiled time
    memory_movement_share: float
    # pointwise, reduction and normalisation operators, as a share of the profiled time
    elementwise_share: float


@dataclass(frozen=True)
class Rule:
    kind: str
    condition: str
    reason: str
    applies: Callable[[Signals], bool]


# First match wins; the order puts causes before symptoms (a starved loader also leaves
# the device idle).
DIAGNOSIS_RULES = [
    Rule(
        "input-bound",
        f"data wait >= {INPUT_BOUND_SHARE:.0%} of the median step",
        "the step waits for the DataLoader: loading, not compute, sets the pace",
        lambda s: s.data_wait_share >= INPUT_BOUND_SHARE,
    ),
    Rule(
        "launch-bound",
        f"CUDA: the GPU idle >= {IDLE_SHARE:.0%} of the profiled steps",
        "kernels are short and the host cannot launch them fast enough",
        lambda s: s.device == "cuda" and (s.idle_share or 0.0) >= IDLE_SHARE,
    ),
    Rule(
        "overhead-bound",
        f"CPU: outside ATen operators >= {IDLE_SHARE:.0%} of the profiled steps",
        "Python and framework overhead around small operators sets the pace",
        lambda s: s.device != "cuda" and (s.idle_share or 0.0) >= IDLE_SHARE,
    ),
    Rule(
        "memory-movement-heavy",
        f"memcpy/memset/conversions >= {MEMORY_MOVEMENT_SHARE:.0%} of profiled time",
        "time goes to moving and converting data, not computing on it",
        lambda s: s.memory_movement_share >= MEMORY_MOVEMENT_SHARE,
    ),
    Rule(
        "memory-bound",
        f"elementwise/normalisation operators >= {MEMORY_BOUND_SHARE:.0%} of profiled time",
        "operators with few flops per byte dominate: memory bandwidth sets the pace",
        lambda s: s.elementwise_share >= MEMORY_BOUND_SHARE,
    ),
    Rule("compute-bound", "otherwise", "the model's own operators set the pace", lambda s: True),
]


@dataclass(frozen=True)
class Breakdown:
    """Which kernel families gained or lost time from baseline to variant."""

    # per family, ms per step, variant - baseline (negative: the variant spends less)
    families_ms: dict[str, float]
    # the timed difference: baseline p50 step - variant p50 step, ms
    measured_saving_ms: float
    # the time the profiles say the variant saves, ms per step
    profiled_saving_ms: float
    # what the profiles leave unexplained of the timed difference, ms
    unexplained_ms: float


def per_step_families(profile: Profile) -> dict[str, float]:
    """Self time per kernel family per profiled step, in ms."""
    steps = profile.profiled_steps
    if steps is None:
        raise ValueError("a profile written before perflab recorded its step count")
    return {k: v / 1e3 / steps for k, v in profile.families_us.items()}


def delta_breakdown(base_profile: Profile, var_profile: Profile, measured_ms: float) -> Breakdown:
    """Which kernel families gained or lost time from baseline to variant (ms per step,
    negative = the variant spends less), and what the profiles leave unexplained of the
    measured difference (baseline p50 step - variant p50 step, timed trials). Device idle
    time is not added in: in a profiled step it holds the profiler's own host overhead
    and the data wait, which swung by tens of ms between variants on the H100 traces."""
    base, var = per_step_families(base_profile), per_step_families(var_profile)
    deltas = {f: var.get(f, 0.0) - base.get(f, 0.0) for f in dict.fromkeys([*base, *var])}
    deltas = dict(sorted(deltas.items(), key=lambda kv: kv[1]))
    explained = -sum(deltas.values())  # time saved according to the profiles
    return Breakdown(
        families_ms=deltas,
        measured_saving_ms=measured_ms,
        profiled_saving_ms=explained,
        unexplained_ms=measured_ms - explained,
    )


def _share(profile: Profile | None, family: str) -> float:
    if not profile:
        return 0.0
    total = sum(profile.families_us.values()) or 1.0
    return float(profile.families_us.get(family, 0.0)) / total


def signals(variant: Measured, profile: Profile | None) -> Signals:
    """The shares the rules judge: from the timed phases and from the profile."""
    step = variant.step_ns.p50
    data = variant.phase_median_ns.get("data") or 0.0
    share = profile.busy.busy_share if profile and profile.busy else None
    return Signals(
        device=_Knobs.of(variant.settings).device or "cpu",
        data_wait_share=data / step if step else 0.0,
        idle_share=None if share is None else 1.0 - share,
        memory_movement_share=_share(profile, "memcpy/memset"),
        elementwise_share=_share(profile, "elementwise/norm"),
    )


@dataclass(frozen=True)
class Diagnosis:
    """One variant's bottleneck, why, and what to try next."""

    # the kind of the first rule that applies (DIAGNOSIS_RULES)
    bottleneck: str
    # that rule's reason
    because: str
    # the shares the rules judged
    signals: Signals
    # the longest of forward, backward and optimizer (None: no phase timed)
    slowest_phase: str | None
    # the profile's three costliest operators (a kernel launched outside any operator
    # named short)
    top_operations: list[str]
    # next experiments, each a hypothesis with the command to test it
    hypotheses: list[str]


def diagnose(variant: Measured, profile: Profile | None) -> Diagnosis:
    """Bottleneck type, slowest phase, top operations and hypotheses for one variant
    (what summary.json says it measured, and its profile)."""
    compute = {
        k: v
        for k, v in variant.phase_median_ns.items()
        if k in ("forward", "backward", "optimizer") and v is not None
    }
    slowest = max(compute, key=compute.__getitem__) if compute else None
    found = signals(variant, profile)
    rule = next(r for r in DIAGNOSIS_RULES if r.applies(found))
    return Diagnosis(
        bottleneck=rule.kind,
        because=rule.reason,
        signals=found,
        slowest_phase=slowest,
        top_operations=[op.name[:60] for op in (profile.top_ops if profile else [])[:3]],
        hypotheses=hypotheses(rule.kind, variant.settings, profile),
    )


@dataclass(frozen=True)
class _Knobs:
    """The settings the hypotheses look at, from a trial record's settings (None where
    the record has none)."""

    device: str | None
    num_workers: int | None
    pin_memory: bool | None
    batch_size: int | None
    compile_mode: str | None
    fused: str | None
    amp_dtype: str | None
    channels_last: bool | None

    @classmethod
    def of(cls, settings: dict[str, Any]) -> _Knobs:
        return cls(**{f.name: settings.get(f.name) for f in fields(cls)})


def hypotheses(kind: str, settings: dict[str, Any], profile: Profile | None) -> list[str]:
    """Next experiments worth running, each a hypothesis with the command to test it."""
    out = []
    knobs = _Knobs.of(settings)
    cuda = knobs.device == "cuda"
    if kind == "input-bound" and not knobs.num_workers:
        out.append("more DataLoader workers may hide the loading: perflab -m num_workers=0,2")
    if kind == "input-bound" and cuda and not knobs.pin_memory:
        out.append("pinned memory may speed the copies: perflab -m pin_memory=false,true")
    if kind in ("launch-bound", "overhead-bound"):
        batch = knobs.batch_size
        if batch:
            out.append(
                "a larger batch may amortise the per-operator overhead: "
                f"perflab -m batch_size={batch},{2 * batch}"
            )
        if cuda and knobs.compile_mode in (None, "default"):
            out.append(
                "CUDA graphs may remove the launch overhead: perflab -m compile=off,reduce-overhead"
            )
    if kind == "memory-bound" and (knobs.fused or "off") == "off":
        out.append(
            "perflab's fused Triton kernels may save memory traffic: perflab -m fused=off,triton"
        )
    if not knobs.amp_dtype:
        out.append(
            "reduced precision may speed the matmuls/convolutions: perflab -m amp=false,true"
        )
    if not knobs.compile_mode:
        out.append("torch.compile may fuse the elementwise work: perflab -m compile=off,default")
    convs = profile and any("conv" in op.name for op in profile.top_ops)
    if convs and not knobs.channels_last:
        out.append("channels_last may suit the convolutions: perflab -m channels_last=false,true")
    return out
