"""Profiles (profile.json's model, perflab.formats.profile_json.Profile) for tests that
need one without running a profiling trial: the fields a test looks at are given, the
others hold plain values of their type."""

from __future__ import annotations

from typing import Any

from perflab.formats.profile_json import Busy, OpRow, Overhead, Profile, TraceFile


def make_profile(**fields: Any) -> Profile:
    """A CPU profile of one step with no operators, ``fields`` replacing its values."""
    plain: dict[str, Any] = {
        "variant": {},
        "device": "cpu",
        "profiled_steps": 1,
        "time_basis": "self CPU time",
        "families_us": {},
        "top_ops": [],
        "top_memory": [],
        "phases_us": {},
        "trace_file": TraceFile(trace=None, trace_bytes=0),
        "overhead": Overhead(unprofiled_step_s=1e-3, profiled_step_s=1e-3, ratio=1.0),
    }
    return Profile(**{**plain, **fields})


def op(name: str, family: str = "aten", self_cpu_us: float = 1.0) -> OpRow:
    """An operator row of one call."""
    return OpRow(
        name=name,
        family=family,
        calls=1,
        self_cpu_us=self_cpu_us,
        self_device_us=0.0,
        self_cpu_memory_bytes=0,
        input_shapes="[]",
        annotation=False,
    )


def busy(share: float) -> Busy:
    """Busy time of ``share`` of a 100 us window."""
    return Busy(
        basis="test",
        window_us=100.0,
        busy_us=100.0 * share,
        idle_us=100.0 * (1 - share),
        busy_share=share,
        intervals=1,
        median_interval_us=100.0 * share,
    )
