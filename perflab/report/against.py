"""Two runs of the same variants, typically before and after a code change.

Variants are matched by their resolved config (the schedule aside: a budget does not
change what is measured). Runs on different software or hardware measure different
things, so the comparison is refused, with the differences named, unless forced; a
forced comparison is labelled as such. Rounds of two runs are not paired, so the effect
is Welch's interval on the log trial costs, against the wider band of the two runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from perflab.analysis import stats
from perflab.analysis.summarize import costs
from perflab.config.plan import Variant
from perflab.config.schema import without_keys
from perflab.errors import PerflabError
from perflab.formats.records import TrialRecord
from perflab.formats.summary import NO_DATA
from perflab.report.markdown_text import esc, table
from perflab.report.rows import first_ok
from perflab.report.tables import Report

# What must be equal for two runs to be compared: where they ran and with what.
ENV_KEYS = ("torch", "cuda", "cudnn", "python", "cpu_model", "usable_cpus", "cuda_devices")


@dataclass(frozen=True)
class AgainstRow:
    """One variant of two runs: the new run's trials against the old run's."""

    # the new run's label of the variant
    variant: str
    # the git commit each run's first finished trial recorded (None: not in a repository)
    old_commit: str | None
    new_commit: str | None
    # FASTER, SLOWER, EQUIVALENT, INCONCLUSIVE, or NO DATA with fewer than two trials each
    verdict: str
    # old / new (> 1: the new run is faster) and Welch's interval; None with NO DATA
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    # the interval's level and the band (the wider of the two runs')
    ci_level: float | None = None
    delta: float | None = None
    # ok trials of each run
    old_trials: int | None = None
    new_trials: int | None = None


@dataclass
class Against:
    old_name: str
    forced: list[str]
    results: list[AgainstRow]


def _config_key(config: dict[str, Any], ignore: tuple[str, ...] = ()) -> str:
    """The config as a matching key; ``schedule`` (a budget does not change what is
    measured) and the dotted keys in ``ignore`` left out."""
    return json.dumps(without_keys(config, ("schedule", "scaleout", *ignore)), sort_keys=True)


def _first_records(
    report: Report, ignore: tuple[str, ...] = ()
) -> dict[str, tuple[Variant, TrialRecord]]:
    """Resolved-config key -> (variant, its first ok record), the sentinel left out."""
    found = {}
    for v in report.experiment.plan.variants:
        record = first_ok(report.trials[v.name])
        if record is not None and v.name != "sentinel":
            found[_config_key(record.config, ignore)] = (v, record)
    return found


def differences(old: TrialRecord, new: TrialRecord) -> list[str]:
    """Environment and conditions that differ between two trial records."""
    diffs = [
        f"{k}: {old.environment.get(k)} -> {new.environment.get(k)}"
        for k in ENV_KEYS
        if old.environment.get(k) != new.environment.get(k)
    ]
    for key in ("device",):
        if old.settings.get(key) != new.settings.get(key):
            diffs.append(f"{key}: {old.settings.get(key)} -> {new.settings.get(key)}")
    if old.conditions != new.conditions:
        changed = sorted(
            k
            for k in set(old.conditions) | set(new.conditions)
            if old.conditions.get(k) != new.conditions.get(k)
        )
        diffs.append(f"conditions differ: {', '.join(changed)}")
    return diffs


def compare_runs(
    new: Report, old: Report, force: bool = False, ignore: tuple[str, ...] = ()
) -> Against:
    """Match the variants of two runs (by config, the keys in ``ignore`` aside) and
    estimate new against old for each."""
    new_by, old_by = _first_records(new, ignore), _first_records(old, ignore)
    matched = [k for k in new_by if k in old_by]
    if not matched:
        raise PerflabError(
            f"--against {old.sweep_dir.name}: no variant of the two runs has "
            "the same resolved config; allowed: two runs of the same command"
        )
    diffs = sorted({d for k in matched for d in differences(old_by[k][1], new_by[k][1])})
    if diffs and not force:
        raise PerflabError(
            f"--against {old.sweep_dir.name}: environments differ ("
            f"{'; '.join(diffs)}); allowed: runs on the same software and "
            "hardware, or --force to compare anyway (labelled FORCED)"
        )
    metric = new.summary.metric
    level = new.summary.ci_level
    delta = max(new.summary.delta, old.summary.delta)
    rows = []
    for key in matched:
        (new_v, new_rec), (old_v, old_rec) = new_by[key], old_by[key]
        a = list(costs(old.trials[old_v.name], metric).values())
        b = list(costs(new.trials[new_v.name], metric).values())
        commits = _commit(old_rec), _commit(new_rec)
        if len(a) < 2 or len(b) < 2:
            rows.append(
                AgainstRow(
                    variant=new_v.label,
                    old_commit=commits[0],
                    new_commit=commits[1],
                    verdict=NO_DATA,
                )
            )
            continue
        e = stats.welch_effect(a, b, level)
        rows.append(
            AgainstRow(
                variant=new_v.label,
                old_commit=commits[0],
                new_commit=commits[1],
                verdict=stats.verdict(e.low, e.high, delta),
                speedup=e.speedup,
                ci_low=e.low,
                ci_high=e.high,
                ci_level=level,
                delta=delta,
                old_trials=len(a),
                new_trials=len(b),
            )
        )
    return Against(old.sweep_dir.name, diffs, rows)


def _commit(record: TrialRecord) -> str | None:
    """The git commit a record's environment names (the record keeps it as the trial
    wrote it, a JSON object)."""
    commit = record.environment.get("git_commit")
    return str(commit) if commit else None


def _estimate_cells(r: AgainstRow) -> list[str]:
    """The speedup and its interval, "-" each with NO DATA."""
    if r.speedup is None or r.ci_low is None or r.ci_high is None:
        return ["-", "-"]
    return [f"{r.speedup:.3f}", f"[{r.ci_low:.3f}, {r.ci_high:.3f}]"]


def section(against: Against) -> list[str]:
    lines = [f"## Against {esc(against.old_name)}", ""]
    if against.forced:
        lines += [
            f"> **FORCED**: the runs' environments differ: {esc('; '.join(against.forced))}",
            "",
        ]
    lines += [
        "Speedup = old / new (> 1: the new run is faster), Welch interval over the "
        "two runs' trials (rounds of different runs are not paired).",
        "",
    ]
    rows = [
        [
            esc(r.variant),
            esc((r.old_commit or "-")[:12]),
            esc((r.new_commit or "-")[:12]),
            *_estimate_cells(r),
            r.verdict,
        ]
        for r in against.results
    ]
    return (
        lines
        + table(["variant", "old commit", "new commit", "speedup", "CI", "verdict"], rows)
        + [""]
    )
