"""examples/ci/perflab.yml, the CI workflow docs/ci.md shows: a well-formed GitHub
Actions workflow, and its Measure and Gate steps run here as written.

Device: cpu (the spin workload)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "examples" / "ci" / "perflab.yml"
# the steps that need GitHub (checkout, set-up, the comment, the artifact) or would
# reinstall the project; the rest run here as written
RUN_HERE = ("Measure", "Gate")


def _workflow() -> dict[Any, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(data, dict)
    return data


def _steps() -> list[dict[str, Any]]:
    (job,) = _workflow()["jobs"].values()
    return list(job["steps"])


def test_the_workflow_is_well_formed():
    """The keys GitHub requires (YAML reads the bare key ``on`` as True)."""
    data = _workflow()
    assert data.get("on", data.get(True)) == {"pull_request": None}
    (job,) = data["jobs"].values()
    assert job["runs-on"] and isinstance(job["timeout-minutes"], int)
    for step in job["steps"]:
        assert ("uses" in step) != ("run" in step), step
        assert set(step) <= {"name", "uses", "run", "with", "env", "if"}, step
    names = [s.get("name") for s in job["steps"]]
    assert all(name in names for name in RUN_HERE)


@pytest.mark.slow
@pytest.mark.heavy
def test_its_measure_and_gate_steps_run_as_written(tmp_path):
    for step in _steps():
        if step.get("name") not in RUN_HERE:
            continue
        out = subprocess.run(
            ["bash", "-e", "-c", step["run"]], cwd=tmp_path, capture_output=True, text=True
        )
        assert out.returncode == 0, f"{step['name']}: {out.stderr[-2000:]}"
    comment = (tmp_path / "perflab-comment.md").read_text()
    assert "FASTER" in comment and "false-positive rate" in comment
    assert (tmp_path / "perflab-bmf.json").is_file()
    assert (tmp_path / "perflab-sweep" / "report.md").is_file()
