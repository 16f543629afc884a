"""perflab-report --history: sweeps of the same variants side by side, each against the one
before it, with --against's environment guard (perflab.report.history). Device: none:
seeded synthetic sweeps (tests/sweeps.py), the middle one with a known 20 % slowdown."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sweeps import make_sweep

from perflab.report.cli import main


def three_sweeps(root: Path, **middle: object) -> list[str]:
    """Three runs of the same command; the middle one's code 20 % slower everywhere."""
    make_sweep(root / "a", seed=0)
    make_sweep(root / "b", seed=1, scale=1.2, **middle)
    make_sweep(root / "c", seed=2)
    return [str(root / name) for name in "abc"]


def history(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of perflab-report ARGS, in this process."""
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def step_cells(out: str, variant: str) -> list[str]:
    """The cells of the history table's row of ``variant`` (of the first table, where a
    wide one is split: report/markdown_text.tables_within)."""
    row = next(x for x in out.splitlines() if x.startswith(f"| {variant} |"))
    return [cell.strip() for cell in row.strip("|").split("|")]


def test_a_slowdown_between_commits_reads_slower_then_faster(tmp_path, capsys):
    sweeps = three_sweeps(tmp_path)
    code, out, err = history(["--history", *sweeps, "--out", str(tmp_path / "out")], capsys)
    assert code == 0, err
    header = [x for x in out.splitlines() if x.startswith("| variant |")][0]
    assert header == "| variant | a | a → b | b | b → c | c |"
    for variant in ("amp=off", "amp=bf16"):
        _, a, ab, b, bc, c = step_cells(out, variant)
        assert ab.startswith("**SLOWER** 0.8") and bc.startswith("**FASTER** 1.")
        low, high = map(float, re.findall(r"\[(\S+), (\S+)\]", ab)[0])
        assert low < 1 / 1.2 < high  # the known slowdown, inside its interval
        assert a.endswith("s") and b.endswith("s") and c.endswith("s")  # p50 step times
    # what it printed, also in OUT/history.md
    written = tmp_path / "out" / "history.md"
    assert out.endswith(f"\nhistory: {written}\n")
    assert written.read_text() == out[: out.index("history: ")]


def test_fail_on_slower_fails_on_a_regression_between_two_entries(tmp_path, capsys):
    code, out, err = history(["--history", *three_sweeps(tmp_path), "--fail-on", "slower"], capsys)
    assert code == 1
    assert err.startswith("perflab-report: gate failed: slower: amp=off in b vs amp=off in a")
    assert "in c vs" not in err  # b -> c is FASTER: no regression there
    # each pair the gate judged, with its decision and its error rates
    gate = [x for x in out.splitlines() if x.startswith("gate slower:")]
    assert len(gate) == 4
    assert gate[0].startswith("gate slower: amp=off in b vs amp=off in a SLOWER 0.8")
    assert ": MATCHED (false-positive rate " in gate[0] and "% slowdown at 8 rounds" in gate[0]
    assert all(": not matched (" in x for x in gate[2:])


def test_sweeps_on_different_software_are_not_compared_unless_forced(tmp_path, capsys):
    sweeps = three_sweeps(tmp_path, torch="2.14.0+cpu")
    code, out, err = history(["--history", *sweeps, "--fail-on", "slower"], capsys)
    # a gate that cannot judge never passes
    assert code == 1 and "nothing to judge: a -> b not compared, the machines differ" in err
    assert step_cells(out, "amp=off")[2] == "not compared"
    assert "torch: 2.13.0\\+cpu -\\> 2.14.0\\+cpu" in out  # named, markdown-escaped

    code, out, err = history(["--history", *sweeps, "--force"], capsys)
    assert code == 0, err
    assert step_cells(out, "amp=off")[2].startswith("FORCED **SLOWER**")
    assert "- **FORCED** a → b: the machines differ: torch" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--history", "{a}"], "--history sets two or more sweep directories"),
        (["{a}", "{b}"], "2 sweep directories: allowed: one, or two or more with --history"),
        (["--history", "{a}", "{b}", "--bmf", "x.json"], "--history with --bmf: allowed"),
        (["--history", "{a}", "{b}", "--against", "{a}"], "--history with --against: allowed"),
        (["--history", "{a}", "{nosuch}"], "nosuch: no experiment.json; not a perflab sweep"),
    ],
)
def test_bad_history_arguments_are_one_line(tmp_path, capsys, args, message):
    make_sweep(tmp_path / "a")
    make_sweep(tmp_path / "b", seed=1)
    names = {"a": tmp_path / "a", "b": tmp_path / "b", "nosuch": tmp_path / "nosuch"}
    code, _, err = history([x.format(**names) for x in args], capsys)
    assert code == 2 and err.startswith("perflab-report: error: ") and message in err, err
    assert len(err.strip().splitlines()) == 1
