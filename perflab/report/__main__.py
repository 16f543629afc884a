"""``python -m perflab.report SWEEP_DIR``: the analysis recomputed from a sweep
directory's experiment.json and trial records alone, its table printed; nothing is
written (``perflab-report`` writes the report, summary.json and the exports)."""

from __future__ import annotations

import sys
from pathlib import Path

from perflab.analysis.summarize import analyze, load_experiment, load_trials
from perflab.formats.sweepdir import EXPERIMENT_FILE
from perflab.report.console import experiment_table


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m perflab.report SWEEP_DIR", file=sys.stderr)
        sys.exit(2)
    sweep_dir = Path(args[0])
    if not (sweep_dir / EXPERIMENT_FILE).exists():
        print(
            f"perflab: error: {sweep_dir}: no {EXPERIMENT_FILE}; not a perflab sweep directory",
            file=sys.stderr,
        )
        sys.exit(2)
    try:
        experiment = load_experiment(sweep_dir)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"perflab: error: {sweep_dir / EXPERIMENT_FILE}: unreadable ({exc})", file=sys.stderr)
        sys.exit(2)
    print(experiment_table(analyze(experiment, load_trials(sweep_dir, experiment.plan))))


if __name__ == "__main__":
    main()
