from __future__ import annotations

import pytest

from perflab import resolve as resolve_mod
from perflab.errors import ConfigError
from perflab.resolve import resolve

pytestmark = pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="asserts the CPU-only resolution"
)


def test_auto_device_and_amp_true_resolve_to_cpu_and_bf16(make_config):
    resolved = resolve(make_config("amp=true"))
    assert (resolved.device, resolved.amp_dtype, resolved.compile_mode) == ("cpu", "bfloat16", None)


def test_cuda_without_cuda_is_refused(make_config):
    with pytest.raises(ConfigError, match=r"device=cuda: no CUDA; allowed: auto or cpu"):
        resolve(make_config("device=cuda"))


def test_fp16_on_a_slow_cpu_is_refused_unless_allowed(make_config, monkeypatch):
    monkeypatch.setattr(resolve_mod, "_cpu_has_fast_fp16", lambda: False)
    with pytest.raises(ConfigError, match=r"amp=fp16: unwise on this cpu; allowed: off, bf16"):
        resolve(make_config("amp=fp16"))
    resolved = resolve(make_config("amp=fp16", "allow_unwise=true"))
    assert resolved.amp_dtype == "float16"
    assert any("fp16 autocast" in w for w in resolved.warnings)


def test_unwise_settings_warn(make_config, monkeypatch):
    monkeypatch.setattr(resolve_mod.os, "sched_getaffinity", lambda pid: {0, 1})
    resolved = resolve(make_config("num_workers=3", "pin_memory=true", "compile=reduce-overhead"))
    text = " | ".join(resolved.warnings)
    assert "num_workers=3 exceeds the 2 usable cores" in text
    assert "pin_memory=true has no effect" in text
    assert "reduce-overhead" in text
    assert resolve(make_config()).warnings == []
