"""Run an experiment: rounds of freshly shuffled variants, one isolated trial each.

Randomised interleaving is what keeps drift from reading as an effect: running all of A
then all of B turned a 0.2 %-per-trial drift into ~94 % false verdicts in DESIGN.md's
simulations, interleaving kept them near 5 %. Each round runs every variant once, in a
new random order; after ``min_rounds`` the run stops as soon as every comparison's CI
half-width reaches the target, or at ``max_rounds``, or when the time budget would be
exceeded by another round.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab import stats
from perflab.analysis import EXPERIMENT_FILE, SUMMARY_FILE, Experiment, analyze, load_trials
from perflab.config import PerflabConfig, ScheduleConfig
from perflab.errors import PerflabError
from perflab.isolation import run_isolated
from perflab.plan import SENTINEL, Plan
from perflab.records import TrialRecord, load_record, write_json_atomic
from perflab.trial import TrialRequest, check_settings, run_in_fresh_process, run_profile

PROFILE_FILE = "profile.json"

# A variant whose trials keep failing stops being scheduled: after a failure with no
# success before it (a deterministic failure, e.g. out of memory) or after this many.
MAX_FAILURES = 3


@dataclass
class VariantRun:
    """A variant's trial template and its results so far."""

    request: TrialRequest
    job_dir: Path
    costs: dict[int, float] = dataclasses.field(default_factory=dict)
    # failed, crashed, timed out, or invalid (recompiled while timed): no usable number
    failures: int = 0

    @property
    def active(self) -> bool:
        return not (self.failures and not self.costs) and self.failures < MAX_FAILURES


def check_all(runs: dict[str, VariantRun]) -> dict[str, list[str]]:
    """Resolve every variant on this machine before measuring anything: an impossible
    setting in any variant stops the sweep with exit 2 and nothing measured."""
    warnings = {}
    for name, run in runs.items():
        result = run_isolated(check_settings, run.request, timeout_s=120)
        if result.kind == "config_error":
            raise PerflabError(result.message)
        if result.kind != "ok":
            raise RuntimeError(f"checking variant {name} failed: {result.message}")
        warnings[name] = result.value
    return warnings


def run_one(run: VariantRun, round_: int, metric: str) -> TrialRecord:
    path = run.job_dir / "trials" / f"r{round_:03d}.json"
    request = dataclasses.replace(run.request, record_path=str(path), round=round_)
    record = load_record(run_in_fresh_process(request))
    if record.status == "ok":
        run.costs[round_] = stats.trial_cost(record, metric)
    else:
        run.failures += 1
    return record


def widest(plan: Plan, runs: dict[str, VariantRun], sched: ScheduleConfig) -> tuple[float, str]:
    """The widest half-width among the comparisons (sentinel included), as the stopping
    rule judges it (stats.stopping_half_width), and whose."""
    worst, who = -1.0, ""  # -1: no comparison has both sides still running
    sentinel = plan.sentinel()
    pairs = plan.comparisons() + ([sentinel] if sentinel else [])
    for variant, base in pairs:
        a, b = runs[base.name].costs, runs[variant.name].costs
        rounds = sorted(set(a) & set(b))
        if not runs[variant.name].active or not runs[base.name].active:
            continue
        if len(rounds) < 2:
            return float("inf"), variant.label
        d = stats.paired_log_ratios([a[r] for r in rounds], [b[r] for r in rounds])
        hw = stats.stopping_half_width(stats.paired_effect(d, sched.confidence))
        if hw > worst:
            worst, who = hw, variant.label
    return worst, who


def run_experiment(
    plan: Plan,
    runs: dict[str, VariantRun],
    sched: ScheduleConfig,
    sweep_dir: Path,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Run rounds until the stopping rule says stop; write and return the summary."""
    rng = random.Random(sched.shuffle_seed)
    start = time.monotonic()
    schedule_dict = dataclasses.asdict(sched)
    experiment = Experiment(plan, schedule_dict, "running", 0, 0.0)
    write_json_atomic(sweep_dir / EXPERIMENT_FILE, experiment.to_dict())
    stop, rounds, round_s = "max rounds", 0, 0.0
    try:
        for round_ in range(sched.max_rounds):
            order = [name for name, run in runs.items() if run.active]
            if not order:
                stop = "every variant failed"
                break
            rng.shuffle(order)
            round_start = time.monotonic()
            for name in order:
                run_one(runs[name], round_, sched.metric)
            rounds = round_ + 1
            round_s = time.monotonic() - round_start
            elapsed = time.monotonic() - start
            width, who = widest(plan, runs, sched)
            say(_progress(rounds, sched, len(order), width, who, elapsed, round_s))
            if width < 0 and (plan.comparisons() or plan.sentinel()):
                stop = "no comparison left (failed variants)"
                break
            if rounds >= sched.min_rounds and width <= sched.target_half_width:
                stop = "precision reached"
                break
            if rounds >= sched.min_rounds and elapsed + round_s > sched.time_budget_s:
                stop = "time budget"
                break
    except KeyboardInterrupt:
        stop = "interrupted"
    except PerflabError:
        # e.g. a factory that cannot be built with its arguments: keep what was measured
        _finish(plan, schedule_dict, "config error", rounds, start, sweep_dir)
        raise
    summary = _finish(plan, schedule_dict, stop, rounds, start, sweep_dir)
    if stop == "interrupted":
        raise KeyboardInterrupt
    return summary


def _finish(
    plan: Plan, schedule: dict[str, Any], stop: str, rounds: int, start: float, sweep_dir: Path
) -> dict[str, Any]:
    """Record how the run ended and write the summary of what is on disk."""
    experiment = Experiment(plan, schedule, stop, rounds, round(time.monotonic() - start, 3))
    write_json_atomic(sweep_dir / EXPERIMENT_FILE, experiment.to_dict())
    summary = analyze(experiment, load_trials(sweep_dir, plan))
    write_json_atomic(sweep_dir / SUMMARY_FILE, summary)
    return summary


def run_profiles(plan: Plan, runs: dict[str, VariantRun], say: Callable[[str], None]) -> None:
    """One separate, untimed profiling trial per variant (the sentinel aside), after the
    timed rounds so it can never disturb them. A failure is reported, never fatal."""
    variants = [v for v in plan.variants if v.name != SENTINEL]
    for i, variant in enumerate(variants, 1):
        run = runs[variant.name]
        path = run.job_dir / "profile" / PROFILE_FILE
        request = dataclasses.replace(run.request, record_path=str(path))
        result = run_isolated(run_profile, request, request.config.trial.timeout_s)
        state = "ok" if result.kind == "ok" else f"FAILED ({result.message.splitlines()[0]})"
        say(f"profiling {i}/{len(variants)}: {variant.label}: {state}")


def _progress(
    rounds: int,
    sched: ScheduleConfig,
    variants: int,
    width: float,
    who: str,
    elapsed: float,
    round_s: float,
) -> str:
    ci = "n/a" if width == float("inf") or width < 0 else f"+-{width:.1%}"
    left = max(0.0, min(sched.time_budget_s - elapsed, (sched.max_rounds - rounds) * round_s))
    return (
        f"round {rounds}/{sched.max_rounds} (min {sched.min_rounds}): {variants} "
        f"variants in {round_s:.1f} s; widest CI {ci} ({who}), target "
        f"+-{sched.target_half_width:.1%}; {elapsed:.0f} s spent, <= {left:.0f} s left"
    )


def make_runs(
    plan: Plan,
    configs: dict[str, PerflabConfig],
    dicts: dict[str, dict[str, Any]],
    choices: dict[str, dict[str, str]],
    invocation: dict[str, Any],
    sweep_dir: Path,
) -> dict[str, VariantRun]:
    runs = {}
    for variant in plan.variants:
        source = variant.source
        request = TrialRequest(
            configs[source], dicts[source], "", invocation, choices=choices[source]
        )
        runs[variant.name] = VariantRun(request, sweep_dir / variant.dir)
    return runs
