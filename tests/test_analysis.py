"""Analysis of saved records: deterministic, robust to failures and bad files."""

from __future__ import annotations

import json

from sweeps import make_sweep

from perflab.analysis import analyze_dir, main


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
