"""The report: golden markdown from fixed records, escaping, CSVs and perflab-report."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from console_scripts import command
from sweeps import make_sweep

from perflab.formats.records import load_record, write_json_atomic, write_record
from perflab.report import load, write_report
from perflab.report.cli import GATES
from perflab.report.markdown import esc, render
from perflab.report.markdown_text import table

GOLDEN = Path(__file__).resolve().parent / "golden" / "report.md"
PERFLAB_REPORT = command("perflab-report")


def test_report_markdown_matches_the_golden_file(tmp_path):
    make_sweep(tmp_path)
    text = (write_report(load(tmp_path))).read_text()
    if os.environ.get("PERFLAB_REGENERATE_GOLDEN"):
        GOLDEN.write_text(text)  # deliberate: PERFLAB_REGENERATE_GOLDEN=1 pytest ...
    assert text == GOLDEN.read_text()


def test_report_states_verdict_numerics_and_hides_the_machine(tmp_path):
    make_sweep(tmp_path)
    text = write_report(load(tmp_path)).read_text()
    assert "amp=bf16 vs amp=off: 1.26x faster" in text and "**FASTER**" in text
    assert "numerics OK" in text and "amp: yes" in text
    assert "secret-host" not in text and "/somewhere" not in text and str(tmp_path) not in text


def test_user_values_are_escaped(tmp_path):
    make_sweep(tmp_path, label="amp=a|b*c")
    text = write_report(load(tmp_path)).read_text()
    assert "a\\|b\\*c" in text
    # unescaped only inside code spans, never where it would break a table or emphasis
    assert all("a|b*c" not in line for line in text.splitlines() if "`" not in line)
    assert esc("x_y [z]") == "x\\_y \\[z\\]"


def test_csv_exports_are_the_tidy_tables(tmp_path):
    make_sweep(tmp_path)
    report = load(tmp_path)
    write_report(report)
    comparisons = pd.read_csv(tmp_path / "comparisons.csv")
    assert list(comparisons["verdict"]) == ["FASTER"]
    assert comparisons.loc[0, "speedup"] == report.comparisons.loc[0, "speedup"]
    variants = pd.read_csv(tmp_path / "variants.csv")
    assert len(variants) == 3 and "p99_ms" in variants
    assert bool(pd.read_csv(tmp_path / "numerics.csv").loc[0, "ok"])


def test_the_markdown_renders_the_typed_values_not_the_frames(tmp_path):
    """The frames are exports: emptied, the report reads the same."""
    make_sweep(tmp_path, fail_round=2)
    report = load(tmp_path)
    text = render(report)
    report.comparisons = report.variants = report.numerics = pd.DataFrame()
    assert render(report) == text


def test_an_unfinished_sweep_is_reported_as_such(tmp_path):
    make_sweep(tmp_path, fail_round=2)
    data = (tmp_path / "experiment.json").read_text().replace('"max rounds"', '"running"')
    (tmp_path / "experiment.json").write_text(data)
    (tmp_path / "1" / "trials" / "r007.json").unlink()  # the last round never finished
    text = write_report(load(tmp_path)).read_text()
    assert "**Incomplete**" in text and "Missing trials: amp=bf16 has 7 of 8" in text


@pytest.mark.slow
def test_perflab_report_command(tmp_path):
    make_sweep(tmp_path / "sweep")
    result = subprocess.run(
        [*PERFLAB_REPORT, str(tmp_path / "sweep"), "--out", str(tmp_path / "published")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "published" / "report.md").exists()
    bad = subprocess.run([*PERFLAB_REPORT, str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2 and "not a perflab sweep directory" in bad.stderr


def test_plots_are_written_as_non_empty_pngs_and_linked(tmp_path):
    make_sweep(tmp_path)
    text = write_report(load(tmp_path)).read_text()
    for name in ("forest.png", "rounds.png", "distributions.png", "phases.png", "memory.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5000, name
        assert f"]({name})" in text  # a relative link: the folder can be moved as is
    assert not (tmp_path / "scaling.png").exists()  # batch_size was not swept


@pytest.mark.slow
def test_fail_on_gates_exit_1_only_when_they_match(tmp_path):
    make_sweep(tmp_path)  # one comparison, FASTER, numerics OK

    def gate(*names: str) -> subprocess.CompletedProcess[str]:
        flags = [x for n in names for x in ("--fail-on", n)]
        return subprocess.run(
            [*PERFLAB_REPORT, str(tmp_path), *flags], capture_output=True, text=True
        )

    assert gate("slower", "numerics", "inconclusive").returncode == 0
    result = gate("not-faster", "slower")
    assert result.returncode == 0
    make_sweep(tmp_path, speedup=0.8)
    result = gate("slower")
    assert result.returncode == 1 and "gate failed: slower: amp=bf16 vs amp=off" in result.stderr
    assert gate("bogus").returncode == 2


def against(tmp_path, *flags: str, **new: object) -> subprocess.CompletedProcess[str]:
    make_sweep(tmp_path / "old")
    make_sweep(tmp_path / "new", seed=1, **new)
    return subprocess.run(
        [*PERFLAB_REPORT, str(tmp_path / "new"), "--against", str(tmp_path / "old"), *flags],
        capture_output=True,
        text=True,
    )


def test_against_compares_matching_variants_of_two_runs(tmp_path):
    result = against(tmp_path, scale=0.9)  # the new code is 10 % faster everywhere
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "new" / "report.md").read_text()
    assert "## Against old" in text and "FORCED" not in text
    rows = [line for line in text.splitlines() if line.startswith("| amp=")]
    assert any("FASTER" in line and "1.1" in line for line in rows[-2:])


@pytest.mark.slow
def test_against_refuses_different_environments_unless_forced(tmp_path):
    refused = against(tmp_path, torch="2.14.0+cpu")
    assert refused.returncode == 2
    assert "environments differ (torch: 2.13.0+cpu -> 2.14.0+cpu)" in refused.stderr
    forced = against(tmp_path, "--force", torch="2.14.0+cpu")
    assert forced.returncode == 0
    assert "**FORCED**" in (tmp_path / "new" / "report.md").read_text()


@pytest.mark.slow
def test_against_gates_ci_on_a_regression(tmp_path):
    result = against(tmp_path, "--fail-on", "slower", scale=1.2)
    assert result.returncode == 1 and "in old (SLOWER)" in result.stderr


@pytest.mark.slow
def test_reports_are_made_without_torch(tmp_path):
    make_sweep(tmp_path)
    code = (
        "import sys; from perflab.report import load, write_report; "
        f"write_report(load({str(tmp_path)!r})); "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_memory_section_shows_cuda_phases_and_gpu_telemetry(tmp_path):
    from dataclasses import replace
    from types import SimpleNamespace

    from perflab.analysis.summarize import analyze_dir
    from perflab.formats.summary import Summary
    from perflab.formats.summary.variant import Telemetry
    from perflab.formats.trial_parts import PhaseReading
    from perflab.report.memory_section import resources_section

    make_sweep(tmp_path)
    [variant, *_] = Summary.from_dict(analyze_dir(tmp_path)).variants
    assert variant.measured is not None
    measured = replace(
        variant.measured,
        peak_memory_bytes=3 * 2**30,
        memory_kind="cuda_allocator",
        memory_by_phase=[
            PhaseReading(
                phase="forward",
                allocated_bytes=2 * 2**30,
                reserved_bytes=4 * 2**30,
                peak_allocated_bytes=3 * 2**30,
            )
        ],
        telemetry=Telemetry(
            available=True,
            device="NVIDIA H100 80GB HBM3",
            trials=1,
            util_pct_median=98.0,
            clock_ratio_median=0.99,
            temperature_c_max=64.0,
            power_w_median=612.0,
        ),
    )
    summary = SimpleNamespace(variants=[replace(variant, measured=measured)])
    report = SimpleNamespace(summary=summary)
    text = "\n".join(resources_section(report))
    # the telemetry a line of a list under the table, not its last column
    assert "| amp=off | 3,072.0 | 2,048.0 (3,072.0) |\n" in text
    assert "GPU telemetry:\n\n- amp=off: util 98 %, SM clock 99% of max, <= 64 C, 612 W" in text
    assert "NVIDIA H100 80GB HBM3" in text and "allocated MiB" in text


def _unreadable(sweep: Path) -> None:
    """Every record of a newer perflab: nothing this one can read."""
    for path in sweep.glob("*/trials/r*.json"):
        path.write_text(path.read_text().replace('"schema_version":', '"schema_version":9', 1))


@pytest.mark.parametrize("gate", sorted(GATES))
def test_every_gate_fails_when_it_has_nothing_to_judge(tmp_path, capsys, gate):
    from perflab.report.cli import main

    make_sweep(tmp_path)
    _unreadable(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main([str(tmp_path), "--fail-on", gate])
    assert exited.value.code == 1
    [line] = [x for x in capsys.readouterr().err.splitlines() if "gate failed" in x]
    assert line.startswith(f"perflab-report: gate failed: {gate}: nothing to judge: ")
    assert "24 record file(s) could not be read" in line
    assert (tmp_path / "report.md").exists()  # the report is still written


def test_gates_judge_what_has_data(tmp_path, capsys):
    from perflab.report.cli import main

    make_sweep(tmp_path)
    main(
        [str(tmp_path), *[x for g in sorted(GATES) if g != "not-faster" for x in ("--fail-on", g)]]
    )
    assert "gate failed" not in capsys.readouterr().err


@pytest.mark.slow
def test_a_grouped_sweep_without_data_fails_its_gates(tmp_path):
    from sweeps import make_sweep as sweep

    for key in ("model=a", "model=b"):
        sweep(tmp_path / "groups" / key)
        _unreadable(tmp_path / "groups" / key)
    groups = [{"key": k, "dir": k, "state": "done"} for k in ("model=a", "model=b")]
    write_json_atomic(tmp_path / "groups.json", {"groups": groups})
    for gate in ("slower", "unreliable"):
        result = subprocess.run(
            [*PERFLAB_REPORT, str(tmp_path), "--fail-on", gate], capture_output=True, text=True
        )
        assert result.returncode == 1, result.stderr
        assert f"gate failed: {gate}: nothing to judge: " in result.stderr


def _cells(line: str) -> int:
    """Cells of a markdown table row: the pipes no backslash escapes, less one."""
    return len(re.findall(r"(?<!\\)(?:\\\\)*\|", line)) - 1


def test_control_characters_and_pipes_cannot_change_the_markdown(tmp_path):
    make_sweep(tmp_path, label="amp=x\n# injected|y\r## more")
    text = write_report(load(tmp_path)).read_text()
    lines = text.splitlines()
    assert not [x for x in lines if "injected" in x and x.lstrip("> -").startswith("#")]
    assert not [x for x in lines if x.startswith(("## more", "# injected"))]
    assert "x\\\\n\\# injected\\|y\\\\r\\#\\# more" in text  # shown, escaped, in the text
    assert "`amp=x\\n# injected|y\\r## more`" in text  # and in the overrides' code span
    header = 0
    for line in lines:
        if line.startswith("|") and not line.startswith("|---"):
            header = header or _cells(line)
            assert _cells(line) == header, line
        elif not line.startswith("|"):
            header = 0
    assert esc("a\nb|c\x1b[31m\u2028") == "a\\\\nb\\|c\\\\x1b\\[31m\\\\u2028"
    assert table(["a", "b"], [["x|y", "z\nw"]])[2] == "| x\\|y | z\\nw |"


def test_outputs_of_another_shape_are_a_numerics_change_not_a_crash(tmp_path):
    """device=cpu (no trial runs): the variant's probe has another output shape, so the
    comparison has a reason instead of an error to show; the headline and the numerics
    table say it."""
    make_sweep(tmp_path)
    path = tmp_path / "1" / "trials" / "r000.json"
    record = load_record(path)
    assert record.probe is not None
    record.probe.output_shape = [4]
    write_record(path, record)
    text = write_report(load(tmp_path)).read_text()
    assert r"**numerics CHANGED** (output shapes differ: \[2, 2\] vs \[4\])" in text
    assert text.count("output shapes differ") == 2  # the headline and the table
