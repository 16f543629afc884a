from __future__ import annotations

import pytest

from perflab.errors import ConfigError
from perflab.measure import resolve as resolve_mod
from perflab.measure import sizes
from perflab.measure.resolve import resolve


def _machine(monkeypatch: pytest.MonkeyPatch, cuda: bool, bf16: bool = True) -> None:
    """Make this machine look like one with or without CUDA (and bf16 support on it)."""
    monkeypatch.setattr(resolve_mod.torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(resolve_mod.torch.cuda, "is_bf16_supported", lambda: bf16)


@pytest.mark.device_agnostic  # resolves device=auto on a machine faked either way
@pytest.mark.parametrize(
    ("cuda", "bf16", "expected"),
    [
        (False, False, ("cpu", "bfloat16")),
        (True, True, ("cuda", "bfloat16")),
        (True, False, ("cuda", "float16")),
    ],
)
def test_auto_device_and_amp_true_follow_the_machine(
    make_config, monkeypatch, cuda, bf16, expected
):
    _machine(monkeypatch, cuda, bf16)
    resolved = resolve(make_config("device=auto", "amp=true"))
    assert (resolved.device, resolved.amp_dtype, resolved.compile_mode) == (*expected, None)


def test_cuda_without_cuda_is_refused(make_config, monkeypatch):
    _machine(monkeypatch, cuda=False)
    with pytest.raises(ConfigError, match=r"device=cuda: no CUDA; allowed: auto or cpu"):
        resolve(make_config("device=cuda"))


def test_fp16_on_a_slow_cpu_is_refused_unless_allowed(make_config, monkeypatch):
    monkeypatch.setattr(resolve_mod, "_cpu_has_fast_fp16", lambda: False)
    with pytest.raises(ConfigError, match=r"amp=fp16: unwise on this cpu; allowed: off, bf16"):
        resolve(make_config("device=cpu", "amp=fp16"))
    resolved = resolve(make_config("device=cpu", "amp=fp16", "allow_unwise=true"))
    assert resolved.amp_dtype == "float16"
    assert any("fp16 autocast" in w for w in resolved.warnings)


def test_unwise_settings_warn(make_config, monkeypatch):
    monkeypatch.setattr(sizes.os, "sched_getaffinity", lambda pid: {0, 1})
    overrides = ("device=cpu", "threads=3", "pin_memory=true", "compile=reduce-overhead")
    text = " | ".join(resolve(make_config(*overrides)).warnings)
    assert "threads=3 exceeds the 2 usable cores" in text
    assert "pin_memory=true has no effect" in text
    assert "reduce-overhead" in text
    assert resolve(make_config("device=cpu")).warnings == []


def test_more_workers_than_cores_are_refused_unless_allowed(make_config, monkeypatch):
    # a warning until the OOM killer ran twice on the shared machine (tests/test_sizes.py)
    monkeypatch.setattr(sizes.os, "sched_getaffinity", lambda pid: {0, 1})
    with pytest.raises(ConfigError, match=r"^num_workers=3: more workers than the 2 usable"):
        resolve(make_config("device=cpu", "num_workers=3"))
    warnings = resolve(make_config("device=cpu", "num_workers=3", "allow_unwise=true")).warnings
    assert warnings == [
        "num_workers=3: more workers than the 2 usable cores: they compete with the step "
        "(allow_unwise=true)"
    ]
