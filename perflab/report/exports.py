"""A sweep's results for the tools that keep a history across commits, and for a pull
request: Bencher Metric Format, github-action-benchmark's custom JSON, a short markdown
comment (docs/ci.md).

What goes in: per variant its p50 step time (value only: the summary has no interval on
it), per comparison its speedup with the interval that gave the verdict, and the A/A
sentinel's speedup (a series of the machine's noise). A comparison without an estimate
(NO DATA) has no number and is left out of the two JSON formats.

- Bencher Metric Format (https://bencher.dev/docs/reference/bencher-metric-format/, JSON
  Schema https://bencher.dev/bmf.json): ``{benchmark: {measure: {"value", "lower_value",
  "upper_value"}}}``, ``value`` required, every value a number. The step time is the
  built-in ``latency`` measure (nanoseconds), a speedup the measure ``speedup`` with its
  interval as lower and upper values. BMF holds numbers only: the verdict is not in it
  (in a benchmark's name it would start a new series whenever it changed).
- github-action-benchmark (https://github.com/benchmark-action/github-action-benchmark,
  ``tool: customSmallerIsBetter`` / ``customBiggerIsBetter``; src/extract.ts,
  ``BenchmarkResult``): a JSON array of ``{"name", "unit", "value", "range"?, "extra"?}``,
  ``range`` and ``extra`` strings. One file has one direction, so step times (smaller is
  better) and speedups (bigger is better) are two files. A speedup's ``range`` is "± h"
  (the action's own form, extractRangeInfo.ts), h the interval's larger distance from the
  speedup; its ``extra`` holds the verdict and the exact interval.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.formats.atomic import write_text_whole
from perflab.formats.dataclass_json import encode, written_when
from perflab.formats.summary import NO_DATA, Comparison, MergedSummary, Sentinel, Summary
from perflab.formats.summary.variant import VariantSummary
from perflab.report.console import fmt_ns
from perflab.report.evidence import Evidence, paired
from perflab.report.markdown_text import esc, table

# Bencher's built-in Latency measure (nanoseconds), and the measure of a speedup
LATENCY, SPEEDUP = "latency", "speedup"
# the benchmark name of the A/A sentinel's speedup
SENTINEL_NAME = "A/A sentinel"
# a PR comment: at most this many headline verdicts and table rows (the full report
# has the rest): about 40 lines, well within a comment read without scrolling far
HEADLINES, TABLE_ROWS = 6, 15
# headline verdicts in this order: what a pull request must not miss first
VERDICT_ORDER = ("SLOWER", "FASTER", "INCONCLUSIVE", "EQUIVALENT", NO_DATA)


@dataclass(frozen=True)
class Results:
    """What the exports hold: the parts of a sweep's typed summary (or of a grouped
    sweep's merged one) they use."""

    # every comparison (a grouped sweep's tagged with its group)
    comparisons: list[Comparison]
    # the variants, the A/A copy left out (none for a grouped sweep: its groups' own
    # reports hold them)
    variants: list[VariantSummary]
    # the A/A sentinels
    sentinels: list[Sentinel]
    # reasons not to trust the verdicts
    unreliable: list[str]

    @classmethod
    def of(cls, summary: Summary | MergedSummary) -> Results:
        if isinstance(summary, MergedSummary):
            sentinels = [s for s in summary.sentinels if s is not None]
            return cls(summary.comparisons, [], sentinels, summary.unreliable)
        variants = [v for v in summary.variants if v.name != "sentinel"]
        sentinels = [summary.sentinel] if summary.sentinel is not None else []
        return cls(summary.comparisons, variants, sentinels, summary.unreliable)

    def step_times(self) -> dict[str, float]:
        """Variant label -> its p50 step time, ns (the variants with an ok trial)."""
        return {
            v.label: v.measured.step_ns.p50
            for v in self.variants
            if v.measured is not None and math.isfinite(v.measured.step_ns.p50)
        }

    def decided(self) -> list[tuple[str, Comparison, Evidence]]:
        """(name, comparison, its evidence) of each comparison with an estimate."""
        return [
            (comparison_name(c), c, paired(c.estimate, c.delta))
            for c in self.comparisons
            if c.estimate is not None
        ]

    def sentinel_evidence(self) -> Evidence | None:
        """The A/A sentinel's evidence; None without one, or with several (a grouped
        sweep's, which the summary does not name)."""
        if len(self.sentinels) != 1:
            return None
        [sentinel] = self.sentinels
        return paired(sentinel.estimate, 0.0)


def comparison_name(c: Comparison) -> str:
    """ "amp=bf16 vs amp=off", with its group in a grouped sweep: "... [model=a]" """
    return f"{c.variant} vs {c.baseline}" + (f" [{c.group}]" if c.group else "")


# --- Bencher Metric Format ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Metric:
    """A BMF metric: a value, and the ends of its interval where it has one."""

    value: float
    lower_value: float | None = written_when()
    upper_value: float | None = written_when()


def bmf(results: Results) -> dict[str, dict[str, Any]]:
    """The results in Bencher Metric Format: benchmark -> measure -> metric."""
    out: dict[str, dict[str, Any]] = {
        label: {LATENCY: encode(Metric(value=p50))} for label, p50 in results.step_times().items()
    }
    for name, _, evidence in results.decided():
        out[name] = {SPEEDUP: encode(_interval_metric(evidence))}
    if (sentinel := results.sentinel_evidence()) is not None:
        out[SENTINEL_NAME] = {SPEEDUP: encode(_interval_metric(sentinel))}
    return out


def _interval_metric(e: Evidence) -> Metric:
    return Metric(value=e.speedup, lower_value=e.ci_low, upper_value=e.ci_high)


# --- github-action-benchmark -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BenchmarkResult:
    """One entry of github-action-benchmark's custom JSON (its src/extract.ts)."""

    name: str
    unit: str
    value: float
    # the spread, "± 0.05" (the form the action parses)
    range: str | None = written_when()
    # shown in the chart's tooltip
    extra: str | None = written_when()


def github_step_times(results: Results) -> list[dict[str, Any]]:
    """customSmallerIsBetter: each variant's p50 step time, ms."""
    return [
        encode(BenchmarkResult(name=label, unit="ms", value=p50 / 1e6, extra="p50 step time"))
        for label, p50 in results.step_times().items()
    ]


def github_speedups(results: Results) -> list[dict[str, Any]]:
    """customBiggerIsBetter: each comparison's speedup (and the A/A sentinel's), its
    interval as a range, the verdict and the interval's ends in ``extra``."""
    entries = [(name, c.verdict, e) for name, c, e in results.decided()]
    if (sentinel := results.sentinel_evidence()) is not None:
        entries.append((SENTINEL_NAME, f"A/A {results.sentinels[0].estimate.verdict}", sentinel))
    return [encode(_speedup_result(name, verdict, e)) for name, verdict, e in entries]


def _speedup_result(name: str, verdict: str, e: Evidence) -> BenchmarkResult:
    half = max(e.ci_high - e.speedup, e.speedup - e.ci_low)
    extra = (
        f"{verdict}; {_pct(e.level)} interval [{e.ci_low:.4g}, {e.ci_high:.4g}]; {e.rounds} rounds"
    )
    return BenchmarkResult(name=name, unit="x", value=e.speedup, range=f"± {half:.4g}", extra=extra)


def json_text(value: Any) -> str:
    """An export's JSON; a number JSON cannot hold (NaN) is a bug, not a file."""
    return json.dumps(value, indent=2, allow_nan=False) + "\n"


def write_export(path: Path, text: str) -> None:
    """Write an export whole: the old file or the new, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_whole(path, text)


# --- a PR comment ------------------------------------------------------------------------


def pr_comment(results: Results, report_link: str) -> str:
    """A pull request's comment: the verdicts counted, the headline verdicts with their
    interval and error rates, one small table, the A/A sentinel, and a link to the full
    report (``report_link``: a URL, or a path relative to where the comment is)."""
    ordered = sorted(results.comparisons, key=lambda c: VERDICT_ORDER.index(c.verdict))
    lines = [f"### perflab: {_counts(results.comparisons)}", ""]
    lines += [f"> **UNRELIABLE**: {esc(why)}" for why in results.unreliable[:3]]
    lines += [""] if results.unreliable else []
    lines += [_headline(c) for c in ordered[:HEADLINES]]
    if len(ordered) > HEADLINES:
        lines.append(f"- and {len(ordered) - HEADLINES} more in the full report")
    lines += ["", *_small_table(results, ordered), ""]
    if (sentinel := results.sentinel_evidence()) is not None:
        floor = results.sentinels[0].noise_floor
        lines += [f"A/A sentinel: {sentinel.interval()}, noise floor {_pct(floor)}.", ""]
    lines.append(f"[Full report]({report_link})")
    return "\n".join(lines) + "\n"


def report_link(report: Path, comment: Path, url: str | None) -> str:
    """``url`` if given, else the report's path relative to the comment's folder."""
    return url or Path(os.path.relpath(report.resolve(), comment.resolve().parent)).as_posix()


def _counts(comparisons: list[Comparison]) -> str:
    """ "1 FASTER · 0 SLOWER": the verdicts there are, and always the count of SLOWER,
    the one a pull request is read for."""
    if not comparisons:
        return "no comparison"
    counts = {v: sum(c.verdict == v for c in comparisons) for v in VERDICT_ORDER}
    return " · ".join(f"{n} {v}" for v, n in counts.items() if n or v == "SLOWER")


def _headline(c: Comparison) -> str:
    name = esc(comparison_name(c))
    if c.estimate is None:
        return f"- **{NO_DATA}** {name}: too few paired rounds for an interval"
    e = paired(c.estimate, c.delta)
    # the power a CI reader needs: to catch a regression, unless this one sped up
    direction = 1 if c.verdict == "FASTER" else -1
    return (
        f"- **{c.verdict}** {name}: {e.interval()} ({_pct(e.level)} interval, band "
        f"±{_pct(c.delta)}); {e.rates_text(direction)}"
    )


def _small_table(results: Results, ordered: list[Comparison]) -> list[str]:
    times = results.step_times()
    rows = [
        [
            esc(comparison_name(c)),
            _time(times.get(c.variant)),
            _time(times.get(c.baseline)),
            paired(c.estimate, c.delta).interval() if c.estimate is not None else "-",
            c.verdict,
        ]
        for c in ordered[:TABLE_ROWS]
    ]
    lines = table(["comparison", "p50 step", "baseline p50", "speedup [interval]", "verdict"], rows)
    if len(ordered) > TABLE_ROWS:
        lines.append(f"\n{len(ordered) - TABLE_ROWS} more comparisons in the full report.")
    return lines


def _time(ns: float | None) -> str:
    return "-" if ns is None else fmt_ns(ns)


def _pct(fraction: float) -> str:
    """ "95 %", "1 %", "0.8 %" """
    return f"{fraction * 100:.3g} %"
