"""perflab-report SWEEP_DIR: regenerate a sweep's report from its records alone, and
export its results for CI (--bmf, --github-benchmark-times, --github-benchmark-speedups,
--pr-comment: perflab.report.exports). perflab-report --history OLD ... NEW: a series of
sweeps side by side, each against the one before it (perflab.report.history).

A --fail-on gate on verdicts prints, for each comparison it judges, its decision and the
false-positive rate and power it has at that comparison's noise and rounds
(perflab.analysis.gate_rates), so that a gate that is a coin toss says so.

Exit codes: 0 report written (and no --fail-on gate matched); 1 a --fail-on gate matched,
or had nothing to judge (every comparison NO DATA, no numerics check, no A/A sentinel
result, two sweeps of a history not compared: a gate that cannot judge never passes); 2
bad arguments or not a sweep dir; 74 the disk filled while the report or an export was
written (perflab.exits.EXIT_OUTPUT_LOST).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from perflab.analysis.sweep import Experiment
from perflab.formats.summary import NO_DATA, Comparison, Numerics, Sentinel, load_merged_summary
from perflab.formats.sweepdir import EXPERIMENT_FILE, SUMMARY_FILE
from perflab.report.against import AgainstRow
from perflab.report.console import experiment_table
from perflab.report.evidence import Evidence, paired
from perflab.report.exports import Results


@dataclass(frozen=True)
class Row:
    """One verdict the gates judge: a comparison of the sweep (or of a group of it), or a
    row of --against."""

    # the variant's label (and its group, in a grouped sweep)
    variant: str
    # what it was compared with
    baseline: str
    # FASTER, SLOWER, EQUIVALENT, INCONCLUSIVE or NO DATA
    verdict: str
    # its numerics check; None without one (a row of --against has none)
    numerics: Numerics | None = None
    # its interval and noise, for the error rates a gate prints; None without one
    evidence: Evidence | None = None


@dataclass(frozen=True)
class Run:
    """What the gates judge beyond the rows: the run's own flags."""

    # reasons not to trust the verdicts (every group's, in a grouped sweep)
    unreliable: list[str]
    # the A/A sentinel, one per group in a grouped sweep; None where it has none
    sentinels: list[Sentinel | None]


@dataclass(frozen=True)
class Gate:
    # what --fail-on NAME means, for --help
    meaning: str
    # whether one row (or the run) matches
    matches: Callable[[Row, Run], bool]
    # why there is nothing this gate can judge, or None
    nothing: Callable[[list[Row], Run], str | None]
    # a gate on verdicts: the direction of the effect it is there to catch, whose power
    # it prints (+1 a speedup, -1 a slowdown); 0 for a gate on anything else
    direction: int = 0


def _no_verdict(rows: list[Row], run: Run) -> str | None:
    from perflab.analysis.stats import MIN_PAIRED_ROUNDS

    if not rows:
        return "the sweep has no comparison (no swept knob has a baseline)"
    if all(c.verdict == NO_DATA for c in rows):
        return (
            f"every comparison is {NO_DATA} (fewer than {MIN_PAIRED_ROUNDS} rounds with an "
            "ok trial of both variants)"
        )
    return None


def _no_numerics(rows: list[Row], run: Run) -> str | None:
    if any(c.numerics for c in rows):
        return None
    return "no comparison has a numerics check (no probe of both variants: their round-0 trial)"


def _no_sentinel(rows: list[Row], run: Run) -> str | None:
    if any(run.sentinels):
        return None
    return "no A/A sentinel result (the sweep ran without one, or it has no paired rounds)"


# --fail-on NAME
GATES: dict[str, Gate] = {
    "slower": Gate(
        "the verdict is SLOWER (also against --against)",
        lambda c, run: c.verdict == "SLOWER",
        _no_verdict,
        direction=-1,
    ),
    "not-faster": Gate(
        "the verdict is anything but FASTER",
        lambda c, run: c.verdict != "FASTER",
        _no_verdict,
        direction=1,
    ),
    "inconclusive": Gate(
        "the verdict is INCONCLUSIVE",
        lambda c, run: c.verdict == "INCONCLUSIVE",
        _no_verdict,
        direction=-1,
    ),
    "numerics": Gate(
        "the outputs changed beyond tolerance",
        lambda c, run: c.numerics is not None and not c.numerics.ok,
        _no_numerics,
    ),
    "unreliable": Gate(
        "the experiment is flagged unreliable",
        lambda c, run: bool(run.unreliable),
        _no_sentinel,
    ),
}


def _row(c: Comparison, variant: str | None = None) -> Row:
    evidence = paired(c.estimate, c.delta) if c.estimate is not None else None
    return Row(variant or c.variant, c.baseline, c.verdict, c.numerics, evidence)


class _Parser(argparse.ArgumentParser):
    """Bad arguments get one line and exit 2, like every perflab user error (argparse
    would print its usage over several lines first)."""

    def error(self, message: str) -> NoReturn:
        _fail(f"{message}; see perflab-report --help")


def _fail(message: str) -> NoReturn:
    from perflab.errors import printable

    print(f"perflab-report: error: {printable(message)}", file=sys.stderr)
    sys.exit(2)


def _check_writable(args: argparse.Namespace) -> None:
    """The report goes into --out or the sweep directory: refuse (exit 2, one line) a
    place that cannot be written before any work, rather than an OSError traceback."""
    _check_writable_dir(args.out or args.sweep_dir, "--out" if args.out else "sweep_dir")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="perflab-report",
        description="Regenerate report.md, its plots, the CSV exports and summary.json of a "
        "perflab sweep from its records (no torch needed; unfinished sweeps too).",
    )
    parser.add_argument(
        "sweep_dir",
        type=Path,
        nargs="+",
        help="a perflab sweep directory (multirun/...); with --history, two or more, oldest first",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write the report there instead of into the sweep directory",
    )
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        metavar="OLD_SWEEP",
        help="compare with an earlier run of the same variants",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="with --against, or for a sweep split into groups: compare step times even "
        "when the machines' hardware or software differ (the report labels it FORCED)",
    )
    parser.add_argument(
        "--fail-on",
        action="append",
        default=[],
        choices=sorted(GATES),
        help="exit 1 when any comparison matches (repeatable): "
        + "; ".join(f"{k}: {v.meaning}" for k, v in sorted(GATES.items()))
        + "; and when it has nothing to judge. A gate on verdicts prints, per comparison, "
        "its decision with its false-positive rate and its power for an effect of twice "
        "the band at the rounds it had",
    )
    _ci_arguments(parser)
    return parser


def _ci_arguments(parser: argparse.ArgumentParser) -> None:
    """The options for CI: exports, a PR comment, a history (docs/ci.md)."""
    ci = parser.add_argument_group("CI (docs/ci.md)")
    ci.add_argument(
        "--history",
        action="store_true",
        help="set two or more sweeps of the same variants side by side, oldest first: each "
        "variant's p50 step time per sweep, and each sweep against the one before it as "
        "--against compares them (a regression is a SLOWER; machines that differ are not "
        "compared unless --force); with --out, also written to OUT/history.md",
    )
    for flag, what in (
        ("--bmf", "the results in Bencher Metric Format (step times, speedups with intervals)"),
        (
            "--github-benchmark-times",
            "each variant's p50 step time as github-action-benchmark's customSmallerIsBetter JSON",
        ),
        (
            "--github-benchmark-speedups",
            "each comparison's speedup, interval and verdict as github-action-benchmark's "
            "customBiggerIsBetter JSON",
        ),
        (
            "--pr-comment",
            "a pull-request-sized markdown summary: headline verdicts with their intervals "
            "and error rates, one small table, a link to the full report",
        ),
    ):
        ci.add_argument(flag, type=Path, default=None, metavar="FILE", help=f"write {what}")
    ci.add_argument(
        "--report-url",
        default=None,
        metavar="URL",
        help="with --pr-comment: where its link to the full report points (default: the "
        "report's path relative to the comment's file)",
    )


# --flag -> the argparse attribute of each export's file
EXPORTS = {
    "--bmf": "bmf",
    "--github-benchmark-times": "github_benchmark_times",
    "--github-benchmark-speedups": "github_benchmark_speedups",
    "--pr-comment": "pr_comment",
}


def _exports_asked(args: argparse.Namespace) -> dict[str, Path]:
    """--flag -> file, for each export asked for."""
    return {flag: getattr(args, attr) for flag, attr in EXPORTS.items() if getattr(args, attr)}


def _check_arguments(args: argparse.Namespace) -> None:
    """What argparse cannot check: how many sweep directories, which options go together,
    and that every export can be written (all before any work)."""
    dirs, exports = args.sweep_dir, _exports_asked(args)
    if args.history and len(dirs) < 2:
        _fail("--history sets two or more sweep directories side by side, oldest first")
    if not args.history and len(dirs) > 1:
        _fail(
            f"{len(dirs)} sweep directories: allowed: one, or two or more with --history "
            "(a series of sweeps side by side)"
        )
    if args.history and (args.against or exports):
        extra = ", ".join((["--against"] if args.against else []) + list(exports))
        _fail(f"--history with {extra}: allowed: --history with --out, --force and --fail-on")
    if args.report_url and not args.pr_comment:
        _fail("--report-url: the link of a PR comment; allowed: with --pr-comment")
    for flag, path in exports.items():
        if path.is_dir():
            _fail(f"{flag}={path}: a directory; allowed: a file to write")
        _check_writable_dir(path.parent, flag)


def _check_writable_dir(directory: Path, name: str) -> None:
    from perflab.errors import PerflabError
    from perflab.formats.records import check_writable

    try:
        check_writable(directory, name)
    except PerflabError as exc:
        _fail(str(exc))


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    _check_arguments(args)
    if args.history:
        _history(args)
        return
    args.sweep_dir = args.sweep_dir[0]
    from perflab.report.merge import is_grouped

    if is_grouped(args.sweep_dir) and not args.against:
        _check_writable(args)
        _grouped(args)
        return
    for directory in filter(None, (args.sweep_dir, args.against)):
        _check_sweep(directory)
    _check_writable(args)
    _one_sweep(args)


def _check_sweep(directory: Path) -> None:
    if not (directory / EXPERIMENT_FILE).is_file():
        _fail(f"{directory}: no {EXPERIMENT_FILE}; not a perflab sweep directory")
    try:
        Experiment.load(directory)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        _fail(f"{directory / EXPERIMENT_FILE}: unreadable ({exc!r})")


def _one_sweep(args: argparse.Namespace) -> None:
    """One sweep (against an older one with --against): the report, the exports, the
    gates."""
    from perflab.errors import PerflabError
    from perflab.report import load, write_report
    from perflab.report.against import compare_runs, section

    report = load(args.sweep_dir)
    rows, extra = [_row(c) for c in report.summary.comparisons], []
    if args.against:
        try:
            against = compare_runs(report, load(args.against), force=args.force)
        except PerflabError as exc:
            _fail(str(exc))
        extra = section(against)
        # the rows of --against are its own (perflab.report.against), not the summary's
        rows += [_two_runs(r, against.old_name) for r in against.results]
        print("\n".join(extra))
    try:
        path = write_report(report, args.out, extra)
    except OSError as exc:
        _output_lost(exc, args.out or args.sweep_dir)
    print(experiment_table(report.summary))
    print(f"report: {path}")
    _exports(args, Results.of(report.summary), path)
    run = Run(report.summary.unreliable, [report.summary.sentinel])
    _gates(args.fail_on, rows, run, len(report.skipped))


def _two_runs(row: AgainstRow, old: str, new: str | None = None) -> Row:
    """A variant of two runs as the gates judge it: the newer against the older."""
    from perflab.report.history import two_runs_evidence

    variant = f"{row.variant} in {new}" if new else row.variant
    evidence = two_runs_evidence(row)
    return Row(variant, f"{row.variant} in {old}", row.verdict, None, evidence)


def _history(args: argparse.Namespace) -> None:
    """--history: the sweeps side by side (printed, and written to --out), the gates
    over every pair of consecutive sweeps."""
    from perflab.errors import PerflabError
    from perflab.report import load
    from perflab.report.history import HISTORY_FILE, build_history, render
    from perflab.report.merge import is_grouped

    for directory in args.sweep_dir:
        if is_grouped(directory):
            _fail(
                f"{directory}: a sweep split into groups; allowed with --history: the "
                "sweeps of one group (GROUPED_SWEEP/groups/KEY)"
            )
        _check_sweep(directory)
    if args.out:
        _check_writable_dir(args.out, "--out")
    try:
        history = build_history([load(d) for d in args.sweep_dir], args.force)
    except PerflabError as exc:
        _fail(str(exc))
    text = "\n".join(render(history))
    print(text)
    if args.out:
        _write(args.out / HISTORY_FILE, text + "\n", "history")
    rows = [_two_runs(r, s.old, s.new) for s in history.steps if s.compared for r in s.rows]
    unjudged = [
        f"{s.old} -> {s.new} not compared, the machines differ ({'; '.join(s.differences)}); "
        "--force compares them"
        for s in history.steps
        if not s.compared
    ]
    run = Run(history.unreliable, history.sentinels)
    _gates(args.fail_on, rows, run, history.skipped, unjudged)


def _exports(args: argparse.Namespace, results: Results, report: Path) -> None:
    """Write each export asked for (perflab.report.exports)."""
    from perflab.report import exports as ex

    def comment() -> str:
        return ex.pr_comment(results, ex.report_link(report, args.pr_comment, args.report_url))

    contents: dict[str, Callable[[], str]] = {
        "--bmf": lambda: ex.json_text(ex.bmf(results)),
        "--github-benchmark-times": lambda: ex.json_text(ex.github_step_times(results)),
        "--github-benchmark-speedups": lambda: ex.json_text(ex.github_speedups(results)),
        "--pr-comment": comment,
    }
    for flag, path in _exports_asked(args).items():
        _write(path, contents[flag](), flag.removeprefix("--"))


def _write(path: Path, text: str, what: str) -> None:
    from perflab.report.exports import write_export

    try:
        write_export(path, text)
    except OSError as exc:
        _output_lost(exc, path.parent)
    print(f"{what}: {path}")


def _grouped(args: argparse.Namespace) -> None:
    """A sweep split into groups (scaleout.group_by): the merged report, gates over
    every group's comparisons."""
    from perflab.errors import PerflabError
    from perflab.report.merge import write_merged_report

    try:
        path = write_merged_report(args.sweep_dir, args.out, args.force)
    except PerflabError as exc:
        print(f"perflab-report: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:
        _output_lost(exc, args.out or args.sweep_dir)
    summary = load_merged_summary(path.parent / SUMMARY_FILE)
    print(f"report: {path}")
    _exports(args, Results.of(summary), path)
    rows = [_row(c, f"{c.variant} [{c.group}]") for c in summary.comparisons]
    _gates(args.fail_on, rows, Run(summary.unreliable, summary.sentinels), len(summary.skipped))


def _output_lost(exc: OSError, folder: Path) -> NoReturn:
    """A disk that filled (or a quota reached) while the report was written: one line
    naming the folder, and the exit code of a sweep stopped the same way. Every file is
    written whole or not at all (perflab.formats.atomic), so what the folder holds is whole, and
    the sweep's records were only read. Any other OSError is a bug: its traceback shows."""
    from perflab.errors import no_space, printable
    from perflab.exits import EXIT_OUTPUT_LOST

    if not no_space(exc):
        raise exc
    writing = f" (writing {exc.filename})" if exc.filename else ""
    message = (
        f"no space left on the disk of {folder}{writing}; the sweep's records are "
        "untouched and every file there is whole (the old one or the new): free space, "
        "then run perflab-report again"
    )
    print(f"perflab-report: stopped: {printable(message)}", file=sys.stderr)
    sys.exit(EXIT_OUTPUT_LOST)


def _gates(
    gates: list[str], rows: list[Row], run: Run, skipped: int, unjudged: list[str] | None = None
) -> None:
    """Print what each gate on verdicts decided for each comparison, with its error rates;
    exit 1 with one line when a gate matched a comparison, or has nothing to judge
    (``skipped``: record files that could not be read, often why; ``unjudged``: why some
    comparisons could not be made, which a gate on verdicts cannot pass)."""
    from perflab.report.markdown_text import visible

    failed = []
    for name in gates:
        gate = GATES[name]
        if gate.direction:
            for c in rows:
                print(visible(_decision(name, gate, c, run)))
            failed += [f"{name}: nothing to judge: {why}" for why in unjudged or []]
            if unjudged and not rows:
                continue  # said above: no comparison was made
        if (why := gate.nothing(rows, run)) is not None:
            unread = f"; {skipped} record file(s) could not be read" if skipped else ""
            failed.append(f"{name}: nothing to judge: {why}{unread}")
            continue
        failed += [
            f"{name}: {c.variant} vs {c.baseline} ({c.verdict})"
            for c in rows
            if gate.matches(c, run)
        ]
    if failed:
        print("perflab-report: gate failed: " + visible("; ".join(failed)), file=sys.stderr)
        sys.exit(1)


def _decision(name: str, gate: Gate, row: Row, run: Run) -> str:
    """ "gate slower: amp=bf16 vs amp=off FASTER 1.26x [1.21, 1.31]: not matched
    (false-positive rate < 0.1 %, power > 99 % for a 2 % slowdown at 8 rounds)" """
    decision = "MATCHED" if gate.matches(row, run) else "not matched"
    e = row.evidence
    verdict = f"{row.verdict} {e.interval()}" if e is not None else row.verdict
    rates = e.rates_text(gate.direction) if e is not None else "no interval"
    return f"gate {name}: {row.variant} vs {row.baseline} {verdict}: {decision} ({rates})"


if __name__ == "__main__":
    main()
