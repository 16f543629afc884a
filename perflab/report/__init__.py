"""Reports from the records of a sweep: report.md and CSV exports; DataFrames for notebooks.

The report never re-measures and never imports torch: everything comes from the records
on disk, so it can be regenerated anywhere, also from an unfinished sweep.
"""

from __future__ import annotations

from pathlib import Path

from perflab.formats.summary import write_summary
from perflab.formats.sweepdir import REPORT_FILE, SUMMARY_FILE
from perflab.report.tables import Report, load

CSV_FILES = {
    "comparisons": "comparisons.csv",
    "variants": "variants.csv",
    "numerics": "numerics.csv",
}


def write_report(
    report: Report, out_dir: Path | None = None, extra: list[str] | None = None
) -> Path:
    """Write report.md with its PNG plots, the CSV exports and summary.json; return the
    report's path. ``extra``: markdown lines added before the method (e.g. --against)."""
    from perflab.formats.atomic import replaced_whole, write_text_whole
    from perflab.report.artifacts import publish
    from perflab.report.markdown import render
    from perflab.report.plots import draw_all

    out = Path(out_dir or report.sweep_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = publish(report, out)
    extra = incidents(report, files.refused) + (extra or [])
    write_text_whole(out / REPORT_FILE, render(report, draw_all(report, out), extra, files))
    for name, filename in CSV_FILES.items():
        with replaced_whole(out / filename) as tmp:
            getattr(report, name).to_csv(tmp, index=False)
    write_summary(out / SUMMARY_FILE, report.summary)
    return out / REPORT_FILE


def incidents(report: Report, refused: list[str] | None = None) -> list[str]:
    """A "Failures and notes" section: every trial that failed, crashed, hung or was
    invalid (with why), record files that could not be read or were changed after they
    were written, profiler files not published (``refused``: they lead out of the sweep)
    and resumed sessions; none when the run went cleanly."""
    from perflab.analysis.sweep import EDITED
    from perflab.report.markdown_text import esc

    lines = [
        f"- {esc(v.label)}, round {int(r) + 1} ({esc(v.dir)}/trials/r{int(r):03d}.json): {esc(why)}"
        for v in report.summary.variants
        for r, why in v.failed.items()
    ]
    lines += [f"- skipped an unreadable file: {esc(s)}" for s in report.skipped]
    lines += [f"- not published: {esc(why)}" for why in refused or []]
    lines += [
        f"- {esc(path)}: {EDITED} (its values passed the checks and are used as they are)"
        for path in report.summary.edited_records
    ]
    lines += [
        f"- resumed at round {r.at_round + 1} ({r.trials_kept} finished trials kept "
        "from the earlier session)"
        for r in report.experiment.resumed
    ]
    return ["## Failures and notes", "", *lines, ""] if lines else []


# The public face: the report's names, and the modules other packages use (the console's
# tables, the merge of a grouped sweep). tests/test_layout.py checks that no other
# package imports a module not listed.
__all__ = ["Report", "load", "write_report", "incidents", "REPORT_FILE", "console", "merge"]
