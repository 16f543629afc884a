"""A sweep as the report reads it: the typed values every section renders, and tidy
pandas DataFrames of them for notebooks and the CSV exports.

    from perflab.report import load
    report = load("multirun/2026-11-22/10-00-00-000000")
    report.summary           # summary.json as perflab.formats.summary.Summary (typed)
    report.comparison_rows   # per comparison: the summary's, with the knob's evidence,
                             # the first calls and the break-even (ComparisonRow)
    report.variant_rows      # per variant: the plan's and the summary's (VariantRow)
    report.comparisons       # DataFrame, one row per comparison (comparisons.csv)
    report.variants          # DataFrame, one row per variant, the A/A copy too (variants.csv)
    report.numerics          # DataFrame, one row per comparison: the variant's outputs
                             # against its baseline's (numerics.csv)
    report.trials_frame()    # DataFrame, one row per trial record
    report.families_frame()  # DataFrame, one row per variant and kernel or operator family
                             # of its profiled pass

The typed rows are built by perflab.report.rows, the frames by perflab.report.frames,
whose docstring lists their columns.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from perflab.analysis.summarize import analyze
from perflab.analysis.sweep import Experiment, SweepRecords, read_sweep
from perflab.errors import OutsideSweep, RecordError
from perflab.formats.profile_json import Profile, read_profile
from perflab.formats.records import TrialRecord
from perflab.formats.summary import Summary
from perflab.formats.sweepdir import inside, profile_record
from perflab.report.frames import (
    comparison_frame,
    family_frame,
    numerics_frame,
    trial_frame,
    variant_frame,
)
from perflab.report.rows import ComparisonRow, VariantRow, comparison_rows, variant_rows


@dataclass
class Report:
    """Everything a report shows, computed from the records alone. The typed rows and
    the frames are derived from the summary, the plan and the records, once, on first
    use."""

    sweep_dir: Path
    experiment: Experiment
    summary: Summary
    trials: dict[str, dict[int, TrialRecord]]
    # variant name -> its profiling trial's profile.json, None when it has none
    profiles: dict[str, Profile | None]
    # record files that could not be read, "path relative to the sweep directory: why"
    skipped: list[str] = field(default_factory=list)

    @cached_property
    def comparison_rows(self) -> list[ComparisonRow]:
        """One per comparison, in the plan's order (the summary's): the comparisons
        frame and the markdown read the same rows."""
        return comparison_rows(self.summary, self.experiment.plan, self.trials)

    @cached_property
    def comparisons(self) -> pd.DataFrame:
        return comparison_frame(self.experiment.plan, self.comparison_rows)

    @cached_property
    def variants(self) -> pd.DataFrame:
        return variant_frame(self.summary, self.experiment.plan)

    @cached_property
    def numerics(self) -> pd.DataFrame:
        return numerics_frame(self.summary)

    @cached_property
    def variant_rows(self) -> list[VariantRow]:
        """One per variant, the A/A copy included, in the plan's order (the summary's)."""
        return variant_rows(self.summary, self.experiment.plan, self.trials)

    def trials_frame(self) -> pd.DataFrame:
        """One row per trial record (columns: perflab.report.frames); built when asked,
        as it reads every record's steps."""
        return trial_frame(self.summary, self.experiment.plan, self.trials)

    def families_frame(self) -> pd.DataFrame:
        """One row per variant and family of its profiled pass (perflab.report.frames)."""
        return family_frame(self.experiment.plan, self.profiles)


def _profile(sweep_dir: Path, job_dir: str, skipped: list[str]) -> Profile | None:
    """A job's profile.json; None without one, or when it cannot be used (a link out of
    the sweep, a file without the values the report reads: named in ``skipped``, as an
    unreadable record is)."""
    path = profile_record(sweep_dir / job_dir)
    if not path.is_symlink() and not path.exists():
        return None  # not profiled (profile=off, or the pass failed)
    try:
        inside(sweep_dir, path)
        return read_profile(path)
    except RecordError as exc:  # OutsideSweep too
        print(f"perflab: warning: skipping {exc}", file=sys.stderr)
        why = str(exc).split(": ", 1)[-1] if not isinstance(exc, OutsideSweep) else None
        name = path.relative_to(sweep_dir).as_posix()
        skipped.append(f"{name}: {why or 'leads out of the sweep'}")
        return None


def load(
    sweep_dir: str | Path, summary: Summary | None = None, records: SweepRecords | None = None
) -> Report:
    """Analyse a sweep directory from its records and build every table (``records``:
    the records this command already read, and ``summary``: the analysis just computed
    from them, to save doing either twice)."""
    sweep_dir = Path(sweep_dir)
    records = records if records is not None else read_sweep(sweep_dir)
    experiment, trials = records.experiment, records.trials
    skipped = list(records.skipped)
    summary = summary if summary is not None else analyze(experiment, trials)
    plan = experiment.plan
    profiles = {v.name: _profile(sweep_dir, v.dir, skipped) for v in plan.variants}
    return Report(sweep_dir, experiment, summary, trials, profiles, skipped)
