"""Scale-out: groups, their jobs through submitit's real local executor, merged reports."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from console_scripts import command
from sweeps import make_sweep

from perflab.config.plan import Job
from perflab.errors import ConfigError
from perflab.experiment import scaleout
from perflab.experiment.scaleout import Group, check_group_by, split
from perflab.formats.groups import GroupOutcome
from perflab.formats.records import write_json_atomic
from perflab.formats.sweepdir import CONSOLE_LOG, LOCK_FILE
from perflab.report.merge import write_merged_report

PERFLAB = command("perflab")
REPORT = command("perflab-report")
FAST = (
    "+experiment=spin_ratio",
    "device=cpu",
    "model.step_us=200,300",
    "schedule.treatments={model.step_us:200}",
    "preset=quick",
    "schedule.min_rounds=3",
    "schedule.max_rounds=3",
    "trial.warmup_s=0",
    "trial.min_steps=20",
    "trial.min_s=0",
    "profile=false",
)


def _jobs() -> list[Job]:
    return [
        Job(i, [f"model={m}", f"amp={a}"], {"model": m, "amp": a})
        for i, (m, a) in enumerate([("mlp", "off"), ("mlp", "bf16"), ("spin", "off")])
    ]


def test_split_keeps_command_line_order_and_names_directories():
    groups = split(_jobs(), ["model"])
    assert [(g.key, [j.num for j in g.jobs]) for g in groups] == [
        ("model=mlp", [0, 1]),
        ("model=spin", [2]),
    ]
    assert Group("model=a/b batch_size=2", []).dir_name == "model=a_b,batch_size=2"


def test_group_keys_must_be_swept_and_not_treatments():
    with pytest.raises(ConfigError, match="scaleout.group_by.*not swept"):
        check_group_by(["batch_size"], _jobs(), {})
    # amp is compared with its baseline: grouping by it would split the pair
    with pytest.raises(ConfigError, match="is a treatment"):
        check_group_by(["amp"], _jobs(), {})
    check_group_by(["model"], _jobs(), {})


def _grouped(root: Path, torch_b: str) -> None:
    make_sweep(root / "groups" / "model=a", seed=1)
    make_sweep(root / "groups" / "model=b", seed=2, torch=torch_b)
    write_json_atomic(
        root / "groups.json",
        {
            "groups": [
                {"key": "model=a", "dir": "model=a", "state": "done"},
                {"key": "model=b", "dir": "model=b", "state": "done"},
            ]
        },
    )


def test_merged_report_refuses_step_times_across_different_machines(tmp_path):
    _grouped(tmp_path, torch_b="2.14.0+cpu")
    text = write_merged_report(tmp_path).read_text()
    assert "machines differ in torch" in text
    assert "Not compared: the groups ran on machines that differ in torch" in text
    assert "**FORCED**" not in text and "perflab-report SWEEP_DIR --force" in text
    # ratios measured within each machine are still set side by side: a row per group
    speedups = text.split("## Speedups across groups")[1].split("\n## ")[0]
    assert "amp=bf16 vs amp=off:\n\n| group | speedup | CI | verdict |" in speedups
    assert "| model=a | 1.2" in speedups and "| model=b | 1.2" in speedups
    forced = write_merged_report(tmp_path, force=True).read_text()
    assert "**FORCED**" in forced and "torch: 2.13.0\\+cpu -\\> 2.14.0\\+cpu" in forced


def test_merged_report_compares_step_times_on_equal_machines(tmp_path):
    _grouped(tmp_path, torch_b="2.13.0+cpu")
    text = write_merged_report(tmp_path).read_text()
    assert "### model=b against model=a" in text and "FORCED" not in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {c["group"] for c in summary["comparisons"]} == {"model=a", "model=b"}


def test_the_merged_summary_json_is_read_back_as_written(tmp_path):
    from perflab.formats.summary import MergedSummary, load_merged_summary
    from perflab.report.merge import load_groups, merged_summary

    _grouped(tmp_path, torch_b="2.13.0+cpu")
    write_merged_report(tmp_path)
    data = json.loads((tmp_path / "summary.json").read_text())
    assert list(data) == [
        "schema_version",
        "groups",
        "comparisons",
        "unreliable",
        "health",
        "sentinels",
        "skipped",
        "edited_records",
    ]
    assert [list(c)[-1] for c in data["comparisons"]] == ["group", "group"]  # tagged last
    merged = load_merged_summary(tmp_path / "summary.json")
    assert merged == merged_summary(load_groups(tmp_path))
    assert [(c.group, c.verdict) for c in merged.comparisons] == [
        ("model=a", "FASTER"),
        ("model=b", "FASTER"),
    ]
    # a merged summary.json of the perflab before the model (no schema_version) is read
    del data["schema_version"]
    assert MergedSummary.from_dict(data) == merged


@pytest.mark.slow
def test_report_cli_gates_over_every_group(tmp_path):
    _grouped(tmp_path, torch_b="2.13.0+cpu")
    result = subprocess.run(
        [*REPORT, str(tmp_path), "--fail-on", "not-faster"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    result = subprocess.run(
        [*REPORT, str(tmp_path), "--fail-on", "inconclusive", "--fail-on", "unreliable"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def _layout(root: Path) -> set[str]:
    """Relative paths, with each variant's directory named by its label (a group keeps
    the sweep's Hydra job numbers): what a user or a script finds in a sweep directory."""
    plan = json.loads((root / "experiment.json").read_text())["plan"]
    labels = {
        v["dir"]: v["label"] + ("/sentinel" if v["name"] == "sentinel" else "")
        for v in plan["variants"]
    }
    paths = set()
    for p in root.rglob("*"):
        parts = list(p.relative_to(root).parts)
        # the sweep process's own files: Hydra's, the lock and the console's copy
        if ".hydra" in parts or parts[0] in ("multirun.yaml", LOCK_FILE, CONSOLE_LOG):
            continue
        paths.add("/".join([labels.get(parts[0], parts[0]), *parts[1:]]))
    return paths


@pytest.mark.slow
@pytest.mark.heavy
def test_grouped_sweep_through_submitit_matches_single_machine_runs(tmp_path):
    root = tmp_path / "multirun" / "grouped"
    command = [
        *PERFLAB,
        "-m",
        *FAST,
        "batch_size=1,2",
        "scaleout.group_by=[batch_size]",
        f"hydra.sweep.dir={root}",
    ]
    grouped = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert grouped.returncode == 0, grouped.stderr + grouped.stdout
    assert "2 group(s) by batch_size" in grouped.stdout
    index = json.loads((root / "groups.json").read_text())
    assert [(g["key"], g["state"]) for g in index["groups"]] == [
        ("batch_size=1", "done"),
        ("batch_size=2", "done"),
    ]
    # schema version 2: its number first, each entry's keys as version 1 wrote them
    assert list(index) == ["schema_version", "groups"] and index["schema_version"] == 2
    assert list(index["groups"][0]) == [
        *("key", "dir", "hostname", "stop_reason", "failed", "destroyed", "report"),
        *("seconds", "phases_s", "job_id", "state", "overhead_s"),
    ]
    single_cwd = tmp_path / "single"
    single_cwd.mkdir()
    single = subprocess.run(
        [*PERFLAB, "-m", *FAST, "batch_size=1"],
        cwd=single_cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert single.returncode == 0, single.stderr
    [single_root] = (single_cwd / "multirun").glob("*/*")
    group = root / "groups" / "batch_size=1"
    # the group is a complete sweep directory: the same records, summary and report
    assert _layout(group) == _layout(single_root)
    a = json.loads((group / "summary.json").read_text())
    b = json.loads((single_root / "summary.json").read_text())
    assert a.keys() == b.keys()
    assert [(c["variant"], c["baseline"]) for c in a["comparisons"]] == [
        (c["variant"], c["baseline"]) for c in b["comparisons"]
    ]
    assert [(v["label"], v["trials"]) for v in a["variants"]] == [
        (v["label"], v["trials"]) for v in b["variants"]
    ]
    merged = (root / "report.md").read_text()
    assert "[batch\\_size=2](groups/batch_size=2/report.md)" in merged
    assert "## Speedups across groups" in merged
    # The same command with a larger budget, into the same directory: each group's job
    # resumes its own experiment, keeping its trials and adding one round.
    first = (root / "groups" / "batch_size=2" / "1" / "trials" / "r000.json").read_bytes()
    more = subprocess.run(
        [*command, "schedule.min_rounds=4", "schedule.max_rounds=4"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert more.returncode == 0, more.stderr + more.stdout
    trials = root / "groups" / "batch_size=2" / "1" / "trials"
    assert sorted(p.name for p in trials.iterdir()) == [f"r00{i}.json" for i in range(4)]
    assert (trials / "r000.json").read_bytes() == first
    summary = json.loads((root / "groups" / "batch_size=2" / "summary.json").read_text())
    assert summary["rounds"] == 4


def test_slurm_settings_become_sbatch_options(tmp_path, monkeypatch):
    from submitit.slurm.slurm import _make_sbatch_string

    from perflab.config.schema import ScaleOutConfig, SlurmConfig
    from perflab.experiment.scaleout import make_executor

    cfg = ScaleOutConfig(
        group_by=["model"],
        executor="slurm",
        slurm=SlurmConfig(
            partition="gpu", constraint="h100", mem_gb=64, additional_parameters={"qos": "perf"}
        ),
    )
    monkeypatch.setenv("PATH", "")  # no srun here: a clear config error, not a traceback
    with pytest.raises(ConfigError, match="scaleout.executor=slurm.*srun"):
        make_executor(cfg, tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    executor = make_executor(cfg, tmp_path)
    script = _make_sbatch_string(command="x", folder=str(tmp_path), **executor._executor.parameters)
    for option in (
        "--partition=gpu",
        "--constraint=h100",
        "--gpus-per-node=1",
        "--cpus-per-task=8",
        "--mem=64GB",
        "--time=120",
        "--nodes=1",
        "--qos=perf",
        "--job-name=perflab",
    ):
        assert f"#SBATCH {option}\n" in script


class _SlurmJob:
    """A submitted SLURM job as _wait sees it: done() once its result file exists; like
    submitit's, result() waits for done() (it never returns for a job without a result)."""

    job_id = "42"

    def __init__(self, tmp_path: Path, done_after: int | None) -> None:
        self.paths = SimpleNamespace(stderr=tmp_path / "42_0_log.err")
        self.polls, self.done_after = 0, done_after

    def done(self) -> bool:
        self.polls += 1
        return self.done_after is not None and self.polls > self.done_after

    def result(self) -> GroupOutcome:
        assert self.done(), "submitit's result() would wait here forever"
        return GroupOutcome(
            hostname="node1",
            stop_reason="max rounds",
            failed=[],
            destroyed=[],
            report="report.md",
            seconds=1.0,
            phases_s={"experiment": 1.0},
        )


def _squeue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """A fake squeue on PATH that runs ``body`` and notes each call in a file."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "squeue.calls"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n{body}\n')
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(scaleout, "SLURM_POLL_S", 0.0)
    monkeypatch.setattr(scaleout, "RESULT_GRACE_S", 0.0)
    return calls


@pytest.mark.parametrize(
    ("squeue", "state"),
    [
        ("echo CANCELLED", "CANCELLED"),  # scancel of a pending job: it never ran
        # ended more than MinJobAge ago: SLURM has forgotten it
        (
            "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1",
            scaleout.SLURM_GONE,
        ),
    ],
)
def test_slurm_job_that_ended_without_a_result_is_a_failed_group(
    tmp_path, monkeypatch, squeue, state
):
    """Without SLURM accounting submitit's done() never turns true for such a job (sacct
    fails); squeue tells perflab it ended, and the group is recorded failed, not waited
    on forever (seen with scancel of a pending job on the single-node cluster)."""
    calls = _squeue(tmp_path, monkeypatch, squeue)
    said: list[str] = []
    where = SimpleNamespace(sweep_dir=tmp_path / "groups" / "batch_size=3")
    task = SimpleNamespace(key="batch_size=3", sweep=where)
    entry = scaleout._wait(task, _SlurmJob(tmp_path, None), 0.0, said.append, slurm=True)
    assert (entry.key, entry.dir, entry.job_id, entry.state, entry.outcome) == (
        "batch_size=3",
        "batch_size=3",
        "42",
        "failed",
        None,
    )
    assert entry.error is not None and f"SLURM job ended ({state}) without a result" in entry.error
    assert "42_0_log.err" in entry.error
    assert said == [f"group batch_size=3: job 42 ended ({state}) without a result"]
    assert "--jobs=42" in calls.read_text()


@pytest.mark.parametrize(
    "squeue",
    [
        "echo PENDING",
        # the controller is unreachable for a while: no reason to give the job up
        "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1",
    ],
)
def test_slurm_job_still_queued_is_waited_for(tmp_path, monkeypatch, squeue):
    calls = _squeue(tmp_path, monkeypatch, squeue)
    where = SimpleNamespace(sweep_dir=tmp_path / "groups" / "batch_size=3")
    task = SimpleNamespace(key="batch_size=3", sweep=where)
    entry = scaleout._wait(task, _SlurmJob(tmp_path, 5), 0.0, lambda _: None, slurm=True)
    assert entry.outcome is not None and entry.outcome.stop_reason == "max rounds"
    assert (entry.state, entry.job_id, entry.outcome.hostname) == ("done", "42", "node1")
    assert calls.read_text().count("--jobs=42") >= 2  # asked, and went on waiting
