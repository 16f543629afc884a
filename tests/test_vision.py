"""torchvision and timm models through ``model._target_``, as docs/your-model.md runs
them: no glue, a factory perflab calls with model.args. Real `perflab` runs on a tiny
3x32x32 input (device=cpu), where the packages import.

They skip where they do not: torchvision from PyPI is a CUDA build whose compiled ops do
not load against this project's CPU torch (``import torchvision`` raises "RuntimeError:
operator torchvision::nms does not exist"), and timm imports torchvision. The GPU
machine has both."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from console_scripts import command

from perflab.formats.records import load_record

WHY = (
    "torchvision from PyPI does not load against this CPU torch build: "
    "'operator torchvision::nms does not exist' (timm imports torchvision)"
)


def _importable(name: str) -> ModuleType:
    """The package, or a skip that says why not: not installed (pytest.importorskip), or
    installed but raising at import, the RuntimeError of a torchvision built for another
    torch."""
    try:
        return pytest.importorskip(name, reason=f"{name} is not installed: {WHY}")
    except RuntimeError as exc:  # installed, but built for another torch
        pytest.skip(f"{name} is installed but does not import here ({exc}): {WHY}")


TINY = (
    "device=cpu",
    "model=custom",
    "model.input.shape=[3,32,32]",
    "batch_size=4",
    "trial.warmup_steps=1",
    "trial.warmup_s=0",
    "trial.min_steps=2",
    "trial.min_s=0",
    "trial.max_s=2",
)


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command("perflab"), *TINY, *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def _record_of(cwd: Path, result: subprocess.CompletedProcess[str]):  # noqa: ANN202
    assert result.returncode == 0, result.stderr + result.stdout
    [path] = cwd.glob("outputs/**/trials/000.json")
    record = load_record(path)
    assert record.status == "ok", record.error
    return record


@pytest.mark.slow
def test_a_torchvision_resnet18_through_its_factory(tmp_path):
    _importable("torchvision")
    result = _run(
        tmp_path, "model._target_=torchvision.models.resnet18", "model.target.num_classes=1000"
    )
    record = _record_of(tmp_path, result)
    assert result.stdout.startswith("perflab: custom (torchvision.models.resnet18) train")
    assert record.probe is not None and record.probe.output_shape == [4, 1000]
    assert record.evidence["amp"].observed == ["float32"]  # its convolutions, seen


@pytest.mark.slow
def test_a_timm_model_through_create_model(tmp_path):
    _importable("torchvision")
    timm = _importable("timm")
    assert "resnet18" in timm.list_models("resnet18")
    result = _run(
        tmp_path,
        "model._target_=timm.create_model",
        "+model.args.model_name=resnet18",
        "+model.args.num_classes=10",
        "model.target.num_classes=10",
    )
    record = _record_of(tmp_path, result)
    assert result.stdout.startswith("perflab: custom (timm.create_model) train")
    assert record.probe is not None and record.probe.output_shape == [4, 10]


def test_the_skip_names_the_real_cause(tmp_path, monkeypatch):
    """A torchvision that raises at import (the real case on this machine, were it
    installed) skips with its error, not a collection error."""
    (tmp_path / "broken_vision.py").write_text(
        'raise RuntimeError("operator torchvision::nms does not exist")\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(pytest.skip.Exception) as skipped:
        _importable("broken_vision")
    assert "does not import here (operator torchvision::nms does not exist)" in str(skipped.value)
