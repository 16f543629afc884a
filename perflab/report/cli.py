"""perflab-report SWEEP_DIR: regenerate a sweep's report from its records alone.

Exit codes: 0 report written (and no --fail-on gate matched); 1 a --fail-on gate matched
(for CI: `perflab-report SWEEP --fail-on slower`); 2 bad arguments or not a sweep dir.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perflab.analysis import EXPERIMENT_FILE
from perflab.console import experiment_table

Gate = Callable[[dict[str, Any], dict[str, Any]], bool]

# --fail-on NAME: what it means, and its test on one comparison and the summary
GATES: dict[str, tuple[str, Gate]] = {
    "slower": (
        "the verdict is SLOWER (also against --against)",
        lambda c, s: c["verdict"] == "SLOWER",
    ),
    "not-faster": ("the verdict is anything but FASTER", lambda c, s: c["verdict"] != "FASTER"),
    "inconclusive": ("the verdict is INCONCLUSIVE", lambda c, s: c["verdict"] == "INCONCLUSIVE"),
    "numerics": (
        "the outputs changed beyond tolerance",
        lambda c, s: bool(c.get("numerics")) and not c["numerics"].get("ok"),
    ),
    "unreliable": ("the experiment is flagged unreliable", lambda c, s: bool(s["unreliable"])),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
        help="with --against: compare even when the environments differ "
        "(the report labels it FORCED)",
    )
    parser.add_argument(
        "--fail-on",
        action="append",
        default=[],
        choices=sorted(GATES),
        help="exit 1 when any comparison matches (repeatable): "
        + "; ".join(f"{k}: {v[0]}" for k, v in sorted(GATES.items())),
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    for directory in filter(None, (args.sweep_dir, args.against)):
        if not (directory / EXPERIMENT_FILE).is_file():
            print(
                f"perflab-report: error: {directory}: no {EXPERIMENT_FILE}; not a perflab "
                "sweep directory",
                file=sys.stderr,
            )
            sys.exit(2)
    from perflab.errors import PerflabError
    from perflab.report import load, write_report
    from perflab.report.against import compare_runs, section

    report = load(args.sweep_dir)
    rows, extra = list(report.summary["comparisons"]), []
    if args.against:
        try:
            against = compare_runs(report, load(args.against), force=args.force)
        except PerflabError as exc:
            print(f"perflab-report: error: {exc}", file=sys.stderr)
            sys.exit(2)
        extra = section(against)
        rows += [{**r, "baseline": f"{r['variant']} in {against.old_name}"} for r in against.rows]
        print("\n".join(extra))
    path = write_report(report, args.out, extra)
    print(experiment_table(report.summary))
    print(f"report: {path}")
    failed = [
        f"{gate}: {c['variant']} vs {c['baseline']} ({c['verdict']})"
        for gate in args.fail_on
        for c in rows
        if GATES[gate][1](c, report.summary)
    ]
    if failed:
        print("perflab-report: gate failed: " + "; ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
