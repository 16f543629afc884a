"""Sweeps end to end through perflab's Hydra launcher, on the spin ground truth, on the
CPU (the same sweep on a GPU: tests/test_cuda.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from console_scripts import command
from tiny import cpu_runs_fp16_natively

from perflab.analysis.summarize import analyze_dir
from perflab.formats.records import load_record

PERFLAB = command("perflab")
FAST = (
    "device=cpu",
    "preset=quick",
    "schedule.min_rounds=3",
    "schedule.max_rounds=3",
    "trial.warmup_steps=2",
    "trial.warmup_s=0",
    "trial.min_steps=20",
    "trial.min_s=0",
)


def perflab(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PERFLAB, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def sweep_dir(cwd: Path) -> Path:
    [summary] = cwd.glob("multirun/*/*/summary.json")
    return summary.parent


@pytest.mark.slow
def test_spin_ratio_sweep_finds_the_known_ratio(tmp_path):
    # Six rounds of 100-step trials, not FAST's three of 20, each in its own worker: with
    # three units (three rounds, or six at quick's two rounds a worker) the sentinel's t
    # quantile is 4.3, and one preempted trial on a shared machine widened its noise floor
    # past the true 5 % effect (INCONCLUSIVE) in two CI runs. The experiment's 2100 us
    # variant is replaced by 2500 us (a true 20 %): with 2100 us, six rounds once read
    # 0.967x [0.942, 0.992] in CI (2026-11-24), an interval that reached into the +-1 %
    # band and was rightly INCONCLUSIVE. Small effects are the spin benchmark's
    # (benchmarks/spin_pipeline.py, with error rates over many sweeps); this test asks
    # that the pipeline finds a known ratio and says SLOWER.
    known = ("model.step_us=2000,2500",)
    rounds = ("schedule.min_rounds=6", "schedule.max_rounds=6", "trial.min_steps=100")
    rounds += ("schedule.trials_per_worker=1",)
    settle = "schedule.settle_s=0.01"  # on a CPU: a plain pause before each trial
    result = perflab(
        tmp_path,
        "+experiment=spin_ratio",
        *known,
        "report.dir=reports/spin",
        *FAST,
        *rounds,
        settle,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    out = result.stdout
    assert "round 6/6" in out and "A/A sentinel" in out and "SLOWER" in out
    root = sweep_dir(tmp_path)
    for job in ("0", "1", "sentinel"):
        assert sorted(p.name for p in (root / job / "trials").iterdir()) == [
            f"r{r:03d}.json" for r in range(6)
        ]
        assert (root / job / ".hydra" / "overrides.yaml").exists()
    summary = json.loads((root / "summary.json").read_text())
    _assert_lengths_fixed_by_the_first_trial_of_each_configuration(root, summary)
    [c] = summary["comparisons"]
    assert (c["variant"], c["baseline"]) == ("model.step_us=2500", "model.step_us=2000")
    # the true ratio is 2000/2500 = 0.800 plus the step's constant overhead (a few us);
    # within 3 % here: with 2100 us, six rounds on a shared host read 0.944 once and
    # 0.973 twice in a row against 0.952 (2026-11-23, a burst of the host's noise that
    # compressed the ratio); the bias over many rounds is benchmarks/spin_pipeline.py's
    assert 0.776 < c["speedup"] < 0.824 and c["verdict"] == "SLOWER"
    assert summary["stop_reason"] in ("precision reached", "max rounds")
    assert summary["rounds"] == 6
    assert "**SLOWER**" in (root / "report.md").read_text()
    published = tmp_path / "reports" / "spin"
    text = (published / "report.md").read_text()
    assert "**SLOWER**" in text and "## Profiles (separate, untimed trials)" in text
    assert "## Where the difference comes from" in text and "Diagnosis: **" in text
    # traces travel with a published report: its links stay relative and valid
    # (one folder per variant, named by it, for TensorBoard's run list and HTA)
    assert "](traces/model.step_us=2000/perflab.pt.trace.json.gz)" in text
    assert (published / "traces" / "model.step_us=2000" / "perflab.pt.trace.json.gz").exists()
    assert (root / "0" / "profile" / "profile.json").exists()
    assert not (root / "sentinel" / "profile").exists()
    assert (published / "forest.png").exists() and (published / "comparisons.csv").exists()
    # analysing the saved records again gives the same numbers, bit for bit, and
    # `python -m perflab.analysis` prints summary.json's very bytes
    assert json.dumps(analyze_dir(root), sort_keys=True) == json.dumps(summary, sort_keys=True)
    again = subprocess.run(
        [sys.executable, "-m", "perflab.analysis", str(root)], capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout == (root / "summary.json").read_text() + "\n"


def _assert_lengths_fixed_by_the_first_trial_of_each_configuration(root: Path, summary: dict):
    """The first trial of each configuration (the sentinel shares its baseline's) runs to
    the trial bounds; every later one runs its step count, and says so."""
    records = {
        job: [load_record(p) for p in sorted((root / job / "trials").glob("r*.json"))]
        for job in ("0", "1", "sentinel")
    }
    for jobs in (("0", "sentinel"), ("1",)):
        trials = sorted((r for j in jobs for r in records[j]), key=lambda r: r.started_at)
        first, *later = [r.samples for r in trials if r.samples is not None]
        assert first.length == "calibrating"
        assert {(s.length, s.length_from_round) for s in later} == {("fixed", 0)}
        assert {s.timed_steps for s in later} == {first.timed_steps}
        assert all(s.warmup_stop in ("steady", "cap") for s in [first, *later])
        for record in trials:
            assert record.environment["settle"]["how"] == "pause"
    for v in summary["variants"]:
        assert v["trial_length"]["rule"] == "fixed" and len(v["trial_length"]["timed_steps"]) == 1


@pytest.mark.slow
def test_a_failing_variant_is_recorded_and_the_sweep_goes_on(tmp_path):
    result = perflab(
        tmp_path,
        "model=mlp",
        "model.hidden=8",
        "model.in_features=8",
        "batch_size=4",
        "model.target.num_classes=10",
        "model.num_classes=10,2",
        "profile=off",
        *FAST,
    )
    assert result.returncode == 1
    summary = json.loads((sweep_dir(tmp_path) / "summary.json").read_text())
    ok, failed = summary["variants"][0], summary["variants"][1]
    assert ok["ok"] == 3 and not ok["failed"]
    assert failed["ok"] == 0 and len(failed["failed"]) == 1  # not scheduled again
    assert not list(tmp_path.glob("multirun/*/*/*/profile"))  # profile=off
    assert "FAILED trials in model.num_classes=2" in result.stdout


@pytest.mark.slow
def test_an_impossible_variant_stops_the_sweep_before_measuring(tmp_path):
    if cpu_runs_fp16_natively():
        pytest.skip("this CPU runs fp16 autocast natively: nothing to refuse")
    result = perflab(tmp_path, "model=mlp", "amp=off,fp16", *FAST)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("perflab: error: amp=fp16: unwise on this cpu")
    assert not list(tmp_path.glob("multirun/*/*/*/trials/*.json"))


@pytest.mark.slow
def test_a_sweep_without_a_baseline_is_refused(tmp_path):
    result = perflab(tmp_path, "model=mlp", "amp=bf16,true", *FAST)
    assert result.returncode == 2
    assert "no baseline for the sweep" in result.stderr


@pytest.mark.slow
def test_ctrl_c_keeps_finished_trials_and_writes_a_partial_summary(tmp_path):
    import signal
    import time

    proc = subprocess.Popen(
        [
            *PERFLAB,
            "-m",
            "+experiment=spin_ratio",
            "device=cpu",
            "preset=quick",
            "trial.warmup_s=0",
            "trial.min_s=0",
            "schedule.min_rounds=50",
            "schedule.max_rounds=50",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("multirun/*/*/*/trials/r001.json")):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted; finished trials and their records are kept" in err
    summary = json.loads((sweep_dir(tmp_path) / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted"
    assert sum(v["ok"] for v in summary["variants"]) >= 2


@pytest.mark.slow
def test_a_factory_that_cannot_take_its_arguments_stops_the_sweep_first(tmp_path):
    (tmp_path / "usermod.py").write_text("def build(width):\n    raise AssertionError\n")
    result = perflab(
        tmp_path,
        "model=custom",
        "model._target_=usermod.build",
        "model.input.shape=[4]",
        "batch_size=2,4",
        *FAST,
    )
    assert result.returncode == 2
    assert "model._target_=usermod.build" in result.stderr and "width" in result.stderr
    assert not list(tmp_path.glob("multirun/*/*/*/trials/*.json"))
