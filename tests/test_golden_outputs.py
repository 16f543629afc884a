"""report.md and summary.json of fixed sweeps, byte for byte: the H100 fixtures' real
records and seeded synthetic sweeps. A change of shape in the analysis or the report
must leave both unchanged; a deliberate change regenerates them
(PERFLAB_REGENERATE_GOLDEN=1 pytest tests/test_golden_outputs.py) and shows in the diff.
Device: none (the records are read, nothing is measured)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from sweeps import make_sweep

from perflab.formats.sweepdir import REPORT_FILE, SUMMARY_FILE
from perflab.report import load, write_report

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden" / "sweeps"
H100 = HERE / "fixtures" / "h100"


def _h100(name: str) -> Callable[[Path], None]:
    return lambda root: shutil.copytree(H100 / name, root, dirs_exist_ok=True)


SWEEPS: dict[str, Callable[[Path], object]] = {
    **{
        name: _h100(name)
        for name in (
            "amp_gpu_warmup0.5s",
            "amp_gpu_warmup3s",
            "compile_modes_quick",
            "main_command_quick",
        )
    },
    "synthetic_faster": lambda root: make_sweep(root, seed=3),
    "synthetic_equivalent": lambda root: make_sweep(root, speedup=1.0, rounds=10, seed=4),
    "synthetic_slower_failed_round": lambda root: make_sweep(
        root, speedup=0.9, fail_round=2, seed=5
    ),
    "synthetic_few_rounds": lambda root: make_sweep(root, speedup=1.02, rounds=4, seed=6),
}


@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_report_and_summary_are_unchanged_byte_for_byte(tmp_path, name):
    root = tmp_path / name
    root.mkdir()
    SWEEPS[name](root)
    write_report(load(root))
    for filename in (REPORT_FILE, SUMMARY_FILE):
        golden = GOLDEN / name / filename
        if os.environ.get("PERFLAB_REGENERATE_GOLDEN"):
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_bytes((root / filename).read_bytes())
        assert (root / filename).read_bytes() == golden.read_bytes(), f"{name}/{filename}"
