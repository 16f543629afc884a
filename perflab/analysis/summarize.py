"""From the records of a sweep to its summary: per-variant numbers, comparisons, verdicts.

Pure functions over what is on disk (experiment.json and the trial records), so running
the analysis again on the same directory gives the same numbers, bit for bit, and a
finished or interrupted sweep can be analysed on a machine without torch or the model:

    python -m perflab.report SWEEP_DIR
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perflab.analysis import carryover, sessions, stats
from perflab.analysis.numerics import compare_probes
from perflab.analysis.trials import trial_cost
from perflab.analysis.variants import parts_written, variant_summary
from perflab.config.plan import SENTINEL, Plan
from perflab.errors import OutsideSweep, RecordError
from perflab.formats.json_file import read_json
from perflab.formats.records import TrialRecord, load_record
from perflab.formats.summary import SUMMARY_SCHEMA_VERSION, Summary
from perflab.formats.sweepdir import EXPERIMENT_FILE, inside, trial_records

# Comparisons above this count are an exploratory grid: Benjamini-Hochberg, labelled.
EXPLORATORY_COMPARISONS = 20
# A round whose modified z-score exceeds 3.5 is listed as an outlier; the verdict moves to
# the trimmed interval only above this. With ten rounds the MAD is itself noisy: in
# simulated experiments without outliers 11 % of them had a round above 3.5, and
# switching on those cost 2 points of coverage (the switch picks exactly the samples whose
# spread looks small once trimmed); above 7, 0.6 % did, while a trial 30 % slower than
# its round's partner is still caught (benchmarks/validate_statistics.py).
GROSS_OUTLIER_Z = 7.0


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
    # software (perflab.experiment.resume.fingerprint)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    # seconds each round took (a round finished in a later session adds both parts)
    round_s: list[float] = field(default_factory=list)
    # one entry per resumed session: at_round, trials_kept, at (ISO 8601 UTC)
    resumed: list[dict[str, Any]] = field(default_factory=list)

    # experiment.json's format (class attributes, not fields), docs/records.md:
    #   1 (2026-11-22) no schema_version field;
    #   2 (2026-11-26) ``schema_version``, written first; otherwise as version 1.
    # A file without one is version 1; a version not listed here (one a newer perflab
    # wrote) is refused rather than misread.
    SCHEMA_VERSION = 2
    READS_VERSIONS = (1, 2)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.SCHEMA_VERSION,
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
        """experiment.json of ``sweep_dir``. Every caller names the file and says it is
        unreadable, in one line, for what this raises: OSError, ValueError (not JSON,
        nested too deep, a schema_version it does not read), KeyError, TypeError."""
        path = Path(sweep_dir) / EXPERIMENT_FILE
        try:
            inside(sweep_dir, path)  # experiment.json as a link to another sweep's
        except OutsideSweep as exc:
            raise ValueError(str(exc)) from exc
        data = read_json(path)
        cls._check_version(data)
        cls._check_sessions(data)
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

    @staticmethod
    def _check_sessions(data: dict[str, Any]) -> None:
        """ValueError for a ``resumed`` or ``round_s`` the analysis cannot read: the
        sessions place old records (perflab.analysis.sessions) and the report lists them."""
        resumed, round_s = data.get("resumed", []), data.get("round_s", [])
        keys = {"at_round": int, "trials_kept": int, "at": str}
        if not isinstance(resumed, list) or not all(
            isinstance(r, dict) and all(type(r.get(k)) is t for k, t in keys.items())
            for r in resumed
        ):
            raise ValueError("resumed: not a list of {at_round, trials_kept, at}")
        if not isinstance(round_s, list) or not all(type(x) in (int, float) for x in round_s):
            raise ValueError("round_s: not a list of seconds")

    @classmethod
    def _check_version(cls, data: Any) -> None:
        """ValueError for a schema_version this perflab does not read."""
        version = data.get("schema_version", 1) if isinstance(data, dict) else 1
        if type(version) is not int or version not in cls.READS_VERSIONS:
            newer = type(version) is int and version > cls.SCHEMA_VERSION
            raise ValueError(
                f"schema_version={version!r} is not supported by this perflab (reads "
                f"{', '.join(map(str, cls.READS_VERSIONS))})"
                + ("; upgrade perflab to read it" if newer else "")
            )


# Files already warned about in this process: a sweep reads its records several times
# (resume, summary, report) and should name a bad file once.
_warned: set[str] = set()
# what the warning and the report say of a record whose checksum does not match
EDITED = "changed after it was written: checksum mismatch"


def load_trials(
    sweep_dir: Path, plan: Plan, skipped: list[str] | None = None
) -> dict[str, dict[int, TrialRecord]]:
    """Every readable record of every variant, by round. A file that cannot be used
    (truncated, not JSON, not a perflab record, a newer schema_version, a value that
    makes no sense, a round other than its name's) is skipped with a warning on stderr
    naming it, and appended to ``skipped`` (path relative to the sweep directory: why),
    rather than stopping the analysis. A record changed after it was written (checksum)
    is used, with a warning; analyze lists it."""
    trials: dict[str, dict[int, TrialRecord]] = {}
    for variant in plan.variants:
        by_round: dict[int, TrialRecord] = {}
        for path in trial_records(Path(sweep_dir) / variant.dir):
            try:
                inside(sweep_dir, path)  # a link out of the sweep: skipped, named
                record = _load_trial(path)
            except RecordError as exc:
                _warn_once(path, f"skipping {exc}")
                if skipped is not None:
                    why = str(exc).removeprefix(f"{path}: ")
                    skipped.append(f"{path.relative_to(sweep_dir).as_posix()}: {why}")
                continue
            if record.edited:
                _warn_once(path, f"{path}: {EDITED}; its values are used as they are")
            by_round[record.round] = record
        trials[variant.name] = by_round
    return trials


def _load_trial(path: Path) -> TrialRecord:
    """load_record, and the round its file name promises: a copied or renamed record
    would otherwise take another round's place, or lose its own, without a word."""
    record = load_record(path)
    expected = f"r{record.round:03d}.json"
    if path.name != expected:
        raise RecordError(f"{path}: round={record.round} belongs in {expected}, not in {path.name}")
    return record


def _warn_once(path: Path, message: str) -> None:
    if str(path) not in _warned:
        _warned.add(str(path))
        print(f"perflab: warning: {message}", file=sys.stderr)


def edited_records(plan: Plan, trials: dict[str, dict[int, TrialRecord]]) -> list[str]:
    """The records changed after they were written, relative to the sweep directory
    (load_trials keeps a record only in the file named after its round)."""
    return [
        f"{v.dir}/trials/r{r:03d}.json"
        for v in plan.variants
        for r, record in sorted(trials[v.name].items())
        if record.edited
    ]


def costs(trials: dict[int, TrialRecord], metric: str) -> dict[int, float]:
    """Per-round trial cost of the ok trials."""
    return {r: trial_cost(t, metric) for r, t in trials.items() if t.status == "ok"}


def rounds_per_unit(schedule: Mapping[str, Any]) -> int:
    """How many consecutive rounds form one independent unit of the analysis: a worker
    generation with warm workers (schedule.isolation=worker), else one round. A worker
    serves schedule.trials_per_worker rounds, but at most a third of max_rounds: an
    interval needs 3 units, and a sweep capped at 6 rounds must still reach one. An
    experiment.json written before warm workers existed ran a fresh process per trial."""
    if schedule.get("isolation", "process") != "worker":
        return 1
    per_worker = int(schedule.get("trials_per_worker", 1))
    return max(min(per_worker, int(schedule.get("max_rounds", 0)) // stats.MIN_PAIRED_ROUNDS), 1)


def compare(
    base: dict[int, float],
    var: dict[int, float],
    level: float,
    delta: float,
    rounds_per_unit: int = 1,
    sessions: stats.Sessions | None = None,
) -> dict[str, Any] | None:
    """Paired comparison over the rounds where both trials are ok, one log-ratio per
    independent unit: a round, or with warm workers a worker generation of
    ``rounds_per_unit`` rounds (stats.paired_units).

    The verdict comes from the Student t interval on the units' log-ratios or, when a
    unit is a gross outlier (modified z-score above GROSS_OUTLIER_Z: a trial hit by a
    co-tenant), from the 20 %-trimmed interval (stats.trimmed_effect), which such units
    cannot widen or move; the other intervals are kept beside it. With ``sessions`` (a
    resumed sweep), a round is paired only within one session, and the unpaired
    interval leaves out the rounds it ran across two (stats.Sessions)."""
    if sessions is not None:
        across = set(sessions.across(set(base) & set(var)))
        base = {r: c for r, c in base.items() if r not in across}
        var = {r: c for r, c in var.items() if r not in across}
    d, units = stats.paired_units(base, var, rounds_per_unit, sessions)
    if len(d) < stats.MIN_PAIRED_ROUNDS:
        return None
    effect = stats.paired_effect(d, level)
    outliers = stats.mad_outliers(d)
    chosen, interval = effect, "t"
    if stats.mad_outliers(d, GROSS_OUTLIER_Z) and len(d) >= 5:
        chosen, interval = stats.trimmed_effect(d, level), "trimmed"
    hl, hl_low, hl_high = stats.hodges_lehmann(d, level)
    result: dict[str, Any] = {
        "speedup": chosen.speedup,
        "ci_low": chosen.low,
        "ci_high": chosen.high,
        "ci_level": level,
        "interval": interval,
        "half_width": chosen.half_width,
        "rounds": sum(len(u) for u in units),
        # only with warm workers: a fresh process per trial makes every round a unit
        **(
            {"units": len(units), "rounds_per_unit": rounds_per_unit} if rounds_per_unit > 1 else {}
        ),
        "p_value": chosen.p_value,
        "sd_log_ratio": effect.sd_log,
        "verdict": stats.verdict(chosen.low, chosen.high, delta),
        "t": {"speedup": effect.speedup, "ci_low": effect.low, "ci_high": effect.high},
        "hodges_lehmann": {"speedup": hl, "ci_low": hl_low, "ci_high": hl_high},
        # the distribution-free interval gives another verdict: skewed or bimodal data
        "distribution_sensitive": stats.verdict(hl_low, hl_high, delta)
        != stats.verdict(chosen.low, chosen.high, delta)
        and math.isfinite(hl_high),
        "outlier_rounds": [r for i in outliers for r in units[i]],
        "rounds_to_decide": None,
    }
    result.update(_companions(base, var, d, outliers, level, rounds_per_unit, sessions))
    if result["verdict"] == stats.INCONCLUSIVE:
        needed = (
            stats.rounds_to_decide(effect, delta)
            if interval == "t"
            else stats.rounds_to_narrow(chosen.speedup, chosen.low, chosen.high, len(d), delta)
        )
        # in rounds, as the schedule counts them: units are rounds_per_unit rounds each
        result["rounds_to_decide"] = None if needed is None else needed * rounds_per_unit
    return result


def unit_costs(
    costs: dict[int, float], rounds_per_unit: int, session: Mapping[int, int] | None = None
) -> list[float]:
    """One cost per unit (stats.paired_units): the geometric mean of its rounds' costs; a
    unit is a worker generation within one session (``session``: each round's)."""
    units: dict[tuple[int, int], list[float]] = {}
    for r, c in sorted(costs.items()):
        key = ((session or {}).get(r, 0), r // max(rounds_per_unit, 1))
        units.setdefault(key, []).append(math.log(c))
    return [math.exp(sum(v) / len(v)) for v in units.values()]


def _companions(
    base: dict[int, float],
    var: dict[int, float],
    d: list[float],
    outliers: list[int],
    level: float,
    rounds_per_unit: int = 1,
    sessions: stats.Sessions | None = None,
) -> dict[str, Any]:
    """The unpaired Welch interval over every ok trial (rounds ignored; with warm workers,
    one cost per worker generation), and the t interval without the outlier units: shown
    beside the verdict, never deciding it."""
    out: dict[str, Any] = {}
    base_costs = unit_costs(base, rounds_per_unit, sessions.base if sessions else None)
    var_costs = unit_costs(var, rounds_per_unit, sessions.variant if sessions else None)
    if len(base_costs) >= 2 and len(var_costs) >= 2:
        welch = stats.welch_effect(base_costs, var_costs, level)
        out["welch"] = {
            "speedup": welch.speedup,
            "ci_low": welch.low,
            "ci_high": welch.high,
            "p_value": welch.p_value,
        }
    if outliers and len(d) - len(outliers) >= 2:
        without = stats.paired_effect([x for i, x in enumerate(d) if i not in outliers], level)
        out["without_outliers"] = {
            "speedup": without.speedup,
            "ci_low": without.low,
            "ci_high": without.high,
        }
    return out


def analyze(experiment: Experiment, trials: dict[str, dict[int, TrialRecord]]) -> Summary:
    """The summary of an experiment (summary.json: Summary.to_dict). Computed as JSON
    values, the way perflab.analysis.simulation computes its comparisons too, then read
    into the model as a file would be: a value the model does not allow fails here."""
    return Summary.from_dict(summary_json(experiment, trials))


def summary_json(
    experiment: Experiment, trials: dict[str, dict[int, TrialRecord]]
) -> dict[str, Any]:
    """summary.json's object as the analysis computes it, before the model reads it."""
    plan, sched = experiment.plan, experiment.schedule
    metric, level, delta = sched["metric"], sched["confidence"], sched["delta"]
    cost = {name: costs(t, metric) for name, t in trials.items()}
    variants = {v.name: variant_summary(v, trials[v.name], metric) for v in plan.variants}
    per_unit = rounds_per_unit(sched)
    resumed = experiment.resumed
    comparisons = []
    for variant, base in plan.comparisons():
        between = sessions.between(trials[base.name], trials[variant.name], resumed)
        result = compare(cost[base.name], cost[variant.name], level, delta, per_unit, between)
        across = between.across(set(cost[base.name]) & set(cost[variant.name]))
        health = variants[variant.name]["health"] + [
            f"baseline: {h}" for h in variants[base.name]["health"]
        ]
        if across:
            health.append(sessions.finding(variant.label, across))
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
                **({"across_sessions": across} if across else {}),
            }
        )
    in_order = carryover.in_order(plan, trials, metric, resumed)
    fit = carryover.fit(in_order, carryover.reference(plan))
    carry = fit.carryovers(level) if fit else []
    sentinel = _sentinel(plan, trials, cost, level, delta, per_unit, resumed)
    if fit is not None and carryover.flagged(carry):
        pairs = [(c, v, b) for (v, b), c in zip(plan.comparisons(), comparisons, strict=True)]
        if sentinel is not None and (aa := plan.sentinel()) is not None:
            pairs.append((sentinel, *aa))
        for c, variant, base in pairs:
            adjust_for_carryover(c, fit.speedup(base.name, variant.name, level), delta)
    adjust(comparisons, 1 - level, delta)
    unreliable, health = sentinel_findings(sentinel, delta)
    health += carryover.findings(plan, carry)
    # rounds not paired because a resume split them: said where the console and the
    # report's header show it, beside each comparison's own "across_sessions"
    health += [h for c in comparisons for h in c["health"] if h.startswith(sessions.UNPAIRED)]
    return finite(
        {
            "schema_version": SUMMARY_SCHEMA_VERSION,
            "metric": metric,
            "ci_level": level,
            "delta": delta,
            "label": sched.get("label", ""),
            "rounds": experiment.rounds,
            "stop_reason": experiment.stop_reason,
            "elapsed_s": experiment.elapsed_s,
            **({"isolation": iso} if (iso := isolation(sched, trials)) is not None else {}),
            "unreliable": unreliable,
            "health": health,
            "edited_records": edited_records(plan, trials),
            "exploratory": len(comparisons) > EXPLORATORY_COMPARISONS,
            "sentinel": sentinel,
            "carryover": [
                {
                    **dataclasses.asdict(c),
                    "after": _label(plan, c.after),
                    "reference": _label(plan, c.reference),
                }
                for c in carry
            ],
            "comparisons": comparisons,
            "scaling": batch_scaling(plan, trials, level) if "batch_size" in plan.swept else [],
            "variants": list(variants.values()),
        }
    )


def isolation(
    schedule: Mapping[str, Any], trials: dict[str, dict[int, TrialRecord]]
) -> dict[str, Any] | None:
    """summary.json's "isolation": how the trials ran and the seconds each part of them
    took, summed over the experiment; None for an experiment.json from before
    schedule.isolation existed."""
    if "isolation" not in schedule:
        return None
    records = [t for by_round in trials.values() for t in by_round.values()]
    costs = [t.cost_s for t in records if t.cost_s]
    mode = schedule["isolation"]
    workers = {
        (name, t.worker.get("generation"), t.worker.get("id"), t.worker.get("pid"))
        for name, by_round in trials.items()
        for t in by_round.values()
        if t.worker.get("isolation") == "worker"
    }
    return {
        "mode": mode,
        "trials_per_worker": rounds_per_unit(schedule),
        **({"workers": len(workers)} if mode == "worker" else {}),
        "trials": len(costs),
        "cost_s": {p: round(sum(c.get(p, 0.0) for c in costs), 3) for p in parts_written(costs)},
    }


def adjust_for_carryover(
    comparison: dict[str, Any], adjusted: tuple[float, float, float, float] | None, delta: float
) -> None:
    """With a carry-over flagged, the comparison adjusted for it (perflab.analysis.carryover: both
    variants after the same predecessor) decides: the plain paired one is biased by the
    order and widened by it. The plain numbers are kept under "unadjusted"."""
    if adjusted is None or "speedup" not in comparison:
        return
    speedup, low, high, p = adjusted
    keys = ("speedup", "ci_low", "ci_high", "verdict", "interval", "p_value", "half_width")
    comparison["unadjusted"] = {k: comparison[k] for k in keys}
    comparison.update(
        speedup=speedup,
        ci_low=low,
        ci_high=high,
        verdict=stats.verdict(low, high, delta),
        interval="carry-over model",
        p_value=p,
        half_width=max(high / speedup - 1, 1 - low / speedup),
        rounds_to_decide=None,
    )
    if comparison["verdict"] == stats.INCONCLUSIVE:
        comparison["rounds_to_decide"] = stats.rounds_to_narrow(
            speedup, low, high, comparison["rounds"], delta
        )


def _sentinel(
    plan: Plan,
    trials: dict[str, dict[int, TrialRecord]],
    cost: dict[str, dict[int, float]],
    level: float,
    delta: float,
    per_unit: int,
    resumed: list[dict[str, Any]],
) -> dict[str, Any] | None:
    """The A/A comparison, with its noise floor (how far from 1 its interval reaches),
    reported for information: it never changes the band. Paired within sessions, as the
    comparisons are."""
    pair = plan.sentinel()
    if pair is None:
        return None
    copy, base = pair[0].name, pair[1].name
    between = sessions.between(trials[base], trials[copy], resumed)
    sentinel = compare(cost[base], cost[copy], level, delta, per_unit, between)
    if sentinel is not None:
        sentinel["noise_floor"] = max(sentinel["ci_high"] - 1, 1 - sentinel["ci_low"])
    return sentinel


def sentinel_findings(sentinel: dict[str, Any] | None, delta: float) -> tuple[list[str], list[str]]:
    """What the A/A sentinel says about the method: (reasons the run is UNRELIABLE, health
    notes). Its interval wholly outside +-delta means identical code measured as
    different by more than the band: no verdict of the run can be trusted. An interval
    inside the band that excludes 1 is a bias smaller than the band: a note, with its
    size."""
    if sentinel is None:
        return [], []
    s, low, high = sentinel["speedup"], sentinel["ci_low"], sentinel["ci_high"]
    aa = f"{s:.3f}x [{low:.3f}, {high:.3f}]"
    if sentinel["verdict"] in (stats.FASTER, stats.SLOWER):
        return [
            f"the A/A sentinel (identical to its baseline) read {aa}, outside the band "
            f"+-{delta:.1%}: timings drifted or the machine was disturbed; do not trust "
            "the verdicts"
        ], []
    if low > 1 or high < 1:
        return [], [
            f"A/A bias: the sentinel read {aa}, which excludes 1 (inside the band "
            f"+-{delta:.1%}): every comparison may carry a bias of about {s - 1:+.1%}"
        ]
    return [], []


def _label(plan: Plan, name: str) -> str:
    return plan.by_name(name).label


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


def adjust(comparisons: list[dict[str, Any]], alpha: float, delta: float) -> None:
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
            c["rounds_to_decide"] = stats.rounds_to_narrow(
                c["speedup"], c["ci_low"], c["ci_high"], c["rounds"], delta
            )
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
    """summary.json of a sweep directory, recomputed from its records: the JSON object
    (Summary.to_dict), as a file written now would hold it."""
    experiment = Experiment.load(sweep_dir)
    return analyze(experiment, load_trials(sweep_dir, experiment.plan)).to_dict()


# what analyze and the report read from experiment.json's schedule
SCHEDULE_KEYS = (
    "metric",
    "confidence",
    "delta",
    "min_rounds",
    "max_rounds",
    "target_half_width",
    "time_budget_s",
)


def load_experiment(sweep_dir: Path) -> Experiment:
    """experiment.json, with the schedule settings the analysis reads: an OSError,
    ValueError, KeyError, TypeError or AttributeError means experiment.json itself is bad
    (bad records are skipped by load_trials, never blamed on it)."""
    experiment = Experiment.load(sweep_dir)
    if not isinstance(experiment.schedule, dict):
        raise TypeError(f"schedule is {type(experiment.schedule).__name__}, not an object")
    missing = [k for k in SCHEDULE_KEYS if k not in experiment.schedule]
    if missing:
        raise KeyError(f"schedule has no {', '.join(missing)}")
    return experiment
