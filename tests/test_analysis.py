"""Analysis of saved records: deterministic, robust to failures and bad files."""

from __future__ import annotations

import json
import random

from perflab.analysis import EXPERIMENT_FILE, Experiment, analyze_dir, main
from perflab.plan import Job, build_plan
from perflab.records import Samples, TrialRecord, write_json_atomic, write_record

SCHEDULE = {"metric": "latency", "confidence": 0.95, "delta": 0.01, "label": ""}


def make_sweep(tmp_path, speedup=1.25, rounds=8, fail_round=None):
    plan = build_plan(
        [Job(0, ["amp=off"], {"amp": "off"}), Job(1, ["amp=bf16"], {"amp": "bf16"})],
        {},
        sentinel=True,
    )
    rng = random.Random(0)
    for variant in plan.variants:
        base_ns = 1_000_000 / (speedup if variant.name == "1" else 1.0)
        for r in range(rounds):
            machine = 1 + 0.01 * rng.gauss(0, 1)
            steps = [int(base_ns * machine * (1 + 0.005 * rng.gauss(0, 1))) for _ in range(40)]
            record = TrialRecord(
                status="ok",
                config={},
                settings={"batch_size": 8},
                started_at="t",
                finished_at="t",
                round=r,
                samples=Samples(1, steps, {"data": [1] * 40}, [], 5_000_000, 0.04, "min_reached"),
                memory={"peak_bytes": 100},
            )
            if variant.name == "1" and r == fail_round:
                record.status, record.samples = "failed", None
            write_record(tmp_path / variant.dir / "trials" / f"r{r:03d}.json", record)
    write_json_atomic(
        tmp_path / EXPERIMENT_FILE, Experiment(plan, SCHEDULE, "max rounds", rounds, 12.5).to_dict()
    )
    return plan


def test_reanalysis_is_bit_identical(tmp_path):
    make_sweep(tmp_path)
    first = json.dumps(analyze_dir(tmp_path), sort_keys=True)
    assert json.dumps(analyze_dir(tmp_path), sort_keys=True) == first


def test_known_speedup_is_found_and_called(tmp_path):
    make_sweep(tmp_path, speedup=1.25)
    summary = analyze_dir(tmp_path)
    [c] = summary["comparisons"]
    assert c["verdict"] == "FASTER" and c["ci_low"] < 1.25 < c["ci_high"]
    assert c["variant"] == "amp=bf16" and c["baseline"] == "amp=off" and c["rounds"] == 8
    assert summary["sentinel"]["verdict"] in ("EQUIVALENT", "INCONCLUSIVE")
    assert summary["delta"] >= 0.01


def test_a_failed_trial_drops_its_round_from_the_pairing(tmp_path):
    make_sweep(tmp_path, fail_round=3)
    summary = analyze_dir(tmp_path)
    assert summary["comparisons"][0]["rounds"] == 7
    variant = next(v for v in summary["variants"] if v["name"] == "1")
    assert list(variant["failed"]) == ["3"] and variant["ok"] == 7


def test_an_unreadable_record_is_skipped_with_a_warning(tmp_path, capsys):
    make_sweep(tmp_path)
    (tmp_path / "0" / "trials" / "r002.json").write_text("{truncated")
    summary = analyze_dir(tmp_path)
    assert summary["comparisons"][0]["rounds"] == 7
    assert "r002.json" in capsys.readouterr().err


def test_the_analysis_command_prints_the_table(tmp_path, capsys):
    make_sweep(tmp_path)
    main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "amp=bf16" in out and "FASTER" in out and "A/A sentinel" in out
