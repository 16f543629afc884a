"""perflab-report SWEEP_DIR: regenerate a sweep's report from its records alone.

Exit codes: 0 report written (and no --fail-on gate matched); 1 a --fail-on gate matched,
or had nothing to judge (every comparison NO DATA, no numerics check, no A/A sentinel
result: a gate that cannot judge never passes); 2 bad arguments or not a sweep dir; 74 the
disk filled while the report was written (perflab.exits.EXIT_OUTPUT_LOST).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from perflab.analysis.summarize import load_experiment
from perflab.formats.summary import NO_DATA, Comparison, Numerics, Sentinel, load_merged_summary
from perflab.formats.sweepdir import EXPERIMENT_FILE, SUMMARY_FILE
from perflab.report.console import experiment_table


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
    ),
    "not-faster": Gate(
        "the verdict is anything but FASTER", lambda c, run: c.verdict != "FASTER", _no_verdict
    ),
    "inconclusive": Gate(
        "the verdict is INCONCLUSIVE", lambda c, run: c.verdict == "INCONCLUSIVE", _no_verdict
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
    return Row(variant or c.variant, c.baseline, c.verdict, c.numerics)


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
    from perflab.errors import PerflabError
    from perflab.formats.records import check_writable

    try:
        check_writable(args.out or args.sweep_dir, "--out" if args.out else "sweep_dir")
    except PerflabError as exc:
        _fail(str(exc))


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="perflab-report",
        description="Regenerate report.md, its plots, the CSV exports and summary.json of a "
        "perflab sweep from its records (no torch needed; unfinished sweeps too).",
    )
    parser.add_argument("sweep_dir", type=Path, help="a perflab sweep directory (multirun/...)")
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
        + "; and when it has nothing to judge",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    from perflab.report.merge import is_grouped

    if is_grouped(args.sweep_dir) and not args.against:
        _check_writable(args)
        _grouped(args)
        return
    for directory in filter(None, (args.sweep_dir, args.against)):
        if not (directory / EXPERIMENT_FILE).is_file():
            _fail(f"{directory}: no {EXPERIMENT_FILE}; not a perflab sweep directory")
        try:
            load_experiment(directory)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            _fail(f"{directory / EXPERIMENT_FILE}: unreadable ({exc!r})")
    _check_writable(args)
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
        rows += [
            Row(r["variant"], f"{r['variant']} in {against.old_name}", r["verdict"])
            for r in against.rows
        ]
        print("\n".join(extra))
    try:
        path = write_report(report, args.out, extra)
    except OSError as exc:
        _output_lost(exc, args.out or args.sweep_dir)
    print(experiment_table(report.summary))
    print(f"report: {path}")
    run = Run(report.summary.unreliable, [report.summary.sentinel])
    _gates(args.fail_on, rows, run, len(report.skipped))


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


def _gates(gates: list[str], rows: list[Row], run: Run, skipped: int) -> None:
    """Exit 1 with one line when a gate matched a comparison, or has nothing to judge
    (``skipped``: record files that could not be read, often why)."""
    failed = []
    for name in gates:
        gate = GATES[name]
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
        from perflab.report.markdown_text import visible

        print("perflab-report: gate failed: " + visible("; ".join(failed)), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
