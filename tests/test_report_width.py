"""A report that reads right where it is read (device: none: rendering only, from fixed
records and from the H100 fixtures' records and traces, nothing runs).

GitHub renders report.md in a content column of 890 px. A table wider than that runs off
its right edge, hiding the columns on the right; a table that fits only by wrapping its
cells makes rows many lines tall. No browser here, so each table's width is estimated the
way GitHub's markdown CSS lays it out: a cell has 13 px of padding on each side and a 1 px
border; 14 px -apple-system text is about 7.5 px a character (bold, as in a header, 8 px),
a code span 8.4 px a character plus its padding. A browser wraps a cell at its spaces
(and at a <br>), so a table can be no narrower than the sum of each column's longest
unbreakable word (its minimal width); when its text on one line per cell (its natural
width) exceeds the column, the browser gives each column its minimum plus a share of the
rest in proportion to how much more its text wants, and wraps the cells into that.

Also here: the console's round line fits 120 columns, and a headline's words agree with
its verdict.
"""

from __future__ import annotations

import json
import lzma
import math
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from sweeps import SCHEDULE, make_sweep

from perflab.analysis.sweep import Experiment, ScheduleSettings
from perflab.config.plan import Job, build_plan
from perflab.config.schema import ScheduleConfig
from perflab.experiment.schedule import _progress
from perflab.formats.records import write_json_atomic
from perflab.formats.sweepdir import EXPERIMENT_FILE, GROUPS_FILE, profile_record
from perflab.report import load
from perflab.report.markdown import headline, render
from perflab.report.merge import load_groups, render_merged

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden" / "report.md"
H100 = HERE / "fixtures" / "h100"

# --- the width of a table as GitHub lays it out ------------------------------------------

COLUMN_PX = 890  # GitHub's markdown content column
CELL_PX = 2 * 13 + 1  # a cell's padding, both sides, and its border
TABLE_PX = 1  # the last cell's right border
TEXT_PX, BOLD_PX, CODE_PX = 7.5, 8.0, 8.4  # a character of text, of bold text, of code
CODE_PADDING_PX = 9.6  # a code span's padding, both sides (0.4 em of 85 % of 14 px each)
SPACE_PX = TEXT_PX
MAX_LINES = 2  # a table's rows may wrap into at most this many lines, on average

_PIPE = re.compile(r"(?<!\\)((?:\\\\)*)\|")
_LINK = re.compile(r"\[((?:\\.|[^\]\\])*)\]\([^)]*\)")


@dataclass
class Table:
    heading: str
    header: list[str]
    rows: list[list[str]]


def _cells(line: str) -> list[str]:
    inner = line.strip()[1:-1]
    cells, start = [], 0
    for m in _PIPE.finditer(inner):
        cells.append(inner[start : m.end() - 1])
        start = m.end()
    cells.append(inner[start:])
    return [c.strip() for c in cells]


def tables(markdown: str) -> list[Table]:
    """Every table of a markdown text, with the heading it is under."""
    found, heading, lines = [], "", markdown.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("#"):
            heading = lines[i].lstrip("# ")
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|-"):
            header, rows = _cells(lines[i]), []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            assert all(len(r) == len(header) for r in rows), heading
            found.append(Table(heading, header, rows))
            continue
        i += 1
    return found


def glyphs(cell: str, bold: bool = False) -> list[tuple[str, float]]:
    """Each character a cell shows, with its width in px: escapes resolved, a link's text
    kept and its target dropped, ** toggling bold, code spans in monospace; a <br> is a
    line break, shown as "\\n"."""
    out: list[tuple[str, float]] = []
    i = 0
    while i < len(cell):
        c = cell[i]
        if cell.startswith("<br>", i):
            out.append(("\n", 0.0))
            i += 4
        elif c == "\\" and i + 1 < len(cell) and not cell[i + 1].isalnum():
            out.append((cell[i + 1], BOLD_PX if bold else TEXT_PX))
            i += 2
        elif c == "`" and "`" in cell[i + 1 :]:
            end = cell.index("`", i + 1)
            code = [(ch, CODE_PX) for ch in cell[i + 1 : end].replace("\\|", "|")]
            if code:
                code[0] = (code[0][0], code[0][1] + CODE_PADDING_PX / 2)
                code[-1] = (code[-1][0], code[-1][1] + CODE_PADDING_PX / 2)
            out += code
            i = end + 1
        elif cell.startswith("**", i):
            bold = not bold
            i += 2
        elif c == "[" and (m := _LINK.match(cell, i)):
            out += glyphs(m.group(1), bold)
            i = m.end()
        else:
            out.append((c, BOLD_PX if bold else TEXT_PX))
            i += 1
    return out


def lines_of_words(cell: str, bold: bool = False) -> list[list[float]]:
    """The widths of a cell's unbreakable words, per line it must start."""
    lines: list[list[float]] = [[]]
    word = 0.0
    for ch, px in glyphs(cell, bold):
        if ch in " \n":
            if word:
                lines[-1].append(word)
            word = 0.0
            if ch == "\n":
                lines.append([])
        else:
            word += px
    if word:
        lines[-1].append(word)
    return lines


def minimal_px(cell: str, bold: bool = False) -> float:
    return max((w for line in lines_of_words(cell, bold) for w in line), default=0.0)


def natural_px(cell: str, bold: bool = False) -> float:
    return max(
        (sum(line) + SPACE_PX * max(len(line) - 1, 0) for line in lines_of_words(cell, bold)),
        default=0.0,
    )


def wrapped_lines(cell: str, width: float, bold: bool = False) -> int:
    """How many lines a cell takes at a content width, wrapped at its spaces."""
    count = 0
    for line in lines_of_words(cell, bold):
        count += 1
        used = None
        for w in line:
            if used is None:
                used = w
            elif used + SPACE_PX + w <= width + 1e-6:
                used += SPACE_PX + w
            else:
                count += 1
                used = w
    return count


@dataclass
class Layout:
    minimal: float  # px: every column at its longest unbreakable word
    natural: float  # px: every cell on one line
    lines: float  # a row's lines, on average, laid out in the content column


def layout(t: Table) -> Layout:
    rows = [(t.header, True), *((r, False) for r in t.rows)]
    columns = range(len(t.header))
    mins = [max(minimal_px(r[c], b) for r, b in rows) for c in columns]
    nats = [max(natural_px(r[c], b) for r, b in rows) for c in columns]
    minimal = sum(mins) + CELL_PX * len(mins) + TABLE_PX
    natural = sum(nats) + CELL_PX * len(nats) + TABLE_PX
    if natural <= COLUMN_PX:
        widths = nats
    elif minimal >= COLUMN_PX:
        widths = mins
    else:
        share = (COLUMN_PX - minimal) / (natural - minimal)
        widths = [m + (n - m) * share for m, n in zip(mins, nats, strict=True)]
    heights = [max(wrapped_lines(r[c], widths[c]) for c in columns) for r in t.rows]
    return Layout(minimal, natural, sum(heights) / len(heights) if heights else 1.0)


def overflows(markdown: str) -> list[str]:
    """What runs off or wraps too much: a line per table at fault."""
    faults = []
    for t in tables(markdown):
        fit = layout(t)
        what = f"{t.heading!r} table {' | '.join(t.header)}"
        if fit.minimal > COLUMN_PX:
            faults.append(f"{what}: at least {fit.minimal:.0f} px wide, beyond {COLUMN_PX}")
        elif fit.lines > MAX_LINES:
            faults.append(
                f"{what}: {fit.natural:.0f} px on one line; in {COLUMN_PX} px its rows "
                f"wrap into {fit.lines:.1f} lines on average"
            )
    return faults


def test_the_estimate_reads_markdown_as_github_shows_it():
    """device: none. The estimator itself: escapes and link targets take no room, bold
    is wider, code is monospace with padding, a cell breaks at spaces and at <br>."""
    assert natural_px("a\\_b") == 3 * TEXT_PX
    assert natural_px("[`x/`](x/very/long/target)") == 2 * CODE_PX + CODE_PADDING_PX
    assert natural_px("**ab**") == 2 * BOLD_PX == natural_px("ab", bold=True)
    assert minimal_px("abc de") == 3 * TEXT_PX and natural_px("abc de") == 6 * TEXT_PX
    assert minimal_px("abcd<br>ef gh") == 4 * TEXT_PX
    assert natural_px("abcd<br>ef gh") == 5 * TEXT_PX
    assert wrapped_lines("ab cd ef", 5 * TEXT_PX) == 2 and wrapped_lines("ab<br>cd", 99) == 2
    [t] = tables("## T\n\n| a | b |\n|---|---|\n| x \\| y | `z` |\n")
    assert t.heading == "T" and t.rows == [["x \\| y", "`z`"]]
    # a word of 120 characters: 900 px, beyond the column whatever the rest does
    assert layout(Table("W", ["v", "v"], [["w", "x" * 120]])).minimal == 963  # +8+2*27+1
    assert "at least 963 px wide" in overflows("| v | v |\n|-|-|\n| w | " + "x" * 120 + " |")[0]
    # 60 short words beside a long one: it fits in 813 px, the words get 85 px of the
    # rest (their share of what they want beyond it), 6 a line: 10 lines
    tall = Table("T", ["v", "v"], [["w " * 60, "x" * 100]])
    assert layout(tall).minimal == 813 and layout(tall).lines == 10
    assert (
        "wrap into 10.0 lines"
        in overflows("| v | v |\n|-|-|\n| " + "w " * 60 + " | " + "x" * 100 + " |")[0]
    )


# --- the reports measured ----------------------------------------------------------------

# labels longer than most real ones: a user's two implementations of one function
# (model=function, docs/your-model.md), each a single word of 43 and 44 characters, and
# the A/A copy of the baseline. A word of up to about 50 characters fits: the
# comparisons' first table, at its narrowest, leaves it 375 px
LONG = {
    "0": "model.fn=my_step.attention_reference_kernel",
    "1": "model.fn=my_step.attention_sdpa_flash_kernel",
}


def long_label_sweep(root: Path) -> Path:
    """tests/sweeps.py's records under a plan of long labels: a knob of the user's own,
    without evidence of its effect (its checks say "no check: +schedule.evidence")."""
    make_sweep(root, label=LONG["1"])
    jobs = [Job(int(n), [label], dict([label.split("=", 1)])) for n, label in LONG.items()]
    plan = build_plan(jobs, {}, sentinel=True)
    write_json_atomic(
        root / EXPERIMENT_FILE,
        Experiment(plan, ScheduleSettings.from_dict(SCHEDULE), "max rounds", 8, 12.5).to_dict(),
    )
    return root


def with_profiles(name: str, root: Path) -> Path:
    """An H100 sweep of tests/fixtures/h100 with each variant's profile.json made from its
    real trace, as perflab.measure.profiling_pass writes it on CUDA: kernel names of 70
    characters, operators with their input shapes."""
    from perflab.formats.profile_json import TOP_OPS, Overhead, TraceFile, write_profile
    from perflab.profile import attribution, operators
    from perflab.profile.capture import profile_of

    shutil.copytree(H100 / name, root)
    for path in sorted((H100 / "traces" / name).glob("*.json.xz")):
        with lzma.open(path, "rt") as f:
            trace = json.load(f)
        out = profile_record(root / path.name.split(".")[0])
        out.parent.mkdir(parents=True, exist_ok=True)
        profile = profile_of(
            variant={},
            device="cuda",
            rows=operators.read(trace).rows,
            trace_file=TraceFile(trace=None, trace_bytes=0, trace_note="not kept"),
            profiled_steps=3,
            device_side=attribution.attribute(trace, TOP_OPS),
            overhead=Overhead(unprofiled_step_s=0.01, profiled_step_s=0.012, ratio=1.2),
        )
        write_profile(out, profile)
    return root


def grouped_sweep(root: Path, groups: int = 6) -> Path:
    """A sweep split into groups (perflab.report.merge): its report.md side by side."""
    entries = []
    for i in range(groups):
        key = f"model.inputs=my_step.inputs_of_length_{2**i} batch_size={2**i}"
        make_sweep(root / "groups" / f"g{i}", seed=i, label="model.fn=my_step.attention_sdpa")
        entries.append({"key": key, "dir": f"g{i}", "state": "done"})
    write_json_atomic(root / GROUPS_FILE, {"groups": entries})
    return root


REPORTS = {
    "golden": lambda root: GOLDEN.read_text(),
    "long labels": lambda root: render(load(long_label_sweep(root))),
    "h100 main_command_quick": lambda root: render(load(H100 / "main_command_quick")),
    "h100 amp_gpu_warmup3s": lambda root: render(load(H100 / "amp_gpu_warmup3s")),
    "h100 compile_modes_quick, profiled": lambda root: render(
        load(with_profiles("compile_modes_quick", root))
    ),
    "h100 amp_gpu_warmup0.5s, profiled": lambda root: render(
        load(with_profiles("amp_gpu_warmup0.5s", root))
    ),
    "grouped, long group keys": lambda root: render_merged(
        load_groups(grouped_sweep(root)), force=False
    ),
}


@pytest.mark.parametrize("name", list(REPORTS))
def test_no_table_runs_off_the_page_or_wraps_its_rows_into_tall_ones(tmp_path, name):
    """device: none. Every table's minimal width fits the 890 px column, and where its
    natural width does not, its rows wrap into at most 2 lines on average."""
    text = REPORTS[name](tmp_path / "sweep")
    assert tables(text), "no table to measure"
    assert not overflows(text), "\n".join(overflows(text))


def test_the_golden_reports_tables_need_no_wrapping():
    """device: none. The seeded sweep's short labels: every table on one line per cell
    (the verdict and its interval first, in the first table)."""
    found = tables(GOLDEN.read_text())
    wide = [f"{t.heading}: {layout(t).natural:.0f} px" for t in found if layout(t).natural > 890]
    assert not wide
    first = found[0]
    assert first.heading == "Comparisons"
    assert first.header[:4] == ["comparison", "speedup", "CI", "verdict"]


def test_the_reports_say_what_they_said_before(tmp_path):
    """device: none. Only the arrangement changed: the golden report still holds every
    value of the old wide tables (checked by the cells' text)."""
    text = GOLDEN.read_text()
    comparisons = text.split("## Comparisons")[1].split("\n## ")[0]
    for value in ("amp=bf16 vs amp=off", "1.258", "[1.249, 1.268]", "| FASTER |", "1.0%"):
        assert value in comparisons, value
    for value in ("| 8 |", "2.2e-11", "| OK |", "amp: yes", "0.01", "~19 steps"):
        assert value in comparisons, value
    variants = text.split("## Variants")[1].split("\n## ")[0]
    for value in ("1.03*", "7,977", "10,052", "| 100 |", "| 0.00 | 1.00 |", "| 0.00 | 0.80 |"):
        assert value in variants, value
    assert "0.00 (minimum 8)" in variants and "| 40 |" in variants
    assert "Health flags: none." in variants
    # a health flag and the telemetry, out of the tables, each a line of a list
    h100 = render(load(H100 / "amp_gpu_warmup3s"))
    flags = h100.split("Health flags:")[1].split("\n## ")[0]
    assert "- amp=true: GPU slowdown sw\\_power\\_cap in 4/6 trials, median 100% of samples" in (
        flags
    )
    assert "- amp=off: util 100 %, SM clock 100% of max, <= 78 C, 690 W" in h100
    # the input shapes under their operator, the launching operator under its kernel
    profiled = render(load(with_profiles("compile_modes_quick", tmp_path / "p")))
    assert "| aten::mm<br>\\[\\[128, 2048\\], \\[2048, 512\\]\\] | matmul/conv | 57 | 0.73 |" in (
        profiled
    )
    assert "<br>launched by aten::\\_efficient\\_attention\\_backward | attention | 6 |" in profiled


# --- the console's round line ----------------------------------------------------------------

CONSOLE = 120
LABELS = [
    "amp=bf16",
    "model.fn=my_step.attention_ref (A/A copy)",
    "model.fn=my_package.attention.sdpa_with_a_very_long_name "
    "model.inputs=my_package.inputs.sequences_of_4096_tokens (A/A copy)",
]


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("isolation", ["process", "worker"])
def test_the_round_line_fits_120_columns_in_every_phase_of_a_run(label, isolation):
    """device: none. Before an interval exists (its first round says why), with one,
    with a meaningless one and with none left to judge, for short and long labels and
    large counts: at most 120 characters, every number still there, the label of the
    widest interval shortened (left out after the first round only where a day's
    numbers leave it less than 15 characters)."""
    sched = ScheduleConfig(isolation=isolation, trials_per_worker=2, min_rounds=6, max_rounds=16)
    big = ScheduleConfig(isolation=isolation, trials_per_worker=2, max_rounds=100, min_rounds=10)
    huge = ScheduleConfig(  # a day's budget, 999 rounds: the explanation gives way
        isolation=isolation, trials_per_worker=2, max_rounds=999, min_rounds=999
    )
    phases = [
        (sched, 1, math.inf, label, 1.4, 1.4),
        (sched, 2, math.inf, label, 2.9, 1.4),
        (sched, 6, 0.144, label, 8.7, 1.3),
        (sched, 3, 1.7e13, label, 4.1, 1.2),
        (sched, 4, -1.0, "", 5.0, 1.1),
        (big, 1, math.inf, label, 123.4, 123.4),
        (big, 99, 0.0999, label, 12345.0, 123.4),
        (huge, 1, math.inf, label, 99999.0, 9999.9),
        (huge, 998, 1.7e13, label, 99999.0, 9999.9),
    ]
    for s, rounds, width, who, elapsed, round_s in phases:
        line = _progress(rounds, s, 12, width, who, elapsed, round_s)
        assert len(line) <= CONSOLE, f"{len(line)}: {line}"
        assert line.startswith(f"round {rounds}/{s.max_rounds} (min {s.min_rounds}): 12 ")
        assert f" {round_s:.1f} s;" in line and f"+-{s.target_half_width:.1%}" in line
        assert f"; {elapsed:.0f} s, <= " in line and line.endswith(" s left")
        shown = re.search(r"CI [^(]*\((.*)\), target", line)
        if who and rounds > 1 and s is not huge:  # a day's numbers leave it no room
            assert shown, line
            # shortened by dropping a dotted name's first parts and cutting with "...":
            # every run of letters and digits it shows is in the label
            runs = re.findall(r"[A-Za-z0-9_]+", shown.group(1))
            assert runs and all(run in label for run in runs), line
    first = _progress(1, sched, 3, math.inf, label, 1.4, 1.4)
    units = "paired rounds" if isolation == "process" else "worker generations"
    assert f"; CI n/a until 3 {units}" in first
    later = _progress(2, sched, 3, math.inf, label, 2.9, 1.4)
    assert "widest CI n/a (" in later and "until" not in later  # said once, at first


def test_the_round_line_shortens_a_label_only_as_far_as_it_must():
    """device: none. A label that fits is whole; a longer one loses its A/A suffix's
    words first, then its dotted names' first parts, then its middle."""
    sched = ScheduleConfig(isolation="process", min_rounds=5, max_rounds=10)
    line = _progress(9, sched, 3, 0.042, "amp=true", 90, 10)
    assert line == (
        "round 9/10 (min 5): 3 variants, 10.0 s; widest CI +-4.2% (amp=true), "
        f"target +-{sched.target_half_width:.1%}; 90 s, <= 10 s left"
    )
    who = "model.fn=my_step.attention_ref (A/A copy)"
    assert "(fn=attention_ref (A/A))" in _progress(9, sched, 3, 0.042, who, 90, 10)
    who = "model.fn=my_step.attention_ref"
    assert "(fn=my_step.attention_ref)" in _progress(9, sched, 3, 0.042, who, 90, 10)
    who = "lr=0.001 model.fn=my_package.attention.sdpa_with_a_very_long_name (A/A copy)"
    line = _progress(9, sched, 3, 0.042, who, 90, 10)
    assert "(lr=0.00..." in line and "_long_name (A/A))" in line and len(line) == 120


# --- the headline's words --------------------------------------------------------------------

HEADLINES = [
    ("FASTER", 1.258, 1.249, 1.268, "1.26x faster [1.249, 1.268]", "**FASTER**; numerics"),
    ("SLOWER", 0.8, 0.79, 0.81, "1.25x slower [0.790, 0.810]", "**SLOWER**; numerics"),
    (
        "EQUIVALENT",
        1.002,
        0.995,
        1.008,
        "1.00x [0.995, 1.008]",
        "**EQUIVALENT** within +-1.0%; numerics",
    ),
    (
        "INCONCLUSIVE",
        1.02,
        0.98,
        1.06,
        "1.02x [0.980, 1.060]",
        "**INCONCLUSIVE**: neither faster nor slower could be shown; numerics",
    ),
    (
        "INCONCLUSIVE",
        0.976,
        0.844,
        1.128,
        "0.98x [0.844, 1.128]",
        "**INCONCLUSIVE**: neither faster nor slower could be shown; numerics",
    ),
]


@pytest.mark.parametrize(("verdict", "speedup", "low", "high", "ratio", "said"), HEADLINES)
def test_the_headline_calls_a_variant_faster_only_when_its_verdict_is_faster(
    tmp_path, verdict, speedup, low, high, ratio, said
):
    """device: none. "faster" only for FASTER, "slower" only for SLOWER; the ratio alone,
    and the verdict in words, for EQUIVALENT and INCONCLUSIVE."""
    make_sweep(tmp_path)
    report = load(tmp_path)
    [c] = report.summary.comparisons
    assert c.estimate is not None
    estimate = replace(c.estimate, verdict=verdict, speedup=speedup, ci_low=low, ci_high=high)
    summary = replace(report.summary, comparisons=[replace(c, estimate=estimate)])
    [line] = headline(replace(report, summary=summary))
    assert line.startswith(f"- amp=bf16 vs amp=off: {ratio} (95% CI, 8 rounds) — {said}")
    words = line.replace("neither faster nor slower could be shown", "")
    assert ("faster" in words) == (verdict == "FASTER"), line
    assert ("slower" in words) == (verdict == "SLOWER"), line
