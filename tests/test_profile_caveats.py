"""The report does not take a profile for more than it is (issue 26, item 7): a profiled
step far off its timed median is flagged, and a family attribution that disagrees with
the timed difference is not shown as its explanation. No torch and no timing: fixed
records (tests/sweeps.py) and profiles written by perflab's own writer."""

from __future__ import annotations

from pathlib import Path

import pytest
from sweeps import make_sweep

from perflab.formats.profile_json import OpRow, Overhead, TraceFile, write_profile
from perflab.formats.sweepdir import profile_record
from perflab.profile.capture import profile_of
from perflab.report import load
from perflab.report.profiles import profiles_section, why_section


def _profile(sweep: Path, job: str, profiled_ms: float, gemm_ms: float) -> None:
    """A CPU profile of 1 step: ``gemm_ms`` of matmul, a profiled step of ``profiled_ms``."""
    row = OpRow(
        name="aten::mm",
        family="gemm",
        calls=1,
        self_cpu_us=gemm_ms * 1e3,
        self_device_us=0.0,
        self_cpu_memory_bytes=0,
        input_shapes="[[4, 4]]",
        annotation=False,
    )
    profile = profile_of(
        variant={},
        device="cpu",
        rows=[row],
        trace_file=TraceFile(trace=None, trace_bytes=0),
        overhead=Overhead(unprofiled_step_s=1e-3, profiled_step_s=profiled_ms / 1e3, ratio=1.5),
        profiled_steps=1,
    )
    write_profile(profile_record(sweep / job), profile)


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """Timed medians of about 1.0 ms (baseline, job 0) and 0.8 ms (job 1): 0.2 ms saved."""
    make_sweep(tmp_path, speedup=1.25)
    return tmp_path


def test_an_attribution_that_agrees_with_the_timed_difference_is_shown(sweep):
    _profile(sweep, "0", profiled_ms=1.5, gemm_ms=0.9)
    _profile(sweep, "1", profiled_ms=1.2, gemm_ms=0.72)
    report = load(sweep)
    [line] = [row for row in why_section(report) if row.startswith("- ")]
    assert "gemm -0.18" in line and "no family attribution" not in line
    assert not any("Off its timed step" in row for row in profiles_section(report, {}))


def test_an_attribution_ten_times_the_timed_difference_is_not_an_explanation(sweep):
    """The hostile pass: 10 ms attributed to a comparison whose timed difference was 0.55 ms."""
    _profile(sweep, "0", profiled_ms=1.9, gemm_ms=3.0)
    _profile(sweep, "1", profiled_ms=1.9, gemm_ms=1.0)
    report = load(sweep)
    [line] = [row for row in why_section(report) if row.startswith("- ")]
    assert "no family attribution shown" in line and "gemm" not in line
    assert "+2.00 ms saved, is not the timed one" in line


def test_a_profiled_step_far_off_its_timed_median_is_flagged(sweep):
    """16.15 ms profiled against a timed median of 7.25 ms once went unremarked."""
    _profile(sweep, "0", profiled_ms=2.3, gemm_ms=0.9)
    _profile(sweep, "1", profiled_ms=1.2, gemm_ms=0.72)
    report = load(sweep)
    text = "\n".join(profiles_section(report, {}))
    assert text.count("Off its timed step") == 1
    assert "a profiled step took 2.3x the timed median" in text
    [line] = [row for row in why_section(report) if row.startswith("- ")]
    assert "ran 2.3x its timed median" in line and "no family attribution shown" in line
