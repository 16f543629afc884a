"""``python -m perflab.analysis SWEEP_DIR``: the analysis recomputed from a sweep
directory's experiment.json and trial records alone, printed as summary.json's JSON;
nothing is written. ``python -m perflab.report SWEEP_DIR`` prints the same as a table."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from perflab.analysis.summarize import analyze
from perflab.analysis.sweep import Experiment, read_records
from perflab.formats.summary import Summary
from perflab.formats.sweepdir import EXPERIMENT_FILE


def recomputed(argv: list[str], command: str) -> Summary:
    """The summary of the one sweep directory ``argv`` names; exit 2 with one line if it
    names none, or one without a readable experiment.json."""
    if len(argv) != 1:
        print(f"usage: {command} SWEEP_DIR", file=sys.stderr)
        sys.exit(2)
    sweep_dir = Path(argv[0])
    if not (sweep_dir / EXPERIMENT_FILE).exists():
        print(
            f"perflab: error: {sweep_dir}: no {EXPERIMENT_FILE}; not a perflab sweep directory",
            file=sys.stderr,
        )
        sys.exit(2)
    try:
        experiment = Experiment.load(sweep_dir)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"perflab: error: {sweep_dir / EXPERIMENT_FILE}: unreadable ({exc})", file=sys.stderr)
        sys.exit(2)
    records = read_records(sweep_dir, experiment)
    return analyze(records.experiment, records.trials)


def printed(text: str) -> None:
    """Print ``text``; a reader that stopped early (``| head``) is no error."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Python's advice (the signal module's docs, "Note on SIGPIPE"): point stdout
        # at devnull so that the flush at exit raises nothing either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv: list[str] | None = None) -> None:
    summary = recomputed(sys.argv[1:] if argv is None else argv, "python -m perflab.analysis")
    # as perflab.formats.records.write_json_atomic writes summary.json
    printed(json.dumps(summary.to_dict(), separators=(",", ":"), allow_nan=True))


if __name__ == "__main__":
    main()
