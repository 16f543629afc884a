"""profile.json as a typed, versioned model (perflab.formats.profile_json): every form of
version 1 is still read, version 2 is written in one order and read back byte for byte,
and the report renders a profile the same from either version. Device: none (files are
read and written, nothing is profiled)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sweeps import make_sweep

from perflab.formats.profile_json import (
    PROFILE_SCHEMA_VERSION,
    Profile,
    ProfileError,
    read_profile,
    write_profile,
)
from perflab.formats.sweepdir import profile_record
from perflab.report import load
from perflab.report.profiles import profiles_section, why_section

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "profile_json"
VERSION_1 = sorted(FIXTURES.glob("v1_*.json"))


def _data(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _oldest(data: dict[str, Any]) -> dict[str, Any]:
    """A version 1 file as perflab wrote it first (2026-11-22): no step count, busy time,
    memory snapshot, host ranges, kernels or annotation flags."""
    old = {k: v for k, v in data.items() if k not in _LATER}
    old["top_ops"] = [_without(row, "annotation", "kernels") for row in data["top_ops"]]
    old["top_memory"] = [_without(row, "annotation") for row in data["top_memory"]]
    return old


_LATER = (
    "profiled_steps",
    "busy",
    "memory_snapshot",
    "host_annotations",
    "device_total_us",
    "top_kernels",
)


def _without(row: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in keys}


def test_the_version_1_fixtures_are_what_they_say():
    assert [p.name for p in VERSION_1] == ["v1_cpu.json", "v1_cuda.json"]
    assert [_data(p)["schema_version"] for p in VERSION_1] == [1, 1]
    assert [_data(p)["device"] for p in VERSION_1] == ["cpu", "cuda"]


@pytest.mark.parametrize("path", VERSION_1, ids=lambda p: p.stem)
def test_a_version_1_file_is_read_with_every_value_it_holds(path):
    profile = read_profile(path)
    assert profile.schema_version == 1 and profile.profiled_steps == 3
    # encoding gives back the file's object, key for key (only the order may differ)
    assert profile.to_dict() == _data(path)
    assert profile.top_ops and profile.busy is not None and profile.host_annotations


@pytest.mark.parametrize("path", VERSION_1, ids=lambda p: p.stem)
def test_the_oldest_form_of_version_1_is_read(path):
    profile = Profile.from_dict(_oldest(_data(path)))
    assert profile.profiled_steps is None and profile.busy is None
    assert profile.memory_snapshot is None and profile.host_annotations is None
    assert all(row.annotation is None and row.kernels is None for row in profile.top_ops)


def test_a_nan_ratio_of_version_1_reads_as_none():
    data = _data(FIXTURES / "v1_cpu.json")
    data["overhead"]["ratio"] = math.nan
    assert Profile.from_dict(data).overhead.ratio is None


def test_version_2_is_written_in_one_order_on_both_devices_and_read_back_byte_for_byte(
    tmp_path,
):
    orders = []
    for path in VERSION_1:
        profile = replace(read_profile(path), schema_version=PROFILE_SCHEMA_VERSION)
        written = tmp_path / f"{path.stem}.json"
        write_profile(written, profile)
        assert read_profile(written) == profile
        again = tmp_path / f"{path.stem}.again.json"
        write_profile(again, read_profile(written))
        assert again.read_bytes() == written.read_bytes()
        orders.append(list(_data(written)))
    cpu, cuda = orders
    # the keys both files hold, in the same order (v1_cuda.json has no memory snapshot)
    assert [k for k in cpu if k in cuda] == [k for k in cuda if k in cpu]
    assert set(cuda) ^ set(cpu) == {
        "device_total_us",
        "top_kernels",
        "trace_note",
        "memory_snapshot",
    }


def _sections(root: Path) -> str:
    report = load(root)
    return "\n".join(profiles_section(report, {}) + why_section(report))


@pytest.mark.parametrize("path", VERSION_1, ids=lambda p: p.stem)
def test_the_report_shows_a_version_1_file_as_its_version_2_rewrite(tmp_path, path):
    make_sweep(tmp_path, speedup=1.25)
    data = _data(path)
    for job, scale in (("0", 1.0), ("1", 0.8)):
        families = {k: v * scale for k, v in data["families_us"].items()}
        written = profile_record(tmp_path / job)
        written.parent.mkdir(parents=True)
        written.write_text(json.dumps({**data, "families_us": families}))
    before = _sections(tmp_path)
    assert "### " in before and "Where the difference comes from" in before
    for job in ("0", "1"):
        profile = read_profile(profile_record(tmp_path / job))
        write_profile(profile_record(tmp_path / job), replace(profile, schema_version=2))
    assert _sections(tmp_path) == before


@pytest.mark.parametrize(
    "spoil, named",
    [
        (lambda p: p.update(schema_version=3), "schema_version=3 is not supported"),
        (lambda p: p.pop("schema_version"), "schema_version=None is not supported"),
        (lambda p: p.update(surprise=1), "surprise: not a known field"),
        (lambda p: p["top_ops"][0].update(calls=-1), "top_ops[0].calls=-1: not a count"),
        (lambda p: p["overhead"].update(ratio="fast"), "overhead.ratio='fast'"),
        (lambda p: p.pop("trace_bytes"), "trace_bytes: missing"),
    ],
)
def test_a_bad_profile_json_is_refused_naming_the_file_and_the_field(tmp_path, spoil, named):
    data = _data(FIXTURES / "v1_cpu.json")
    spoil(data)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError) as refused:
        read_profile(path)
    assert str(refused.value).startswith(f"{path}: {named}")
    assert "\n" not in str(refused.value)


def test_a_newer_schema_says_to_upgrade_perflab():
    data = {**_data(FIXTURES / "v1_cpu.json"), "schema_version": PROFILE_SCHEMA_VERSION + 1}
    with pytest.raises(ValueError, match="upgrade perflab to read it"):
        Profile.from_dict(data)
