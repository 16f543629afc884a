"""From the records of a sweep to its summary: per-variant numbers, comparisons, verdicts.

Pure functions over what is on disk (experiment.json and the trial records), so running
the analysis again on the same directory gives the same numbers, bit for bit, and a
finished or interrupted sweep can be analysed on a machine without torch or the model:

    python -m perflab.analysis SWEEP_DIR
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perflab import stats
from perflab.errors import RecordError
from perflab.numerics import compare_probes
from perflab.plan import SENTINEL, Plan
from perflab.records import TrialRecord, load_record
from perflab.variants import variant_summary

EXPERIMENT_FILE = "experiment.json"
SUMMARY_FILE = "summary.json"
# Comparisons above this count are an exploratory grid: Benjamini-Hochberg, labelled.
EXPLORATORY_COMPARISONS = 20


@dataclass(frozen=True)
class Experiment:
    """What experiment.json holds: the plan, the schedule settings and how the run went."""

    plan: Plan
    # the schedule.* settings the sweep ran with
    schedule: dict[str, Any]
    # "running", "precision reached", "max rounds", "time budget", "interrupted",
    # "every variant failed", "no comparison left (failed variants)", "config error"
    stop_reason: str
    # complete rounds, and seconds spent measuring (summed over the sessions of a resumed
    # experiment; the time between sessions does not count)
    rounds: int
    elapsed_s: float
    # what a resumed session must match: each job's composed config and the machine and
    # software (perflab.resume.fingerprint)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    # seconds each round took (a round finished in a later session adds both parts)
    round_s: list[float] = field(default_factory=list)
    # one entry per resumed session: at_round, trials_kept, at (ISO 8601 UTC)
    resumed: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_dict(),
            "schedule": self.schedule,
            "stop_reason": self.stop_reason,
            "rounds": self.rounds,
            "elapsed_s": self.elapsed_s,
            "fingerprint": self.fingerprint,
            "round_s": self.round_s,
            "resumed": self.resumed,
        }

    @classmethod
    def load(cls, sweep_dir: Path) -> Experiment:
        data = json.loads((Path(sweep_dir) / EXPERIMENT_FILE).read_text())
        return cls(
            Plan.from_dict(data["plan"]),
            data["schedule"],
            data["stop_reason"],
            data["rounds"],
            data["elapsed_s"],
            data.get("fingerprint", {}),
            data.get("round_s", []),
            data.get("resumed", []),
        )


# Files already warned about in this process: a sweep reads its records several times
# (resume, summary, report) and should name a bad file once.
_warned: set[str] = set()


def load_trials(
    sweep_dir: Path, plan: Plan, skipped: list[str] | None = None
) -> dict[str, dict[int, TrialRecord]]:
    """Every readable record of every variant, by round. An unreadable file (truncated,
    not JSON, not a perflab record, a newer schema_version) is skipped with a warning on
    stderr naming it, and appended to ``skipped`` (path relative to the sweep directory:
    why), rather than stopping the analysis."""
    trials: dict[str, dict[int, TrialRecord]] = {}
    for variant in plan.variants:
        by_round: dict[int, TrialRecord] = {}
        for path in sorted((Path(sweep_dir) / variant.dir / "trials").glob("r*.json")):
            try:
                record = load_record(path)
            except RecordError as exc:
                if str(path) not in _warned:
                    _warned.add(str(path))
                    print(f"perflab: warning: skipping {exc}", file=sys.stderr)
                if skipped is not None:
                    why = str(exc).removeprefix(f"{path}: ")
                    skipped.append(f"{path.relative_to(sweep_dir).as_posix()}: {why}")
                continue
            by_round[record.round] = record
        trials[variant.name] = by_round
    return trials


def costs(trials: dict[int, TrialRecord], metric: str) -> dict[int, float]:
    """Per-round trial cost of the ok trials."""
    return {r: stats.trial_cost(t, metric) for r, t in trials.items() if t.status == "ok"}


def compare(
    base: dict[int, float], var: dict[int, float], level: float, delta: float
) -> dict[str, Any] | None:
    """Paired comparison over the rounds where both trials are ok."""
    rounds = sorted(set(base) & set(var))
    if len(rounds) < 2:
        return None
    d = stats.paired_log_ratios([base[r] for r in rounds], [var[r] for r in rounds])
    effect = stats.paired_effect(d, level)
    hl, hl_low, hl_high = stats.hodges_lehmann(d, level)
    outliers = stats.mad_outliers(d)
    result: dict[str, Any] = {
        "speedup": effect.speedup,
        "ci_low": effect.low,
        "ci_high": effect.high,
        "ci_level": level,
        "half_width": effect.half_width,
        "rounds": effect.n,
        "p_value": effect.p_value,
        "sd_log_ratio": effect.sd_log,
        "verdict": stats.verdict(effect.low, effect.high, delta),
        "hodges_lehmann": {"speedup": hl, "ci_low": hl_low, "ci_high": hl_high},
        # the robust interval leaves the band the t interval is in: skewed or bimodal data
        "distribution_sensitive": stats.verdict(hl_low, hl_high, delta)
        != stats.verdict(effect.low, effect.high, delta)
        and math.isfinite(hl_high),
        "outlier_rounds": [rounds[i] for i in outliers],
        "rounds_to_decide": None,
    }
    if len(base) >= 2 and len(var) >= 2:
        # unpaired companion over every ok trial, rounds ignored (Welch on log costs)
        welch = stats.welch_effect(list(base.values()), list(var.values()), level)
        result["welch"] = {
            "speedup": welch.speedup,
            "ci_low": welch.low,
            "ci_high": welch.high,
            "p_value": welch.p_value,
        }
    if outliers and len(rounds) - len(outliers) >= 2:
        kept = [x for i, x in enumerate(d) if i not in outliers]
        without = stats.paired_effect(kept, level)
        result["without_outliers"] = {
            "speedup": without.speedup,
            "ci_low": without.low,
            "ci_high": without.high,
        }
    if result["verdict"] == stats.INCONCLUSIVE:
        result["rounds_to_decide"] = stats.rounds_to_decide(effect, delta)
    return result


def analyze(experiment: Experiment, trials: dict[str, dict[int, TrialRecord]]) -> dict[str, Any]:
    """The summary of an experiment, as written to summary.json."""
    plan, sched = experiment.plan, experiment.schedule
    metric, level = sched["metric"], sched["confidence"]
    cost = {name: costs(t, metric) for name, t in trials.items()}
    sentinel, delta = _sentinel(plan, cost, level, sched["delta"])
    variants = {v.name: variant_summary(v, trials[v.name], metric) for v in plan.variants}
    comparisons = []
    for variant, base in plan.comparisons():
        result = compare(cost[base.name], cost[variant.name], level, delta)
        health = variants[variant.name]["health"] + [
            f"baseline: {h}" for h in variants[base.name]["health"]
        ]
        numerics = _numerics(trials[base.name], trials[variant.name])
        if numerics is not None and not numerics.get("ok"):
            health.append(
                "numerics CHANGED beyond tolerance: the variant computes something "
                "else (fast and wrong is not a win)"
            )
        comparisons.append(
            {
                "variant": variant.label,
                "baseline": base.label,
                "cell": variant.cell,
                "metric": metric,
                "delta": delta,
                "health": health,
                "numerics": numerics,
                **(result or {"verdict": "NO DATA"}),
            }
        )
    _adjust(comparisons, 1 - level)
    unreliable = []
    if sentinel is not None and sentinel["verdict"] in (stats.FASTER, stats.SLOWER):
        unreliable.append(
            "the A/A sentinel differed from its baseline: timings drifted or "
            "the machine was disturbed; do not trust the verdicts"
        )
    return finite(
        {
            "metric": metric,
            "ci_level": level,
            "delta_requested": sched["delta"],
            "delta": delta,
            "label": sched.get("label", ""),
            "rounds": experiment.rounds,
            "stop_reason": experiment.stop_reason,
            "elapsed_s": experiment.elapsed_s,
            "unreliable": unreliable,
            "exploratory": len(comparisons) > EXPLORATORY_COMPARISONS,
            "sentinel": sentinel,
            "comparisons": comparisons,
            "scaling": batch_scaling(plan, trials, level) if "batch_size" in plan.swept else [],
            "variants": list(variants.values()),
        }
    )


def _sentinel(
    plan: Plan, cost: dict[str, dict[int, float]], level: float, delta: float
) -> tuple[dict[str, Any] | None, float]:
    """The A/A comparison and the band it implies: delta = max(requested, noise floor),
    the noise floor being how far from 1 the A/A interval reaches."""
    pair = plan.sentinel()
    if pair is None:
        return None, delta
    sentinel = compare(cost[pair[1].name], cost[pair[0].name], level, delta)
    if sentinel is None:
        return None, delta
    floor = max(sentinel["ci_high"] - 1, 1 - sentinel["ci_low"])
    sentinel["noise_floor"] = floor
    return sentinel, max(delta, floor)


def batch_scaling(
    plan: Plan, trials: dict[str, dict[int, TrialRecord]], level: float
) -> list[dict[str, Any]]:
    """Throughput (samples/s) of each baseline variant, by batch size, with a t interval
    over its trials (batch sizes are separate cells: unpaired, so no speedup claim)."""
    rows = []
    for v in plan.variants:
        if v.baseline is not None or v.name == SENTINEL:
            continue
        logs = np.log([1e9 / c for c in costs(trials[v.name], "throughput").values()])
        if len(logs) < 2:
            continue
        mean = float(logs.mean())
        half = (
            float(stats.sps.t.ppf(0.5 + level / 2, len(logs) - 1))
            * float(logs.std(ddof=1))
            / math.sqrt(len(logs))
        )
        rows.append(
            {
                "batch_size": v.cell.get("batch_size"),
                "variant": v.label,
                "throughput": math.exp(mean),
                "ci_low": math.exp(mean - half),
                "ci_high": math.exp(mean + half),
                "trials": len(logs),
            }
        )
    return rows


def _adjust(comparisons: list[dict[str, Any]], alpha: float) -> None:
    """Holm across the comparisons of the experiment (Benjamini-Hochberg for an
    exploratory grid); a FASTER/SLOWER whose adjusted p-value is not below alpha is
    downgraded to INCONCLUSIVE."""
    done = [c for c in comparisons if "p_value" in c]
    if not done:
        return
    raw = [c["p_value"] for c in done]
    exploratory = len(comparisons) > EXPLORATORY_COMPARISONS
    adjusted = stats.benjamini_hochberg(raw) if exploratory else stats.holm(raw)
    for c, p in zip(done, adjusted, strict=True):
        c["p_adjusted"] = p
        c["adjustment"] = "benjamini-hochberg" if exploratory else "holm"
        if c["verdict"] in (stats.FASTER, stats.SLOWER) and p >= alpha:
            c["verdict"] = stats.INCONCLUSIVE
            effect = stats.Effect(
                c["speedup"],
                c["ci_low"],
                c["ci_high"],
                c["ci_level"],
                c["rounds"],
                math.log(c["speedup"]),
                c["sd_log_ratio"],
                p,
            )
            c["rounds_to_decide"] = stats.rounds_to_decide(effect, c["delta"])
            c["note"] = f"not significant after {c['adjustment']} adjustment (p={p:.3g})"


def finite(value: Any) -> Any:
    """JSON has no NaN or infinity: an unbounded or undefined number becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def _numerics(base: dict[int, TrialRecord], var: dict[int, TrialRecord]) -> dict[str, Any] | None:
    """The variant's probe against its baseline's (both from their earliest probed trial)."""
    b = next((t.probe for _, t in sorted(base.items()) if t.probe is not None), None)
    v = next((t.probe for _, t in sorted(var.items()) if t.probe is not None), None)
    return None if b is None or v is None else compare_probes(b, v)


def analyze_dir(sweep_dir: Path) -> dict[str, Any]:
    experiment = Experiment.load(sweep_dir)
    return analyze(experiment, load_trials(sweep_dir, experiment.plan))


def main(argv: list[str] | None = None) -> None:
    from perflab.console import experiment_table

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m perflab.analysis SWEEP_DIR", file=sys.stderr)
        sys.exit(2)
    sweep_dir = Path(args[0])
    if not (sweep_dir / EXPERIMENT_FILE).exists():
        print(
            f"perflab: error: {sweep_dir}: no {EXPERIMENT_FILE}; not a perflab sweep directory",
            file=sys.stderr,
        )
        sys.exit(2)
    try:
        summary = analyze_dir(sweep_dir)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"perflab: error: {sweep_dir / EXPERIMENT_FILE}: unreadable ({exc})", file=sys.stderr)
        sys.exit(2)
    print(experiment_table(summary))


if __name__ == "__main__":
    main()
