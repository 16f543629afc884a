"""perflab-report's exports for CI: Bencher Metric Format and github-action-benchmark's
JSON, each checked against its format's published schema (written out below as code),
and the PR comment (perflab.report.exports). Device: none: seeded synthetic sweeps
(tests/sweeps.py) and the summaries of real H100 sweeps (tests/fixtures/h100)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sweeps import make_sweep

from perflab.formats.summary import load_summary
from perflab.report.cli import main
from perflab.report.exports import (
    Results,
    bmf,
    github_speedups,
    github_step_times,
    json_text,
    pr_comment,
)

H100 = Path(__file__).resolve().parent / "fixtures" / "h100"
H100_SWEEPS = [
    "amp_gpu_warmup0.5s",
    "amp_gpu_warmup3s",
    "main_command_quick",
    "compile_modes_quick",
]


def parsed(text: str) -> Any:
    """JSON as a strict reader takes it: NaN and Infinity are not JSON (RFC 8259)."""

    def refuse(token: str) -> None:
        raise AssertionError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def is_number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def check_bmf(doc: Any) -> None:
    """Bencher Metric Format, as its JSON Schema (https://bencher.dev/bmf.json, draft-07;
    https://bencher.dev/docs/reference/bencher-metric-format/) has it: an object whose
    keys (benchmarks, pattern ".+") map to objects whose keys (measures, ".+") map to
    objects with a required number "value" and optional numbers "lower_value" and
    "upper_value". Beyond the schema, what a reader of an interval assumes:
    lower_value <= value <= upper_value."""
    assert isinstance(doc, dict) and doc
    for benchmark, measures in doc.items():
        assert isinstance(benchmark, str) and benchmark, benchmark
        assert isinstance(measures, dict) and measures, benchmark
        for measure, metric in measures.items():
            assert isinstance(measure, str) and measure, (benchmark, measure)
            assert isinstance(metric, dict) and is_number(metric.get("value")), metric
            assert set(metric) <= {"value", "lower_value", "upper_value"}, metric
            low = metric.get("lower_value", metric["value"])
            high = metric.get("upper_value", metric["value"])
            assert is_number(low) and is_number(high), metric
            assert low <= metric["value"] <= high, metric


# github-action-benchmark's extractRangeInfo.ts: a range it can read (and rescale with
# the unit) is "± N" or "+- N"
RANGE = re.compile(r"(\+-|±)\s*\d.+")


def check_github_benchmark(doc: Any) -> None:
    """github-action-benchmark's custom JSON (tool customSmallerIsBetter or
    customBiggerIsBetter; its src/extract.ts, interface BenchmarkResult, read by
    extractCustomBenchmarkResult): an array of objects with a string "name", a number
    "value", a string "unit", and optionally a string "range" and a string "extra";
    names unique (the action draws one series per name)."""
    assert isinstance(doc, list) and doc
    for entry in doc:
        assert isinstance(entry, dict), entry
        assert set(entry) <= {"name", "value", "unit", "range", "extra"}, entry
        assert isinstance(entry["name"], str) and entry["name"], entry
        assert isinstance(entry["unit"], str) and entry["unit"], entry
        assert is_number(entry["value"]), entry
        if "range" in entry:
            assert isinstance(entry["range"], str) and RANGE.fullmatch(entry["range"]), entry
        if "extra" in entry:
            assert isinstance(entry["extra"], str), entry
    names = [e["name"] for e in doc]
    assert len(set(names)) == len(names), names


def run_exports(sweep: Path, out: Path, *flags: str) -> dict[str, Path]:
    files = {
        "--bmf": out / "bmf.json",
        "--github-benchmark-times": out / "times.json",
        "--github-benchmark-speedups": out / "speedups.json",
        "--pr-comment": out / "comment.md",
    }
    main([str(sweep), *[x for f, p in files.items() for x in (f, str(p))], *flags])
    return files


def test_exports_of_a_sweep_follow_the_two_formats(tmp_path):
    make_sweep(tmp_path / "sweep")  # amp=bf16 1.25x faster than amp=off, with a sentinel
    files = run_exports(tmp_path / "sweep", tmp_path / "ci")
    doc = parsed(files["--bmf"].read_text())
    check_bmf(doc)
    assert doc["amp=off"]["latency"]["value"] == pytest.approx(1e6, rel=0.02)  # ns
    speedup = doc["amp=bf16 vs amp=off"]["speedup"]
    assert speedup["lower_value"] < 1.25 < speedup["upper_value"]
    assert set(doc) == {"amp=off", "amp=bf16", "amp=bf16 vs amp=off", "A/A sentinel"}

    times = parsed(files["--github-benchmark-times"].read_text())
    check_github_benchmark(times)
    assert [(t["name"], t["unit"]) for t in times] == [("amp=off", "ms"), ("amp=bf16", "ms")]
    speedups = parsed(files["--github-benchmark-speedups"].read_text())
    check_github_benchmark(speedups)
    [comparison, sentinel] = speedups
    assert comparison["name"] == "amp=bf16 vs amp=off" and comparison["unit"] == "x"
    assert comparison["extra"].startswith("FASTER; 95 % interval [")
    low, high = map(float, re.findall(r"\[(\S+), (\S+)\]", comparison["extra"])[0])
    assert low < comparison["value"] < high
    # the range: the interval's larger distance from the speedup (the exact ends: BMF's)
    assert comparison["value"] == speedup["value"]
    ends = max(speedup["upper_value"] - speedup["value"], speedup["value"] - speedup["lower_value"])
    assert float(comparison["range"].removeprefix("± ")) == pytest.approx(ends, rel=1e-3)
    assert sentinel["name"] == "A/A sentinel"


@pytest.mark.parametrize("name", H100_SWEEPS)
def test_exports_of_real_h100_sweeps_follow_the_two_formats(name):
    results = Results.of(load_summary(H100 / name / "summary.json"))
    check_bmf(parsed(json_text(bmf(results))))
    check_github_benchmark(parsed(json_text(github_step_times(results))))
    check_github_benchmark(parsed(json_text(github_speedups(results))))
    comment = pr_comment(results, "report.md")
    assert len(comment.splitlines()) < 60
    assert "false-positive rate" in comment and comment.rstrip().endswith("(report.md)")


def test_the_pr_comment_leads_with_verdicts_and_links_the_report(tmp_path):
    make_sweep(tmp_path / "sweep", speedup=0.8)  # amp=bf16 is slower
    files = run_exports(tmp_path / "sweep", tmp_path / "ci")
    lines = files["--pr-comment"].read_text().splitlines()
    assert lines[0] == "### perflab: 1 SLOWER"
    [headline] = [x for x in lines if x.startswith("- **SLOWER** amp=bf16 vs amp=off: 0.8")]
    # the interval, the band, and the gate's error rates at this noise and these rounds
    assert re.search(r"\[0\.\d{3}, 0\.\d{3}\] \(95 % interval, band ±1 %\)", headline)
    assert re.search(r"false-positive rate [<\d][^,]* %, power [>\d]", headline)
    assert "for a 2 % slowdown at 8 rounds" in headline
    assert sum(x.startswith("|") for x in lines) == 3  # one small table: head, rule, row
    assert lines[-1] == "[Full report](../sweep/report.md)"
    assert (tmp_path / "ci" / lines[-1][14:-1]).resolve() == tmp_path / "sweep" / "report.md"

    url = "https://ci.example/run/1/report.html"
    files = run_exports(tmp_path / "sweep", tmp_path / "ci", "--report-url", url)
    assert files["--pr-comment"].read_text().splitlines()[-1] == f"[Full report]({url})"


def test_a_pr_comment_of_many_comparisons_stays_short():
    summary = load_summary(H100 / "main_command_quick" / "summary.json")
    many = replace(summary, comparisons=summary.comparisons * 20)
    comment = pr_comment(Results.of(many), "report.md")
    assert len(many.comparisons) >= 40 and len(comment.splitlines()) < 60
    assert "more in the full report" in comment


def test_no_data_comparisons_are_left_out_of_the_json(tmp_path):
    make_sweep(tmp_path / "sweep", rounds=2)  # too few rounds for an interval
    files = run_exports(tmp_path / "sweep", tmp_path / "ci")
    doc = parsed(files["--bmf"].read_text())
    check_bmf(doc)
    assert set(doc) == {"amp=off", "amp=bf16"}  # step times only
    assert parsed(files["--github-benchmark-speedups"].read_text()) == []
    assert "**NO DATA** amp=bf16 vs amp=off" in files["--pr-comment"].read_text()


def test_an_export_that_cannot_be_written_is_refused_before_any_work(tmp_path, capsys):
    make_sweep(tmp_path / "sweep")
    (tmp_path / "a-file").write_text("")
    for flag, target in (("--bmf", tmp_path), ("--pr-comment", tmp_path / "a-file" / "x.md")):
        with pytest.raises(SystemExit) as exited:
            main([str(tmp_path / "sweep"), flag, str(target)])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and err.startswith(f"perflab-report: error: {flag}=")
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "sweep" / "report.md").exists()
