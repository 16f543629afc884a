"""perflab-report --history: a series of sweeps of the same variants, oldest first, side
by side.

One row per variant, one column per sweep (its p50 step time) and, between two
consecutive sweeps, the later one against the earlier as --against compares them
(perflab.report.against.compare_runs: variants matched by resolved config, Welch's
interval over the two sweeps' trials, the wider band of the two): a regression across
commits is a SLOWER between consecutive entries. Two sweeps whose machines' software or
hardware differ (against.ENV_KEYS, the device, the conditions) are not compared unless
forced, and a forced comparison is labelled FORCED, as with --against.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from perflab.errors import PerflabError
from perflab.formats.summary import NO_DATA, Sentinel
from perflab.report.against import AgainstRow, compare_runs
from perflab.report.console import fmt_ns
from perflab.report.evidence import Evidence, unpaired
from perflab.report.markdown_text import esc, tables_within
from perflab.report.tables import Report

# what --history --out DIR writes into DIR
HISTORY_FILE = "history.md"


def two_runs_evidence(row: AgainstRow) -> Evidence | None:
    """A variant of two runs compared: its Welch interval and the noise it implies, for
    the gates' error rates; None without one (NO DATA)."""
    if (
        row.speedup is None
        or row.ci_low is None
        or row.ci_high is None
        or row.ci_level is None
        or row.delta is None
        or row.old_trials is None
        or row.new_trials is None
    ):
        return None
    trials = min(row.old_trials, row.new_trials)
    return unpaired(row.speedup, row.ci_low, row.ci_high, row.ci_level, row.delta, trials)


@dataclass(frozen=True)
class Step:
    """Two consecutive sweeps of a history, the later against the earlier."""

    # the two sweeps' names, as the history's columns show them
    old: str
    new: str
    # one per variant the two have in common
    rows: list[AgainstRow]
    # how the machines' software, hardware or conditions differ (empty: they do not)
    differences: list[str]
    # the step times were set against each other: the machines agree, or --force
    compared: bool


@dataclass(frozen=True)
class History:
    # the sweeps' names, oldest first
    names: list[str]
    # each sweep's commit (its first variant's first ok trial), where known
    commits: list[str | None]
    # each sweep's complete rounds
    rounds: list[int]
    # variant label -> its p50 step time in each sweep, ns (None: not measured there)
    p50_ns: dict[str, list[float | None]]
    # one per pair of consecutive sweeps
    steps: list[Step]
    # reasons not to trust a sweep's verdicts, "NAME: ..."
    unreliable: list[str]
    # each sweep's A/A sentinel, None where it has none
    sentinels: list[Sentinel | None]
    # record files that could not be read, over all the sweeps
    skipped: int


def sweep_names(directories: list[Path]) -> list[str]:
    """The directories' names, or their paths where two names are the same."""
    names = [d.name for d in directories]
    return names if len(set(names)) == len(names) else [str(d) for d in directories]


def build_history(reports: list[Report], force: bool = False) -> History:
    """Set the sweeps (oldest first) side by side; PerflabError when two consecutive
    sweeps share no variant."""
    names = sweep_names([r.sweep_dir for r in reports])
    steps = [
        _step(old, new, old_name, new_name, force)
        for (old, new), (old_name, new_name) in zip(pairwise(reports), pairwise(names), strict=True)
    ]
    return History(
        names=names,
        commits=_commits(steps),
        rounds=[r.summary.rounds for r in reports],
        p50_ns=_step_times(reports),
        steps=steps,
        unreliable=[
            f"{n}: {why}"
            for n, r in zip(names, reports, strict=True)
            for why in r.summary.unreliable
        ],
        sentinels=[r.summary.sentinel for r in reports],
        skipped=sum(len(r.skipped) for r in reports),
    )


def _step(old: Report, new: Report, old_name: str, new_name: str, force: bool) -> Step:
    try:
        # always forced here: a history shows the differences in its table and leaves
        # the pair uncompared (not the whole history refused) unless --force
        against = compare_runs(new, old, force=True)
    except PerflabError as exc:
        raise PerflabError(
            f"--history: {old_name} -> {new_name}: no variant of the two sweeps has the "
            "same resolved config; allowed: sweeps of the same command"
        ) from exc
    return Step(old_name, new_name, against.results, against.forced, force or not against.forced)


def _commits(steps: list[Step]) -> list[str | None]:
    if not steps:
        return []
    olds = [next((r.old_commit for r in s.rows if r.old_commit), None) for s in steps]
    last = next((r.new_commit for r in steps[-1].rows if r.new_commit), None)
    return [*olds, last]


def _step_times(reports: list[Report]) -> dict[str, list[float | None]]:
    """Variant label -> its p50 step in each sweep, the A/A copy left out, in the order
    the labels first appear."""
    labels = list(
        dict.fromkeys(v.label for r in reports for v in r.summary.variants if v.name != "sentinel")
    )
    times: dict[str, list[float | None]] = {label: [] for label in labels}
    for report in reports:
        measured = {
            v.label: v.measured.step_ns.p50
            for v in report.summary.variants
            if v.name != "sentinel" and v.measured is not None
        }
        for label in labels:
            times[label].append(measured.get(label))
    return times


# --- the markdown ------------------------------------------------------------------------


def render(history: History) -> list[str]:
    """The history as markdown: the table, then what a reader must know about it."""
    lines = [
        f"## History of {len(history.names)} sweeps, oldest first",
        "",
        "Each sweep's p50 step time; between two sweeps, the later against the earlier: "
        "speedup = earlier / later (> 1: the later is faster), Welch's interval over the "
        "two sweeps' trials (rounds of different sweeps are not paired). A regression "
        "is a SLOWER.",
        "",
    ]
    lines += tables_within(_header(history), _rows(history))
    lines += ["", *_notes(history)]
    return lines


def _header(history: History) -> list[str]:
    header = ["variant", esc(history.names[0])]
    for step in history.steps:
        header += [f"{esc(step.old)} → {esc(step.new)}", esc(step.new)]
    return header


def _rows(history: History) -> list[list[str]]:
    rows = []
    for label, times in history.p50_ns.items():
        cells = [esc(label), _time(times[0])]
        for step, time in zip(history.steps, times[1:], strict=True):
            cells += [_step_cell(step, label), _time(time)]
        rows.append(cells)
    return rows


def _time(ns: float | None) -> str:
    return "-" if ns is None else fmt_ns(ns)


def _step_cell(step: Step, label: str) -> str:
    row = next((r for r in step.rows if r.variant == label), None)
    if row is None:
        return "-"
    if not step.compared:
        return "not compared"
    evidence = two_runs_evidence(row)
    if evidence is None:
        return NO_DATA
    forced = "FORCED " if step.differences else ""
    return f"{forced}**{row.verdict}** {evidence.interval()}"


def _notes(history: History) -> list[str]:
    notes = []
    for step in history.steps:
        if step.differences and step.compared:
            notes.append(
                f"- **FORCED** {esc(step.old)} → {esc(step.new)}: the machines differ: "
                f"{esc('; '.join(step.differences))}"
            )
        elif step.differences:
            notes.append(
                f"- {esc(step.old)} → {esc(step.new)} not compared: the machines differ "
                f"({esc('; '.join(step.differences))}); --force compares them anyway "
                "(labelled FORCED)"
            )
    notes += [f"- **UNRELIABLE** {esc(why)}" for why in history.unreliable]
    sweeps = ", ".join(
        f"{esc(name)} ({esc(commit[:12]) if commit else 'no commit'}, {rounds} rounds)"
        for name, commit, rounds in zip(history.names, history.commits, history.rounds, strict=True)
    )
    return [*notes, f"- sweeps: {sweeps}"]
