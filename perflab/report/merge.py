"""The report of a sweep split into groups (perflab.experiment.scaleout): one section per group.

Each group is a complete sweep directory with its own report; comparisons stay inside
their group, where trials were paired on one machine. The merged report shows where each
group ran, puts the groups' speedups side by side (each a ratio measured on one machine),
and refuses to set step times of different groups against each other when their machines
differ in hardware or software (as pyperf refuses to compare runs with mismatched
metadata) unless forced, and then labels the comparison FORCED.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from perflab.errors import PerflabError, RecordError
from perflab.formats.groups import DONE, GroupEntry, read_groups
from perflab.formats.summary import MergedSummary, tagged, write_summary
from perflab.formats.sweepdir import (
    EXPERIMENT_FILE,
    GROUPS_DIR,
    GROUPS_FILE,
    REPORT_FILE,
    SUMMARY_FILE,
    inside,
)
from perflab.report.against import ENV_KEYS, compare_runs, section
from perflab.report.markdown_text import esc, table
from perflab.report.rows import first_ok
from perflab.report.tables import Report, load

log = logging.getLogger(__name__)


def is_grouped(sweep_dir: Path) -> bool:
    return (Path(sweep_dir) / GROUPS_FILE).is_file()


def machine(report: Report) -> dict[str, Any]:
    """Where a group ran: host, hardware and software of its first finished trial."""
    for v in report.experiment.plan.variants:
        record = first_ok(report.trials[v.name])
        if record is not None:
            keys = ("hostname", *ENV_KEYS)
            return {k: record.environment.get(k) for k in keys}
    return {}


def machine_differences(machines: dict[str, dict[str, Any]]) -> list[str]:
    """The hardware and software keys on which the groups' machines differ."""
    known = [m for m in machines.values() if m]
    return [k for k in ENV_KEYS if len({json.dumps(m.get(k)) for m in known}) > 1]


# a group of the index and its report (None: none to read)
Group = tuple[GroupEntry, Report | None]


def load_groups(sweep_dir: Path) -> list[Group]:
    """Every group of SWEEP/groups.json with its report; RecordError for an index that
    cannot be read."""
    try:
        entries = read_groups(sweep_dir)
    except (OSError, ValueError) as exc:
        path = Path(sweep_dir) / GROUPS_FILE
        raise RecordError(f"{path}: not a perflab groups index ({exc})") from exc
    return [_group(Path(sweep_dir), entry) for entry in entries]


def _group(sweep_dir: Path, entry: GroupEntry) -> Group:
    """One group of the index and its report: None for a group that has not written its
    experiment.json yet, or whose directory cannot be read (its entry then says why; one
    unreadable group must not hide the others)."""
    directory = sweep_dir / GROUPS_DIR / entry.dir
    try:
        inside(sweep_dir, directory)
        if not (directory / EXPERIMENT_FILE).is_file():
            return entry, None
        return entry, load(directory)
    except (PerflabError, OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("group %s: unreadable (%s)", entry.key, exc)
        return entry.unreadable(exc), None


def _speedups(groups: list[Group]) -> list[str]:
    """Each comparison's speedup per group: ratios measured within one machine each, a
    table per comparison with a row per group (a column per group ran off the page)."""
    columns = [entry.key for entry, report in groups if report is not None]
    cells: dict[str, dict[str, list[str]]] = {}
    for entry, report in groups:
        if report is None:
            continue
        for c in report.summary.comparisons:
            e = c.estimate
            cells.setdefault(f"{c.variant} vs {c.baseline}", {})[entry.key] = (
                [f"{e.speedup:.3f}", f"[{e.ci_low:.3f}, {e.ci_high:.3f}]", e.verdict]
                if e is not None
                else ["-", "-", c.verdict]
            )
    if not cells:
        return []
    lines = [
        "## Speedups across groups",
        "",
        "Each row is a ratio measured within one group, on one machine (paired rounds); "
        "setting the ratios side by side compares the treatments' effects, not the machines.",
        "",
    ]
    for what, by in cells.items():
        rows = [[esc(col), *map(esc, by.get(col, ["-", "-", "-"]))] for col in columns]
        lines += [f"{esc(what)}:", "", *table(["group", "speedup", "CI", "verdict"], rows), ""]
    return lines


def _step_times(groups: list[Group], diffs: list[str], force: bool) -> list[str]:
    """Step times of the same variant in different groups: only on equal machines, or
    forced and labelled."""
    done = [(entry, report) for entry, report in groups if report is not None]
    if len(done) < 2:
        return []
    lines = ["## Step times across groups", ""]
    if diffs and not force:
        return lines + [
            "Not compared: the groups ran on machines that differ in "
            f"{esc(', '.join(diffs))}, so their step times measure different machines. "
            "To compare them anyway (labelled FORCED): `perflab-report SWEEP_DIR --force`.",
            "",
        ]
    (first_entry, first), rest = done[0], done[1:]
    for entry, report in rest:
        try:
            against = compare_runs(report, first, force=force, ignore=_group_keys(first_entry))
        except PerflabError as exc:
            lines += [f"- {esc(entry.key)} against {esc(first_entry.key)}: {esc(exc)}", ""]
            continue
        against.old_name = f"group {first_entry.key}"
        lines += [f"### {esc(entry.key)} against {esc(first_entry.key)}", ""]
        lines += section(against)[2:]
    return lines


def _group_keys(entry: GroupEntry) -> tuple[str, ...]:
    return tuple(part.split("=", 1)[0] for part in entry.key.split())


def render_merged(groups: list[Group], force: bool) -> str:
    machines = {entry.key: machine(r) if r else {} for entry, r in groups}
    diffs = machine_differences(machines)
    lines = ["# perflab report", "", f"{len(groups)} groups, each run as one job on one machine."]
    lines += [""]
    if diffs:
        lines += [
            f"> The groups' machines differ in {esc(', '.join(diffs))}: verdicts stand "
            "within each group; step times are not compared across groups.",
            "",
        ]
    rows = []
    for entry, report in groups:
        m = machines[entry.key]
        state = entry.state
        if report is not None and state == DONE:
            state = report.summary.stop_reason
        rows.append(
            [
                f"[{esc(entry.key)}]({GROUPS_DIR}/{entry.dir}/{REPORT_FILE})",
                esc(state),
                esc(m.get("hostname", "-")),
                esc(m.get("cpu_model", "-")),
                esc(", ".join(m.get("cuda_devices") or []) or "-"),
                esc(m.get("torch", "-")),
            ]
        )
    lines += ["## Groups", ""]
    lines += table(["group", "state", "host", "CPU", "GPUs", "torch"], rows) + [""]
    lines += _speedups(groups)
    lines += _step_times(groups, diffs, force)
    return "\n".join(lines)


def merged_summary(groups: list[Group]) -> MergedSummary:
    """Every group's comparisons and flags, each tagged with its group (for --fail-on):
    its A/A sentinel, the record files it skipped and those changed after they were
    written too, so that a gate can tell when it has nothing to judge."""
    done = [(entry.key, report) for entry, report in groups if report is not None]
    return MergedSummary(
        groups=[entry for entry, _ in groups],
        comparisons=[tagged(c, key) for key, r in done for c in r.summary.comparisons],
        unreliable=[f"{key}: {u}" for key, r in done for u in r.summary.unreliable],
        health=[f"{key}: {h}" for key, r in done for h in r.summary.health],
        sentinels=[r.summary.sentinel for _, r in done],
        skipped=[f"{key}: {f}" for key, r in done for f in r.skipped],
        edited_records=[f"{key}: {f}" for key, r in done for f in r.summary.edited_records],
    )


def write_merged_report(sweep_dir: Path, out_dir: Path | None = None, force: bool = False) -> Path:
    from perflab.report import write_report

    groups = load_groups(sweep_dir)
    out = Path(out_dir or sweep_dir)
    out.mkdir(parents=True, exist_ok=True)
    for entry, report in groups:
        if report is not None:
            # each group's own report, also published next to the merged one
            write_report(report, out / GROUPS_DIR / entry.dir)
    (out / REPORT_FILE).write_text(render_merged(groups, force))
    write_summary(out / SUMMARY_FILE, merged_summary(groups))
    return out / REPORT_FILE
