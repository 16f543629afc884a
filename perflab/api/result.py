"""What ``perflab.run`` returns: a finished sweep's typed summary, its comparisons found
by label or by knob, claims checked on their intervals, and pandas frames."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from perflab.api import expect
from perflab.api.overrides import as_overrides
from perflab.config.plan import label_text
from perflab.errors import PerflabError
from perflab.formats.summary import (
    Comparison,
    MergedSummary,
    Summary,
    SummaryError,
    load_merged_summary,
    load_summary,
)
from perflab.formats.sweepdir import GROUPS_FILE, REPORT_FILE, SUMMARY_FILE

if TYPE_CHECKING:
    import pandas as pd


class ExperimentError(PerflabError):
    """The experiment did not run, or ended without a summary: bad input (exit 2, the
    message names the field), results that could not be written (74), or a crash."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode


class Undecided(Exception):
    """A claim its interval cannot decide (INCONCLUSIVE, NO DATA, an UNRELIABLE run):
    neither a pass nor a failure. The message says why and what would decide it."""


def _raise_undecided(message: str) -> NoReturn:
    raise Undecided(message)


@dataclass(frozen=True)
class Result:
    """A finished (or interrupted) sweep: ``summary`` is summary.json, typed."""

    sweep_dir: Path
    summary: Summary | MergedSummary
    # the perflab command's exit code: 0, 1 (a trial failed; the others ran) or 130
    # (stopped at run(timeout_s=...): the partial summary)
    returncode: int
    # what an undecided claim does in assert_*: raise Undecided (the pytest plugin
    # makes it a skip where the user chose that)
    on_undecided: Callable[[str], NoReturn] = field(
        default=_raise_undecided, repr=False, compare=False
    )

    @property
    def comparisons(self) -> list[Comparison]:
        return self.summary.comparisons

    @property
    def unreliable(self) -> list[str]:
        """Why the run's verdicts are not to be trusted (the A/A sentinel); empty if none."""
        return self.summary.unreliable

    @property
    def report(self) -> Path:
        return self.sweep_dir / REPORT_FILE

    @property
    def verdicts(self) -> dict[str, str]:
        """Each comparison's verdict, by the variant's label."""
        return {c.variant: c.verdict for c in self.comparisons}

    def comparison(self, variant: str | None = None, /, **knobs: Any) -> Comparison:
        """The comparison of the variant labelled ``variant`` ("amp=bf16", "batch_size=64
        amp=true"), or whose label has every ``knobs`` value (``amp="bf16"``,
        ``step=my_step``: a function as run() named it)."""
        wanted = set(variant.split()) if variant else set()
        wanted |= {label_text(o) for o in as_overrides((), knobs)}
        found = [c for c in self.comparisons if wanted <= set(c.variant.split())]
        if len(found) != 1:
            labels = ", ".join(repr(c.variant) for c in self.comparisons) or "none"
            which = " ".join(sorted(wanted)) or "(no variant named)"
            problem = "no comparison" if not found else f"{len(found)} comparisons"
            raise LookupError(f"{problem} for {which}; the comparisons: {labels}")
        return found[0]

    # --- claims ---------------------------------------------------------------------

    def check_faster(
        self, variant: str | None = None, /, by: float = 0.0, **knobs: Any
    ) -> expect.Check:
        c = self.comparison(variant, **knobs)
        # power: to pass when the true speedup is twice the claim (or twice the band)
        return expect.faster(c, by, self.unreliable, _rates(c, 2 * max(by, c.delta)))

    def check_not_slower(
        self, variant: str | None = None, /, by: float = 0.0, **knobs: Any
    ) -> expect.Check:
        c = self.comparison(variant, **knobs)
        # power: to fail when the true slowdown is twice the tolerance
        return expect.not_slower(c, by, self.unreliable, _rates(c, -2 * max(by, c.delta)))

    def check_equivalent(self, variant: str | None = None, /, **knobs: Any) -> expect.Check:
        c = self.comparison(variant, **knobs)
        return expect.equivalent(c, self.unreliable, _rates(c, 2 * c.delta))

    def assert_faster(
        self, variant: str | None = None, /, by: float = 0.0, **knobs: Any
    ) -> expect.Check:
        """AssertionError unless the variant is faster by at least ``by``; an undecided
        claim goes to ``on_undecided``."""
        return self._asserted(self.check_faster(variant, by=by, **knobs))

    def assert_not_slower(
        self, variant: str | None = None, /, by: float = 0.0, **knobs: Any
    ) -> expect.Check:
        return self._asserted(self.check_not_slower(variant, by=by, **knobs))

    def assert_equivalent(self, variant: str | None = None, /, **knobs: Any) -> expect.Check:
        return self._asserted(self.check_equivalent(variant, **knobs))

    def _asserted(self, check: expect.Check) -> expect.Check:
        if check.outcome == expect.FAILED:
            raise AssertionError(f"perflab: {check}")
        if check.outcome == expect.UNDECIDED:
            self.on_undecided(f"perflab: {check}")
        return check

    # --- frames and display ---------------------------------------------------------

    def to_frame(self) -> pd.DataFrame:
        """One row per comparison, with the swept knobs as columns (perflab.report.load's
        ``comparisons``; the report's other frames are on perflab.report.load(sweep_dir))."""
        from perflab.report import load

        return load(self.sweep_dir).comparisons

    def __str__(self) -> str:
        lines = [f"perflab sweep {self.sweep_dir} ({self.summary_line()})"]
        for c in self.comparisons:
            lines.append(f"  {c.variant} vs {c.baseline}: {expect.evidence(c)}")
        lines += [f"  UNRELIABLE: {u}" for u in self.unreliable]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        rows = [f"| {c.variant} | {c.baseline} | {expect.evidence(c)} |" for c in self.comparisons]
        head = ["| variant | baseline | verdict, speedup, 95 % CI, rounds |", "|---|---|---|"]
        notes = [f"\n**UNRELIABLE**: {u}" for u in self.unreliable]
        return "\n".join([f"perflab sweep `{self.sweep_dir}`", "", *head, *rows, *notes])

    def summary_line(self) -> str:
        s = self.summary
        if isinstance(s, Summary):
            return f"{s.rounds} rounds, stopped: {s.stop_reason}"
        return f"{len(s.groups)} groups"


def _rates(c: Comparison, effect: float) -> str:
    """The decision's error rates in words (perflab.analysis.gate_rates) for a true
    ``effect`` (+: a speedup, -: a slowdown), or "" where the comparison has no estimate
    to compute them from."""
    from perflab.analysis.gate_rates import rates_text

    return rates_text(c, effect)


def load_result(sweep_dir: Path, returncode: int = 0) -> Result:
    """The Result of a sweep directory perflab has finished (or stopped) writing."""
    path = sweep_dir / SUMMARY_FILE
    try:
        grouped = (sweep_dir / GROUPS_FILE).is_file()
        summary = load_merged_summary(path) if grouped else load_summary(path)
    except SummaryError as exc:
        raise ExperimentError(f"the sweep wrote no readable summary: {exc}", returncode) from exc
    return Result(sweep_dir, summary, returncode)
