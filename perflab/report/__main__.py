"""``python -m perflab.report SWEEP_DIR``: the analysis recomputed from a sweep
directory's experiment.json and trial records alone, its table printed; nothing is
written (``perflab-report`` writes the report, summary.json and the exports;
``python -m perflab.analysis`` prints the summary as JSON)."""

from __future__ import annotations

import sys

from perflab.analysis.__main__ import printed, recomputed
from perflab.report.console import experiment_table


def main(argv: list[str] | None = None) -> None:
    summary = recomputed(sys.argv[1:] if argv is None else argv, "python -m perflab.report")
    printed(experiment_table(summary))


if __name__ == "__main__":
    main()
