"""perflab's error rates, measured on simulated experiments with known truth.

Every experiment runs perflab's whole method (perflab.analysis.simulation: shuffled rounds with the
A/A sentinel, the warm-up rule, trial lengths fixed by each configuration's first trial,
the stopping rule, the verdicts with Holm adjustment, the sentinel check and the
carry-over estimate) on simulated step times; only the steps are invented. Each line
gives a count out of the experiments run, its Clopper-Pearson 95 % interval, the bar and
PASS or MISS (a rate that must stay under a bar passes when the interval's upper end is
under it; one that must reach a bar, when the lower end reaches it; "0" bars are exact).

    python benchmarks/validate_statistics.py [--experiments 400] [--workers 2]

Seeded: the same command prints the same figures.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from perflab.analysis import steady
from perflab.analysis.simulation import Machine, Tally, clopper_pearson, preset, tally, with_fields

# Per-round noise of the log-ratio about 2 % (2 % step noise, 1.2 % per trial): the
# issue's "per-round noise <= 2 %".
QUIET = Machine()
# the same, plus 5 % of trials 30 % slower (a co-tenant woke up)
ROUGH = Machine(outlier_p=0.05, outlier_size=0.3)
# the same as quiet, drifting +0.2 % per trial (heating up, a growing co-tenant)
DRIFTING = Machine(drift=0.002)
# a GPU-like machine (0.5 % step noise, 1.2 % per trial), every trial ramping 5 % at its
# start (tau 50 ms), and a trial that follows the heavy baseline starting 30 % slower,
# recovering with tau 0.2 s (a GPU leaving the power cap of a 700 W trial), and staying
# 3 % slower throughout (still hot)
CARRY = Machine(sd_step=0.005, ramp=0.05, carry=0.3, carry_tau_s=0.2, carry_offset=0.03)
# the same with a slow recovery (tau 1 s) and no lasting part: what the warm-up rule of
# each preset can wait out, and what it cannot
SLOW_CARRY = Machine(sd_step=0.005, ramp=0.05, carry=0.3, carry_tau_s=1.0)
# this project's CPU: 4 % step and per-trial noise, a wandering machine state
# (per-round noise about 7 %)
CPU = Machine(sd_step=0.04, sd_trial=0.04, ar_phi=0.5, sd_state=0.02)
MACHINES = {"quiet": QUIET, "rough": ROUGH, "drifting": DRIFTING, "carry-over": CARRY}
EFFECTS = (1.015, 1.02, 1.05, 1.10, 1.20)  # 1.5 delta and 2 delta at delta = 1 %, then 5-20 %


@dataclass(frozen=True)
class Cell:
    machine: str
    preset: str
    truth: float
    seed: int
    # a what-if change to the preset's trial settings, e.g. the steady rule off
    trial_changes: tuple[tuple[str, float], ...] = ()
    schedule_changes: tuple[tuple[str, float], ...] = ()
    step_s: float = 0.01


def run_cell(args: tuple[Cell, int]) -> tuple[Cell, Tally]:
    cell, n = args
    trial, schedule = preset(cell.preset)
    trial = with_fields(trial, **dict(cell.trial_changes))
    schedule = with_fields(schedule, **dict(cell.schedule_changes))
    machine = {**MACHINES, "cpu": CPU, "gpu-ramp": GPU_RAMP, "slow carry-over": SLOW_CARRY}[
        cell.machine
    ]
    heavy = "carry-over" in cell.machine
    return cell, tally(cell.truth, machine, trial, schedule, n, cell.seed, cell.step_s, heavy)


# A sub-millisecond GPU step (100 us) whose clocks ramp up at the start of every trial:
# 2x slower at first, decaying with tau 20 ms.
GPU_RAMP = Machine(sd_step=0.01, sd_trial=0.003, ramp=1.0, ramp_tau_s=0.02, startup_s=0.0)
OLD_QUICK = (("warmup_s", 0.0), ("min_s", 0.0), ("steady_tolerance", 0.0))


def cells() -> list[Cell]:
    out = []
    seed = 100
    for name in (*MACHINES, "cpu"):
        for p in ("default", "quick"):
            for truth in (1.0, *EFFECTS, *(1 / e for e in EFFECTS)):
                seed += 1
                out.append(Cell(name, p, truth, seed))
    # power: 5 % within 10 rounds (min = max = 10), per-round noise <= 2 %
    for name in MACHINES:
        seed += 1
        out.append(Cell(name, "default", 1.05, seed, (), (("min_rounds", 10), ("max_rounds", 10))))
    # what the warm-up rule buys under carry-over: the same with the rule off; and a slow
    # recovery, against each preset's warm-up
    for truth in (1.0, 1.05):
        seed += 1
        out.append(Cell("carry-over", "default", truth, seed, (("steady_tolerance", 0.0),)))
        for p in ("default", "quick"):
            seed += 1
            out.append(Cell("slow carry-over", p, truth, seed))
    # preset=quick on a sub-millisecond GPU step, as it was and as it is
    for changes in (OLD_QUICK, ()):
        seed += 1
        out.append(Cell("gpu-ramp", "quick", 1.05, seed, changes, (), step_s=100e-6))
    return out


def rate(count: int, n: int) -> str:
    low, high = clopper_pearson(count, n)
    return f"{count}/{n} = {count / n:.1%} [CP {low:.1%}, {high:.1%}]"


def line(status: str, what: str, figure: str, bar: str) -> None:
    print(f"{status:<10}  {what}: {figure}  (bar: {bar})")


def at_most(count: int, n: int, bar: float) -> str:
    """PASS: the whole Clopper-Pearson interval is at or under the bar; CONSISTENT: the
    bar lies inside it (more experiments would tell); MISS: the interval is above it."""
    low, high = clopper_pearson(count, n)
    return "PASS" if high <= bar else ("CONSISTENT" if low <= bar else "MISS")


def at_least(count: int, n: int, bar: float) -> str:
    low, high = clopper_pearson(count, n)
    return "PASS" if low >= bar else ("CONSISTENT" if high >= bar else "MISS")


def report(results: dict[Cell, Tally]) -> None:
    n_cov = n_all = 0
    for cell, t in results.items():
        label = f"{cell.machine}, preset={cell.preset}"
        if cell.trial_changes or cell.schedule_changes or cell.machine not in (*MACHINES, "cpu"):
            continue
        n = t.experiments
        if cell.truth == 1.0:
            wrong = t.count("FASTER", "SLOWER")
            line(
                at_most(wrong, n, 0.05),
                f"A/A false FASTER/SLOWER, {label}",
                rate(wrong, n),
                "<= 5 %",
            )
            line(
                at_most(t.unreliable, n, 0.05),
                f"A/A sentinel UNRELIABLE, {label}",
                rate(t.unreliable, n),
                "<= 5 %",
            )
            if cell.machine != "carry-over":
                line(
                    at_most(t.carryover_flags, n, 0.05),
                    f"carry-over flagged without carry-over (nominal 1 %), {label}",
                    rate(t.carryover_flags, n),
                    "<= 5 %",
                )
            continue
        faster = cell.truth > 1
        right, wrong = ("FASTER", "SLOWER") if faster else ("SLOWER", "FASTER")
        equivalent = t.count("EQUIVALENT")
        what = f"true {cell.truth:.4g}x, {label}"
        status = at_most(equivalent, n, 0.05) if t.count(wrong) == 0 else "MISS"
        line(
            status,
            f"false EQUIVALENT / wrong direction, {what}",
            f"{rate(equivalent, n)}; wrong direction {t.count(wrong)}; {right} "
            f"{t.count(right) / n:.1%}; mean rounds {t.mean_rounds:.1f}",
            "<= 5 %; 0",
        )
        n_cov += t.covered
        n_all += n
    line(
        at_least(n_cov, n_all, 0.93),
        "95 % CI coverage, all effects above",
        rate(n_cov, n_all),
        ">= 93 %",
    )
    for cell, t in results.items():
        if cell.schedule_changes:
            right = t.count("FASTER")
            line(
                at_least(right, t.experiments, 0.95),
                f"power, true 1.05x within 10 rounds, {cell.machine}",
                rate(right, t.experiments),
                ">= 95 %",
            )
    for cell, t in results.items():
        if cell.machine == "slow carry-over":
            print(
                f"INFO  slow carry-over (tau 1 s), true {cell.truth}x, preset={cell.preset}: "
                f"coverage {t.covered}/{t.experiments}, verdicts {t.verdicts}, bias "
                f"{t.bias:+.2%}, carry-over flagged {t.carryover_flags}/{t.experiments}"
            )
        if cell.trial_changes and cell.machine == "carry-over":
            rule_on = next(
                u
                for c, u in results.items()
                if c.machine == "carry-over"
                and c.preset == "default"
                and c.truth == cell.truth
                and not c.trial_changes
                and not c.schedule_changes
            )
            print(
                f"INFO  carry-over, true {cell.truth}x, default preset: bias "
                f"{t.bias:+.2%} with the warm-up rule off (the minimum only), {rule_on.bias:+.2%} "
                f"with it; carry-over flagged {t.carryover_flags}/{t.experiments} and "
                f"{rule_on.carryover_flags}/{rule_on.experiments}"
            )
        if cell.machine == "gpu-ramp":
            what = "as it was (3 steps, no time floors)" if cell.trial_changes else "as it is"
            print(
                f"INFO  preset=quick on a 100 us GPU step with a clock ramp, {what}: true "
                f"{cell.truth}x, coverage {t.covered}/{t.experiments}, verdicts {t.verdicts}, "
                f"median half-width {t.median_half_width:.2%}, bias {t.bias:+.2%}"
            )


def warmup_rule(n: int) -> None:
    """What the warm-up rule does to single trials: how long it warms up and how much of a
    start-of-trial slowdown is left in the timed block (median and worst of n trials)."""
    import numpy as np

    from perflab.analysis.simulation import SimVariant, run_trial

    cases = (
        ("30 % slow start, tau 0.2 s, GPU-like noise", CARRY, 0.01, True),
        ("30 % slow start, tau 1 s, GPU-like noise", SLOW_CARRY, 0.01, True),
        ("steady 90 ms steps, 4 % noise (the CPU)", CPU, 0.09, False),
    )
    for name, machine, step_s, after_heavy in cases:
        for p in ("default", "quick"):
            trial, _ = preset(p)
            rng = np.random.default_rng(12)
            runs = [
                run_trial(rng, SimVariant(step_s), machine, trial, 0.0, after_heavy, None)
                for _ in range(n)
            ]
            left = [
                cost / (step_s * 1e9) - 1 - machine.carry_offset * after_heavy
                for cost, _, _ in runs
            ]
            warm = [w.seconds for _, _, w in runs]
            print(
                f"INFO  warm-up rule, {name}, preset={p}: warm-up median {np.median(warm):.2f} s "
                f"(max {max(warm):.2f}); slowdown left in the timed block median "
                f"{np.median(left):+.2%}, worst {max(left):+.2%}"
            )


def family(n: int) -> None:
    """A 20-variant null grid against one baseline, 10 rounds each (3 % per-round noise):
    how often does any variant get a FASTER/SLOWER verdict, without and with Holm?"""
    import numpy as np

    from perflab.analysis import stats

    rng = np.random.default_rng(8)
    any_raw = any_holm = 0
    for _ in range(n):
        effects = [stats.paired_effect(rng.normal(0, 0.03, 10)) for _ in range(20)]
        any_raw += any(stats.verdict(e.low, e.high, 0.0) != "INCONCLUSIVE" for e in effects)
        any_holm += any(p < 0.05 for p in stats.holm([e.p_value for e in effects]))
    print(f"INFO  family-wise error, 20 null variants, unadjusted: {any_raw / n:.1%}")
    line(
        at_most(any_holm, n, 0.05),
        "family-wise error, 20 null variants, Holm",
        rate(any_holm, n),
        "<= 5 %",
    )


def changepoint(n: int) -> None:
    """The in-trial level-shift flag (perflab.analysis.steady.changepoints)."""
    import random

    rng = random.Random(9)
    false = sum(
        bool(steady.changepoints([rng.gauss(0, 0.02) for _ in range(30)])) for _ in range(n)
    )
    found = 0
    for _ in range(n):
        series = [rng.gauss(0, 0.02) for _ in range(30)]
        found += bool(steady.changepoints(series[:15] + [x + 0.10 for x in series[15:]]))
    line(
        at_most(false, n, 0.05),
        "changepoint false flags, 30 steady blocks",
        rate(false, n),
        "<= 5 %",
    )
    line(
        at_least(found, n, 0.95),
        "changepoint detection, +10 % shift (5 sd) at block 15",
        rate(found, n),
        ">= 95 %",
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--experiments", type=int, default=400)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    start = time.monotonic()
    todo = [(c, args.experiments) for c in cells()]
    run: Callable = map
    if args.workers > 1:
        pool = ProcessPoolExecutor(args.workers)
        run = pool.map
    results = dict(run(run_cell, todo))
    report(results)
    warmup_rule(200)
    family(1000)
    changepoint(1000)
    print(
        f"({len(todo)} cells x {args.experiments} experiments in {time.monotonic() - start:.0f} s)"
    )


if __name__ == "__main__":
    main()
