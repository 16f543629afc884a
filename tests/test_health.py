"""The leak and stall health flags: their rules on seeded synthetic records, then real
trials in trial processes, on the CPU, of tests/misbehaving.py's model (flagged) and of
the built-in models (not flagged)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tiny import TINY

from perflab.analysis import health
from perflab.analysis.health import leak_flag, stall_flag, stalls
from perflab.analysis.steady import Bounds
from perflab.analysis.variants import variant_summary
from perflab.config.plan import Variant
from perflab.formats.records import Samples, TrialRecord, load_record
from perflab.formats.summary.variant import VariantSummary
from perflab.formats.trial_parts import Invocation
from perflab.measure import memory
from perflab.measure.steps import run_block
from perflab.measure.timing import HostTimer, split_marks
from perflab.process.isolation import run_isolated
from perflab.process.trial_request import RUN_TRIAL, TrialRequest

MIB = 2**20
BASE = 400 * MIB  # about what a CPU trial's RSS holds as its timed block begins


def _record(step_ns: list[int], sample_bytes: list[int] | None = None, group: int = 1):
    samples = Samples(
        steps_per_sample=group,
        step_ns=step_ns,
        phases_ns={},
        warmup_sample_ns=[],
        first_call_ns=1,
        timed_s=sum(step_ns) / 1e9,
        stop_reason="min_reached",
    )
    record = TrialRecord("ok", {}, {"batch_size": 1}, "", "", samples=samples)
    if sample_bytes is not None:
        record.memory.sample_bytes = sample_bytes
    return record


def _memory(rng: random.Random, n: int, leak_per_sample: float, swing: int = 0) -> list[int]:
    """RSS after each of n samples: BASE, plus a leak, plus activations that a sample
    sometimes still holds (up to ``swing`` bytes), page-aligned."""
    return [
        (BASE + int(i * leak_per_sample) + rng.randrange(0, swing + 1)) // 4096 * 4096
        for i in range(n)
    ]


def _steps(rng: random.Random, n: int, median_ns: float = 1e6, sd: float = 0.05) -> list[int]:
    return [int(median_ns * rng.lognormvariate(0, sd)) for _ in range(n)]


# --- the leak rule ---------------------------------------------------------------------


def test_growth_of_a_steady_leak_is_its_rate():
    g = health.growth([BASE + i * MIB for i in range(100)], steps_per_sample=1)
    assert g is not None and g.steady
    assert g.per_step == MIB and g.over_block == 100 * MIB and g.start == BASE
    grouped = health.growth([BASE + i * MIB for i in range(100)], steps_per_sample=4)
    assert grouped is not None and grouped.per_step == MIB / 4
    assert health.growth([BASE] * (health.MIN_READINGS - 1), 1) is None


@pytest.mark.parametrize(
    "shape",
    [
        [0] * 50 + [200 * MIB] * 50,  # a cache that fills up once, mid-block
        [min(i, 10) * 20 * MIB for i in range(100)],  # a ramp over the first steps
        [0] * 100,
    ],
    ids=["one-time jump", "early ramp", "flat"],
)
def test_memory_that_rises_once_is_not_steady(shape):
    g = health.growth([BASE + x for x in shape], 1)
    assert g is not None and not g.steady
    assert leak_flag([_record([10**6] * 100, [BASE + x for x in shape])]) is None


def test_a_leak_in_every_trial_is_flagged_with_its_rate():
    rng = random.Random(1)
    trials = [_record(_steps(rng, 100), _memory(rng, 100, MIB, swing=12 * MIB)) for _ in range(3)]
    flag = leak_flag(trials)
    assert flag is not None and flag.startswith("memory grows +1")
    assert flag.endswith(" MiB per 100 steps through the timed block in 3/3 trials (a leak?)")
    rate = float(flag.split("+")[1].split(" ")[0])
    assert 95 <= rate <= 105  # 1 MiB a step, read through the 12 MiB swing


def test_activations_that_swing_the_rss_are_not_a_leak():
    rng = random.Random(2)
    trials = [_record(_steps(rng, 100), _memory(rng, 100, 0, swing=200 * MIB)) for _ in range(20)]
    assert leak_flag(trials) is None


@pytest.mark.parametrize(
    ("leak_per_step", "base", "flagged"),
    [
        (0.1 * MIB, BASE, False),  # 10 MiB over the block: under 16 MiB
        (0.3 * MIB, 1024 * MIB, False),  # 30 MiB on 1 GiB: under 5 %
        (0.3 * MIB, BASE, True),  # 30 MiB on 400 MiB
        (0.2 * MIB, 10 * MIB, True),  # a small CUDA model's allocation, doubling
    ],
)
def test_a_leak_must_pass_both_the_absolute_and_the_relative_floor(leak_per_step, base, flagged):
    readings = [int(base + i * leak_per_step) for i in range(100)]
    assert (leak_flag([_record([10**6] * 100, readings)]) is not None) is flagged


def test_a_variant_leaks_when_at_least_half_of_its_trials_do():
    leaking = _record([10**6] * 100, [BASE + i * MIB for i in range(100)])
    steady = _record([10**6] * 100, [BASE] * 100)
    assert leak_flag([leaking, steady, steady]) is None
    flag = leak_flag([leaking, leaking, steady])
    assert flag is not None and "in 2/3 trials" in flag


def test_records_without_readings_get_no_leak_flag():
    assert leak_flag([_record([10**6] * 100), _record([10**6] * 100, [])]) is None


# --- the stall rule --------------------------------------------------------------------


def test_periodic_stalls_are_flagged_with_their_count_and_size():
    rng = random.Random(3)
    step_ns = _steps(rng, 100)
    step_ns[49] = step_ns[99] = 2_000_000_000  # 2 s every 50 steps
    assert stall_flag([_record(step_ns)]) == (
        "stalls: 2 of 100 samples >= 5x the median step (up to 2.00 s)"
    )
    quiet = _record(_steps(rng, 100))
    assert stall_flag([_record(step_ns), quiet]) == (
        "stalls: 2 of 200 samples >= 5x the median step (up to 2.00 s) in 1/2 trials"
    )


def test_ordinary_noise_is_not_a_stall():
    rng = random.Random(4)
    trials = [_record(_steps(rng, 1000, sd=0.3)) for _ in range(30)]  # heavy-tailed steps
    for t in trials[:10]:
        assert t.samples is not None
        t.samples.step_ns[rng.randrange(1000)] *= 4  # long, but under 5x
    assert stall_flag(trials) is None
    # preemptions of a 0.2 ms step: 20x its median, far under the 50 ms floor
    preempted = _steps(rng, 1000, median_ns=200_000)
    preempted[10] = preempted[500] = 4_000_000
    assert stalls(preempted) == [] and stall_flag([_record(preempted)]) is None


def test_one_lone_stall_is_not_a_flag():
    rng = random.Random(5)
    step_ns = _steps(rng, 100)
    step_ns[7] = 500_000_000
    assert stalls(step_ns) == [500_000_000]
    assert stall_flag([_record(step_ns)]) is None


def test_the_flags_reach_the_variant_summary():
    rng = random.Random(6)
    step_ns = _steps(rng, 100)
    step_ns[20] = step_ns[70] = 300_000_000
    record = _record(step_ns, [BASE + i * MIB for i in range(100)])
    health = _summary({0: record}).health
    assert any(h.startswith("memory grows +100.0 MiB per 100 steps") for h in health), health
    assert any(h.startswith("stalls: 2 of 100 samples") for h in health), health


# --- the readings ----------------------------------------------------------------------


@pytest.mark.parametrize("phase_marks", [True, False])
def test_the_memory_reading_is_timed_by_no_sample(phase_marks):
    """device=cpu, a fake clock: a step costs 10, a memory reading 1000. The reading runs
    once per sample, between its closing mark and the next sample's opening mark, so no
    sample's time holds any of it."""
    now, order = [0], []
    timer = HostTimer(clock=lambda: now[0])
    group = 1 if phase_marks else 4

    def step(source, mark):
        next(source)
        now[0] += 10
        order.append("step")
        mark()

    def read() -> None:
        now[0] += 1000
        order.append("read")

    run_block(
        step,
        iter(range(100)),
        timer,
        Bounds(8, 8, 0, 10),
        group=group,
        phase_marks=phase_marks,
        clock=lambda: now[0],
        after_sample=read,
    )
    assert order == (["step"] * group + ["read"]) * (8 // group)
    times = split_marks(*timer.collect(), ("step",), group, gapped=True)
    assert times.step_ns == [10 * group] * (8 // group)


def test_sample_memory_reads_the_process_rss():
    with memory.SampleMemory("cpu") as per_sample:
        per_sample.read()
        kept = bytearray(64 * MIB)  # bytearray zero-fills: every page is touched
        per_sample.read()
    first, second = per_sample.in_bytes()
    assert second - first >= 60 * MIB
    del kept


@pytest.mark.cuda
def test_sample_memory_reads_the_cuda_allocator():
    import torch

    torch.zeros(1, device="cuda")  # the allocator's counters exist once CUDA is initialised
    with memory.SampleMemory("cuda") as per_sample:
        per_sample.read()
        kept = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
        per_sample.read()
    first, second = per_sample.in_bytes()
    # allocated bytes, not reserved: the caching allocator's own cache does not count
    assert second - first == kept.numel()
    assert second == torch.cuda.memory_allocated()


# --- real trials, each in a trial process ----------------------------------------------

MISBEHAVING = (
    "device=cpu",
    "model=custom",
    "model._target_=tests.misbehaving.build",
    "model.input.shape=[1]",
    "model.target.kind=none",
    "data=memory",
    "mode=infer",
    # a warm-up of exactly 2 steps: the leak's start, and so its 5 % floor, stay put
    "trial.warmup_steps=2",
    "trial.warmup_s=0",
    "trial.steady_tolerance=0",
    "trial.min_s=0",
    "trial.max_s=10",
)
LEAK, STALL = "memory grows", "stalls:"


def _summary(trials: dict[int, TrialRecord]) -> VariantSummary:
    return variant_summary(Variant("0", "v", "0", [], {}, {}, None), trials, "latency")


def _trial(tmp_path: Path, cfg) -> tuple[TrialRecord, list[str]]:
    path = tmp_path / "000.json"
    request = TrialRequest(cfg, {}, str(path), Invocation(cwd=str(Path(__file__).parent.parent)))
    outcome = run_isolated(RUN_TRIAL, request, timeout_s=300)
    assert outcome.kind == "ok", outcome.message
    record = load_record(path)
    assert record.status == "ok", record.error
    assert record.samples is not None
    # a reading after every timed sample, those of the warm-up's kept window included
    assert len(record.memory.sample_bytes or []) == len(record.samples.step_ns)
    return record, _summary({0: record}).health


def _has(health: list[str], prefix: str) -> bool:
    return any(h.startswith(prefix) for h in health)


def test_a_leaking_model_is_flagged(tmp_path, make_config):
    cfg = make_config(*MISBEHAVING, "+model.args.leak_mb=2", "trial.min_steps=48")
    _, health = _trial(tmp_path, cfg)
    assert _has(health, LEAK) and not _has(health, STALL), health
    flag = next(h for h in health if h.startswith(LEAK))
    assert 150 <= float(flag.split("+")[1].split(" ")[0]) <= 250  # 2 MiB a step


def test_a_stalling_model_is_flagged(tmp_path, make_config):
    stall = ("+model.args.stall_s=0.3", "+model.args.every=10", "trial.min_steps=30")
    record, health = _trial(tmp_path, make_config(*MISBEHAVING, *stall))
    assert _has(health, STALL) and not _has(health, LEAK), health
    assert record.samples is not None and len(record.samples.step_ns) == 30
    # every 10th forward sleeps 0.3 s: three of the 30 timed steps, whatever the phase
    assert _has(health, "stalls: 3 of 30 samples >= 5x the median step (up to 0.3"), health


@pytest.mark.parametrize(
    "overrides",
    [
        (*TINY, "trial.min_steps=300"),
        (
            *(o for o in TINY if not o.startswith("model")),
            "model=convnet",
            "model.width=16",
            "model.stages=2",
            "trial.min_steps=40",
        ),
    ],
    ids=["mlp", "convnet"],
)
def test_ordinary_models_get_neither_flag(tmp_path, make_config, overrides):
    record, flags = _trial(tmp_path, make_config(*overrides))
    assert health.growth(record.memory.sample_bytes or [], 1) is not None  # the rule ran
    assert not _has(flags, LEAK) and not _has(flags, STALL), flags
