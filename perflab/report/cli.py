"""perflab-report SWEEP_DIR: regenerate a sweep's report from its records alone."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perflab.analysis import EXPERIMENT_FILE
from perflab.console import experiment_table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="perflab-report",
        description="Regenerate report.md, the CSV exports and summary.json of a perflab "
        "sweep from its records (no torch needed; unfinished sweeps too).",
    )
    parser.add_argument("sweep_dir", type=Path, help="a perflab sweep directory (multirun/...)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write the report there instead of into the sweep directory",
    )
    args = parser.parse_args(argv)
    if not (args.sweep_dir / EXPERIMENT_FILE).is_file():
        print(
            f"perflab-report: error: {args.sweep_dir}: no {EXPERIMENT_FILE}; not a perflab "
            "sweep directory",
            file=sys.stderr,
        )
        sys.exit(2)
    from perflab.report import load, write_report

    report = load(args.sweep_dir)
    path = write_report(report, args.out)
    print(experiment_table(report.summary))
    print(f"report: {path}")


if __name__ == "__main__":
    main()
