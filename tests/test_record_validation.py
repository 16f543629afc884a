"""Nothing lost, nothing mixed: records are validated on load, a record whose round is not
its file's is skipped, and a record changed after it was written is named (checksum)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from fake_trials import FakeTrials
from sweeps import make_sweep

from perflab.analysis.summarize import analyze, analyze_dir
from perflab.analysis.sweep import Experiment, load_trials
from perflab.errors import RecordError
from perflab.formats.records import (
    SCHEMA_VERSION,
    Probe,
    Samples,
    TrialRecord,
    load_record,
    write_record,
)
from perflab.formats.summary import Summary
from perflab.formats.trial_parts import CostParts, KnobEvidence, TrialMemory, TrialWorker
from perflab.report.__main__ import main as analysis_main


def _record(round_: int = 0) -> TrialRecord:
    return TrialRecord(
        status="ok",
        config={"batch_size": 4},
        settings={"device": "cpu", "batch_size": 4},
        started_at="2026-11-22T00:00:00.000+00:00",
        finished_at="2026-11-22T00:00:01.000+00:00",
        round=round_,
        samples=Samples(
            1,
            [10, 12, 11, 13],
            {"data": [0, 2, 1, 1], "forward": [9, 10, 9, 12]},
            [30],
            500,
            0.1,
            "min_reached",
        ),
        memory=TrialMemory(kind="process_rss", peak_bytes=2**20),
        evidence={"threads": KnobEvidence(requested=1, observed=1, ok=True, detail="")},
        worker=TrialWorker(isolation="process", pid=1),
        cost_s=CostParts(timed=0.1),
        probe=Probe(4, 2.3, [4, 10], "float32", 1.5, [0.1, -0.2], 0.7),
    )


def _edit(path: Path, where: str, value: Any) -> None:
    """Change one value of a written record by hand, as a person with an editor would:
    ``where`` is a dotted path, list indices as numbers (``samples.step_ns.3``)."""
    data = json.loads(path.read_text())
    *parents, last = where.split(".")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    path.write_text(json.dumps(data, allow_nan=True))


# --- every value the analysis uses is checked ------------------------------------------

NONSENSE = [
    ("samples.step_ns.3", -5, "samples.step_ns[3]=-5: not a positive duration in ns"),
    ("samples.step_ns.1", 0, "samples.step_ns[1]=0: not a positive duration in ns"),
    ("samples.step_ns.0", math.nan, "samples.step_ns[0]=nan: not a positive duration in ns"),
    ("samples.step_ns.2", "11", "samples.step_ns[2]='11': not a positive duration in ns"),
    ("samples.step_ns.2", True, "samples.step_ns[2]=True: not a positive duration in ns"),
    ("samples.step_ns.2", 11.5, "samples.step_ns[2]=11.5: not a positive duration in ns"),
    ("samples.step_ns", "fast", "samples.step_ns='fast': not a list"),
    ("samples.phases_ns.data.1", -1, "samples.phases_ns.data[1]=-1: not a duration in ns"),
    ("samples.phases_ns", [1, 2], "samples.phases_ns=[1, 2]: not a mapping of phase"),
    ("samples.warmup_sample_ns.0", -30, "samples.warmup_sample_ns[0]=-30: not a duration"),
    ("samples.first_call_ns", -1, "samples.first_call_ns=-1: not a duration in ns"),
    ("samples.first_call_ns", None, "samples.first_call_ns=None: not a duration in ns"),
    ("samples.steps_per_sample", 0, "samples.steps_per_sample=0: not a step count >= 1"),
    ("samples.steps_per_sample", 1.0, "samples.steps_per_sample=1.0: not a step count"),
    ("samples.timed_s", math.nan, "samples.timed_s=nan: not a finite number of seconds >= 0"),
    ("samples.timed_s", math.inf, "samples.timed_s=inf: not a finite number of seconds"),
    ("samples.timed_s", -0.5, "samples.timed_s=-0.5: not a finite number of seconds >= 0"),
    ("samples.timed_s", "0.1", "samples.timed_s='0.1': not a finite number of seconds"),
    ("samples.warmup_kept", -1, "samples.warmup_kept=-1: not a sample count >= 0"),
    ("samples.warmup_kept", 99, "samples.warmup_kept=99: more than the samples it counts"),
    ("status", "great", "status='great': not one of ok, failed, invalid, timeout"),
    ("round", -1, "round=-1: not a round number (an integer >= 0)"),
    ("round", 2.0, "round=2.0: not a round number (an integer >= 0)"),
    ("round", True, "round=True: not a round number (an integer >= 0)"),
    ("samples", None, "samples=None: an ok trial without timed samples"),
    ("settings.batch_size", 0, "settings.batch_size=0: not a batch size"),
    ("memory.peak_bytes", "lots", "memory.peak_bytes='lots': not an integer"),
    ("memory.peak_bytes", -1, "memory.peak_bytes=-1: not a byte count"),
    ("cost_s.timed", math.nan, "cost_s.timed=nan: not a finite number"),
    ("cost_s.timed", -0.5, "cost_s.timed=-0.5: not a finite number of seconds >= 0"),
    ("worker.pid", "12", "worker.pid='12': not an integer"),
    ("evidence.threads.ok", "yes", "evidence.threads.ok='yes': not true or false"),
    ("telemetry.surprise", 1, "telemetry.surprise: not a known field"),
    ("probe.loss", "low", "probe.loss='low': not a number"),
    ("probe.output_sample.1", None, "probe.output_sample[1]=None: not a number"),
    ("environment", [], "environment=[]: not a mapping"),
]


@pytest.mark.parametrize(("where", "value", "message"), NONSENSE)
def test_a_nonsense_value_is_a_bad_record_naming_the_file_the_field_and_the_value(
    tmp_path, where, value, message
):
    path = tmp_path / "trials" / "r002.json"
    write_record(path, _record(2))
    _edit(path, where, value)
    with pytest.raises(RecordError) as raised:
        load_record(path)
    assert str(raised.value).startswith(f"{path}: {message}")


def test_zero_phases_and_empty_warm_ups_are_real_measurements(tmp_path):
    record = _record()
    assert record.samples is not None
    record.samples.phases_ns["data"] = [0, 0, 0, 0]  # a loader that never made it wait
    record.samples.warmup_sample_ns, record.samples.first_call_ns = [], 0
    record.samples.timed_s = 0.0
    write_record(tmp_path / "r000.json", record)
    assert load_record(tmp_path / "r000.json") == record


def test_a_failed_trial_needs_no_samples(tmp_path):
    record = _record()
    record.status, record.samples = "failed", None
    write_record(tmp_path / "r000.json", record)
    assert load_record(tmp_path / "r000.json").status == "failed"


# --- the analysis, the report and resume skip them, one warning per file -----------------


def _spoil(sweep: Path) -> dict[str, str]:
    """Records a person or a bug could leave in a sweep: file -> what the warning says."""
    _edit(sweep / "1" / "trials" / "r002.json", "samples.step_ns.3", -5)
    _edit(sweep / "0" / "trials" / "r001.json", "samples.steps_per_sample", 0)
    _edit(sweep / "sentinel" / "trials" / "r004.json", "samples.step_ns.0", "fast")
    moved = sweep / "0" / "trials" / "r003.json"  # holds round 5: a copy, or a rename
    moved.write_text((sweep / "0" / "trials" / "r005.json").read_text())
    return {
        "1/trials/r002.json": "samples.step_ns[3]=-5: not a positive duration in ns",
        "0/trials/r001.json": "samples.steps_per_sample=0: not a step count >= 1",
        "sentinel/trials/r004.json": "samples.step_ns[0]='fast': not a positive duration",
        "0/trials/r003.json": "round=5 belongs in r005.json, not in r003.json",
    }


def test_load_trials_skips_bad_records_and_a_round_that_is_not_its_files(tmp_path, capsys):
    plan = make_sweep(tmp_path)
    expected = _spoil(tmp_path)
    skipped: list[str] = []
    trials = load_trials(tmp_path, plan, skipped)
    assert sorted(trials["0"]) == [0, 2, 4, 5, 6, 7]  # r005.json is round 5, r003.json dropped
    assert trials["0"][5].round == 5 and 2 not in trials["1"] and 4 not in trials["sentinel"]
    assert len(skipped) == len(expected)
    for name, why in expected.items():
        assert [s for s in skipped if s.startswith(f"{name}: {why}")], (name, skipped)
    err = capsys.readouterr().err
    for name in expected:
        assert err.count(f"perflab: warning: skipping {tmp_path / name}: ") == 1
    summary = analyze(Experiment.load(tmp_path), trials)  # and no crash
    assert [v.trials for v in summary.variants] == [6, 7, 7]


def test_perflab_report_and_the_analysis_go_on_past_bad_records(tmp_path, capsys):
    from perflab.report.cli import main as report_main

    make_sweep(tmp_path)
    expected = _spoil(tmp_path)
    report_main([str(tmp_path)])  # no SystemExit: exit 0
    err = capsys.readouterr().err
    notes = (tmp_path / "report.md").read_text().split("## Failures and notes")[1]
    for name in expected:
        assert f"perflab: warning: skipping {tmp_path / name}: " in err
        assert f"skipped an unreadable file: {name}".replace("_", "\\_") in notes
    assert "Traceback" not in err

    analysis_main([str(tmp_path)])  # another command: its own read, its own warnings
    captured = capsys.readouterr()
    assert "experiment.json" not in captured.err
    assert captured.err.count("perflab: warning: skipping") == len(expected)


@pytest.mark.parametrize("broken", ["plan", "schedule"])
def test_the_analysis_blames_experiment_json_only_when_it_is_bad(tmp_path, capsys, broken):
    make_sweep(tmp_path)
    experiment = json.loads((tmp_path / "experiment.json").read_text())
    experiment[broken] = {}  # a schedule without the metric the analysis reads
    (tmp_path / "experiment.json").write_text(json.dumps(experiment))
    with pytest.raises(SystemExit) as exited:
        analysis_main([str(tmp_path)])
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"perflab: error: {tmp_path / 'experiment.json'}: unreadable")


def test_a_resume_into_a_directory_with_bad_records_measures_them_again(tmp_path, monkeypatch):
    from perflab.config.plan import Job, build_plan
    from perflab.config.schema import ScheduleConfig
    from perflab.experiment import schedule

    plan = build_plan(
        [Job(i, [f"amp={a}"], {"amp": a}) for i, a in enumerate(("off", "bf16"))], {}, sentinel=True
    )
    sched = ScheduleConfig(min_rounds=4, max_rounds=4, shuffle_seed=3)

    def run(fake: FakeTrials, previous: Experiment | None = None) -> Summary:
        monkeypatch.setattr(schedule, "run_one", fake)
        runs = {
            v.name: schedule.VariantRun(None, tmp_path / v.dir, v.source)  # type: ignore[arg-type]
            for v in plan.variants
        }
        return schedule.run_experiment(
            plan, runs, sched, tmp_path, lambda _: None, {}, previous
        ).summary

    run(FakeTrials())
    _edit(tmp_path / "1" / "trials" / "r001.json", "samples.step_ns.0", 0)  # log(0) crashed
    _edit(tmp_path / "0" / "trials" / "r002.json", "samples.step_ns.4", "1000000")
    (tmp_path / "0" / "trials" / "r003.json").write_text(
        (tmp_path / "0" / "trials" / "r000.json").read_text()  # round 0 in r003.json
    )
    again = FakeTrials()
    summary = run(again, Experiment.load(tmp_path))
    assert sorted(again.calls) == [("0", 2), ("0", 3), ("1", 1)]  # measured again
    assert [v.trials for v in summary.variants] == [4, 4, 4]
    assert load_record(tmp_path / "0" / "trials" / "r003.json").round == 3


# --- checksum -----------------------------------------------------------------------------


def test_every_record_is_written_with_a_checksum_of_its_canonical_json(tmp_path):
    path = tmp_path / "r000.json"
    record = _record()
    assert record.probe is not None
    record.probe.loss = float("nan")  # a diverged model: dumped as NaN, read back as NaN
    write_record(path, record)
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION == 6
    body = {k: v for k, v in data.items() if k != "checksum"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
    import hashlib

    from perflab.formats.records import record_checksum

    assert data["checksum"] == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    assert record_checksum(body) == data["checksum"]
    assert load_record(path).edited is False


def test_a_record_changed_after_it_was_written_is_used_but_marked_edited(tmp_path):
    path = tmp_path / "r000.json"
    write_record(path, _record())
    _edit(path, "samples.step_ns.0", 9)  # still a valid duration
    record = load_record(path)
    assert record.edited is True and record.samples is not None
    assert record.samples.step_ns[0] == 9
    assert "edited" not in record.to_dict()  # a mark of this reading, never written

    data = json.loads(path.read_text())
    del data["checksum"]  # a version 3 record without its checksum was edited too
    path.write_text(json.dumps(data))
    assert load_record(path).edited is True


def test_records_of_versions_1_and_2_have_no_checksum_and_are_not_flagged(tmp_path):
    data = _record().to_dict()
    data["schema_version"] = 2
    path = tmp_path / "r000.json"
    path.write_text(json.dumps(data, allow_nan=True))
    assert load_record(path).edited is False
    fixture = Path(__file__).resolve().parent / "fixtures" / "h100"
    v1 = fixture / "amp_gpu_warmup0.5s" / "1" / "trials" / "r000.json"
    assert load_record(v1).edited is False


def test_edited_records_are_named_in_the_summary_and_the_report(tmp_path, capsys):
    from perflab.report import load, write_report

    make_sweep(tmp_path)
    _edit(tmp_path / "1" / "trials" / "r002.json", "samples.step_ns.3", 123_456)
    summary = analyze_dir(tmp_path)
    assert summary["edited_records"] == ["1/trials/r002.json"]
    assert "1/trials/r002.json: changed after it was written" in capsys.readouterr().err
    text = write_report(load(tmp_path)).read_text()
    notes = text.split("## Failures and notes")[1].split("\n## ")[0]
    assert "1/trials/r002.json: changed after it was written: checksum mismatch" in notes
    assert json.loads((tmp_path / "summary.json").read_text())["edited_records"] == [
        "1/trials/r002.json"
    ]
