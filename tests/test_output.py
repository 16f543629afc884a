"""Output for the tools people already use: trial noise in per-trial logs, not on the
console; traces in one folder per variant, named by it; memory snapshots linked."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from console_scripts import command
from profiles import make_profile
from sweeps import make_sweep

from perflab.config.plan import Variant
from perflab.formats.profile_json import MemorySnapshot, TraceFile
from perflab.formats.sweepdir import TRACE_DIR, TRACE_FILE
from perflab.process.isolation import output_to
from perflab.report import load, write_report
from perflab.report.artifacts import files_section, folder_names, publish, safe_name

NOISY_MODULE = """
import os
import sys
import warnings

import torch
from torch import nn

print("NOISE-IMPORT")


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 3)

    def forward(self, x):
        print("NOISE-STDOUT")
        print("NOISE-STDERR", file=sys.stderr)
        warnings.warn("NOISE-WARNING")
        os.write(2, b"NOISE-FD2\\n")  # below Python, as C++ code writes
        torch.add(x, 1, out=torch.empty(1))  # ATen's C++ TORCH_WARN: out= resized
        return self.lin(x)


def build():
    print("NOISE-BUILD")
    return Noisy()
"""

NOISY = (
    "device=cpu",
    "model=custom",
    "model._target_=noisy.build",
    "model.input.shape=[5]",
    "model.target.num_classes=3",
    "batch_size=4,8",
    "preset=quick",
    "schedule.min_rounds=3",
    "schedule.max_rounds=3",
    "trial.warmup_steps=1",
    "trial.warmup_s=0",
    "trial.min_steps=3",
    "trial.min_s=0",
    "trial.max_s=2",
)


@pytest.mark.slow
def test_trial_noise_goes_to_per_trial_logs_and_traces_to_a_folder_per_variant(tmp_path):
    (tmp_path / "noisy.py").write_text(textwrap.dedent(NOISY_MODULE))
    sweep = tmp_path / "sweep"
    result = subprocess.run(
        [*command("perflab"), "-m", *NOISY, f"hydra.sweep.dir={sweep}", "report.dir=published"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    console = result.stdout + result.stderr
    # perflab's own lines still print; nothing the trial processes printed does
    assert "round 3/3" in console and "profiling 2/2: batch_size=8: ok" in console
    assert "NOISE" not in console and "UserWarning" not in console, console
    assert "trial processes' own output" in result.stdout
    trial_log = (sweep / "0" / "trials" / "r000.log").read_text()
    for noise in ("NOISE-BUILD", "NOISE-STDOUT", "NOISE-STDERR", "NOISE-FD2"):
        assert noise in trial_log
    assert "UserWarning: NOISE-WARNING" in trial_log and "was resized" in trial_log
    assert "NOISE-STDOUT" in (sweep / "1" / "profile" / "profile.log").read_text()
    assert "NOISE-IMPORT" in (sweep / "0" / "check.log").read_text()
    # the records are untouched by the logs beside them
    assert sorted(p.name for p in (sweep / "sentinel" / "trials").glob("r*.json")) == [
        "r000.json",
        "r001.json",
        "r002.json",
    ]
    published = tmp_path / "published"
    text = (published / "report.md").read_text()
    for label, job in (("batch_size=4", "0"), ("batch_size=8", "1")):
        copy = published / "traces" / label / TRACE_FILE
        assert copy.read_bytes() == (sweep / job / "profile" / TRACE_DIR / TRACE_FILE).read_bytes()
        assert f"[trace](traces/{label}/{TRACE_FILE})" in text
        assert f"[`traces/{label}/`](traces/{label}/{TRACE_FILE})" in text
    assert sorted(p.name for p in (published / "traces").iterdir()) == [
        "batch_size=4",
        "batch_size=8",
    ]
    assert "## Traces and memory snapshots" in text and "tensorboard --logdir traces" in text
    # the sweep directory's own report links the traces where the profiling trial left them
    own = (sweep / "report.md").read_text()
    assert f"(0/profile/{TRACE_DIR}/{TRACE_FILE})" in own


def test_output_to_sends_both_descriptors_to_the_log_and_drops_an_empty_one(tmp_path):
    log = tmp_path / "trials" / "r000.log"
    with output_to(log):
        os.write(1, b"to stdout\n")
        os.write(2, b"to stderr\n")
    assert log.read_text() == "to stdout\nto stderr\n"
    quiet = tmp_path / "quiet" / "r000.log"
    with output_to(quiet):
        pass
    assert not quiet.exists() and not quiet.parent.exists()


def prints_then_crashes(_: object) -> None:
    print("CHILD-STDOUT")
    os.write(2, b"CHILD-FD2\n")
    os.kill(os.getpid(), signal.SIGSEGV)


@pytest.mark.slow
def test_a_child_that_crashes_leaves_what_it_printed_in_its_log(tmp_path):
    log = tmp_path / "sweep" / "0" / "check.log"
    log.parent.parent.mkdir()  # a sweep directory exists before anything runs in it
    # a fork server of its own, started without PYTHONUNBUFFERED: the child's stdout is
    # block-buffered, as on most machines, until output_to makes it line-buffered
    script = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        "from pathlib import Path; from perflab.process.isolation import run_isolated; "
        "print(run_isolated('test_output:prints_then_crashes', None, 120, "
        f"log=Path({str(log)!r})).kind)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.stdout.strip() == "crashed", result.stderr
    assert "CHILD" not in result.stdout + result.stderr
    # the crash lost no line the child printed
    assert log.read_text() == "CHILD-STDOUT\nCHILD-FD2\n"


def test_folder_names_are_safe_in_shells_and_on_windows_and_unique():
    assert safe_name("batch_size=32 amp=true") == "batch_size=32,amp=true"
    assert safe_name("model._target_=pkg/mod:build") == "model._target_=pkg_mod_build"
    assert safe_name("x='a b'|$(rm) *") == "x=_a,b_rm_,_"
    assert safe_name("-rf") == "_-rf" and safe_name(".hidden") == "_.hidden"
    assert safe_name("con") == "_con" and safe_name("trailing.") == "trailing"
    assert len(safe_name("k=" + "v" * 300)) == 80

    def variant(name: str, label: str) -> Variant:
        return Variant(name, label, name, [], {}, {}, None)

    names = folder_names(
        [variant("0", "amp=True"), variant("1", "amp=true"), variant("2", "amp=a/b")]
    )
    # distinct even where case does not count (Windows, macOS)
    assert names == {"0": "amp=True", "1": "amp=true-1", "2": "amp=a_b"}


def _profiled_sweep(root: Path, snapshot: bool = True):
    """A sweep of fixed records whose variants have a trace (and a memory snapshot), as
    a profiling trial leaves them."""
    make_sweep(root)
    report = load(root)
    for v in report.experiment.plan.variants:
        if v.name == "sentinel":
            continue
        profile_dir = root / v.dir / "profile"
        (profile_dir / TRACE_DIR).mkdir(parents=True)
        (profile_dir / TRACE_DIR / TRACE_FILE).write_bytes(gzip.compress(v.name.encode()))
        (profile_dir / "memory_snapshot.pickle").write_bytes(b"snapshot " + v.name.encode())
        report.profiles[v.name] = make_profile(
            trace_file=TraceFile(trace=f"{TRACE_DIR}/{TRACE_FILE}", trace_bytes=len(v.name)),
            memory_snapshot=MemorySnapshot(
                file="memory_snapshot.pickle" if snapshot else None, note=""
            ),
        )
    return report


def test_a_published_report_copies_traces_and_snapshots_per_variant(tmp_path):
    report = _profiled_sweep(tmp_path / "sweep")
    out = tmp_path / "published"
    (out / "traces" / "gone").mkdir(parents=True)  # left by an earlier report here
    (out / "traces" / "gone" / TRACE_FILE).write_bytes(b"old")
    (out / "traces" / "0.json.gz").write_bytes(b"old layout")
    (out / "traces" / "notes.txt").write_text("not perflab's")
    files = publish(report, out)
    assert files.traces == {
        "0": f"traces/amp=off/{TRACE_FILE}",
        "1": f"traces/amp=bf16/{TRACE_FILE}",
    }
    assert files.snapshots == {
        "0": "memory_snapshots/amp=off.pickle",
        "1": "memory_snapshots/amp=bf16.pickle",
    }
    assert gzip.decompress((out / files.traces["1"]).read_bytes()) == b"1"
    assert (out / files.snapshots["0"]).read_bytes() == b"snapshot 0"
    # only this report's variants are left for TensorBoard and HTA to find
    assert sorted(p.name for p in (out / "traces").iterdir()) == [
        "amp=bf16",
        "amp=off",
        "notes.txt",
    ]
    text = "\n".join(files_section(report, files))
    assert f"[`traces/amp=bf16/`](traces/amp=bf16/{TRACE_FILE})" in text
    assert "[`memory_snapshots/amp=off.pickle`](memory_snapshots/amp=off.pickle)" in text
    assert "https://pytorch.org/memory_viz" in text and "trace_plot" in text
    assert "HTA_DISABLE_NS_ROUNDING=1" in text and "include_last_profiler_step=True" in text


def test_the_sweep_directory_report_links_the_files_where_they_are(tmp_path):
    report = _profiled_sweep(tmp_path, snapshot=False)
    files = publish(report, tmp_path)
    assert files.traces["1"] == f"1/profile/{TRACE_DIR}/{TRACE_FILE}" and not files.snapshots
    assert not (tmp_path / "traces").exists()
    text = "\n".join(files_section(report, files))
    assert "CUDA memory snapshot" not in text and "memory_viz" not in text
    assert "tensorboard --logdir ." in text


def test_a_report_without_profiles_has_no_files_section(tmp_path):
    make_sweep(tmp_path)
    assert "## Traces and memory snapshots" not in write_report(load(tmp_path)).read_text()
