"""The plan: cells, baselines, declared treatments and the sentinel."""

from __future__ import annotations

import pytest

from perflab.config.plan import SENTINEL, Job, build_plan, swept_keys
from perflab.errors import PerflabError


def jobs(*specs: dict) -> list[Job]:
    return [Job(i, [f"{k}={v}" for k, v in spec.items()], spec) for i, spec in enumerate(specs)]


def test_knob_sweeps_are_compared_with_their_off_value_within_each_cell():
    plan = build_plan(
        jobs(
            {"batch_size": 32, "amp": "true"},
            {"batch_size": 32, "amp": "off"},
            {"batch_size": 64, "amp": "true"},
            {"batch_size": 64, "amp": "off"},
        ),
        {},
        sentinel=True,
    )
    pairs = [(v.label, b.label) for v, b in plan.comparisons()]
    assert pairs == [
        ("batch_size=32 amp=true", "batch_size=32 amp=off"),
        ("batch_size=64 amp=true", "batch_size=64 amp=off"),
    ]
    assert plan.treatments == {"amp": "off"}
    sentinel, base = plan.sentinel()
    assert sentinel.name == SENTINEL and base.label == "batch_size=32 amp=off"
    assert sentinel.overrides == base.overrides


def test_two_treatments_share_one_baseline():
    plan = build_plan(
        jobs(
            {"amp": "off", "channels_last": False},
            {"amp": "bf16", "channels_last": False},
            {"amp": "off", "channels_last": True},
            {"amp": "bf16", "channels_last": True},
        ),
        {},
        sentinel=False,
    )
    assert {b.name for _, b in plan.comparisons()} == {"0"}
    assert len(plan.comparisons()) == 3 and plan.sentinel() is None


def test_declared_treatment_uses_its_baseline_value():
    plan = build_plan(
        jobs({"model.args.fused": False}, {"model.args.fused": True}),
        {"model.args.fused": False},
        sentinel=True,
    )
    [(variant, base)] = plan.comparisons()
    assert variant.label == "model.args.fused=true" and base.label == "model.args.fused=false"


def test_cells_without_treatments_have_no_comparisons():
    plan = build_plan(jobs({"batch_size": 32}, {"batch_size": 64}), {}, sentinel=True)
    assert plan.comparisons() == []
    assert plan.sentinel()[1].label == "batch_size=32"


def test_a_cell_without_its_baseline_is_refused_with_the_fix():
    with pytest.raises(PerflabError, match=r"no baseline for the sweep: .* amp=off"):
        build_plan(jobs({"amp": "bf16"}, {"amp": "fp16"}), {}, sentinel=True)


def test_keys_with_one_value_are_not_swept():
    assert swept_keys(jobs({"a": 1, "b": 2}, {"a": 1, "b": 3})) == ["b"]


def test_plan_round_trips_through_a_dict():
    plan = build_plan(jobs({"amp": "off"}, {"amp": "bf16"}), {}, sentinel=True)
    assert type(plan).from_dict(plan.to_dict()) == plan


def test_declared_treatments_must_be_swept_and_builtins_are_normalised():
    from perflab.errors import ConfigError

    with pytest.raises(ConfigError, match=r"schedule.treatments=.*not swept; allowed: keys swept"):
        build_plan(jobs({"amp": "off"}, {"amp": "bf16"}), {"model.typo": 1}, sentinel=False)
    plan = build_plan(jobs({"amp": "off"}, {"amp": "bf16"}), {"amp": False}, sentinel=False)
    assert plan.treatments == {"amp": "off"}
