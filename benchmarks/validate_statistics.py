"""perflab's error rates, measured on simulated experiments with known truth.

Every experiment runs perflab's whole method (perflab.analysis.simulation: shuffled rounds with the
A/A sentinel, the warm-up rule, trial lengths fixed by each configuration's first trial,
the stopping rule, the verdicts with Holm adjustment, the sentinel check and the
carry-over estimate) on simulated step times; only the steps are invented. Each line
gives a count out of the experiments run, its Clopper-Pearson 95 % interval, the bar and
PASS or MISS (a rate that must stay under a bar passes when the interval's upper end is
under it; one that must reach a bar, when the lower end reaches it; "0" bars are exact).

    python benchmarks/validate_statistics.py [--experiments 400] [--workers 2] \
        [--section all|process|workers]

"workers" runs only the warm-worker cells (schedule.isolation=worker, worker_cells): the
same machines with and without a per-process offset, under fresh processes and warm
workers, and the worker data analysed as if its rounds were independent.
Seeded: the same command prints the same figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

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
    # schedule.isolation and schedule.trials_per_worker: the cells of the main section
    # pin a fresh process per trial, as every figure before warm workers was measured
    isolation: str = "process"
    trials_per_worker: int = 1
    # the final analysis's units, in rounds, where it is not the schedule's: 1 with
    # warm workers ignores that a worker's rounds share its offset (the same data: the
    # same seed as the cell analysed properly)
    analysis_rounds_per_unit: int | None = None


def cell_schedule(cell: Cell) -> tuple[Any, Any]:
    """The preset's trial and schedule settings with the cell's changes."""
    trial, schedule = preset(cell.preset)
    trial = with_fields(trial, **dict(cell.trial_changes))
    k = cell.trials_per_worker
    schedule = with_fields(schedule, isolation=cell.isolation, trials_per_worker=k)
    if cell.isolation == "worker":
        # an interval needs 3 worker generations (perflab.config.rules): preset=quick's
        # 10 rounds are raised to 12 with 4 trials per worker
        schedule = with_fields(schedule, max_rounds=max(schedule.max_rounds, 3 * k))
    return trial, with_fields(schedule, **dict(cell.schedule_changes))


def run_cell(args: tuple[Cell, int]) -> tuple[Cell, Tally]:
    cell, n = args
    trial, schedule = cell_schedule(cell)
    machines = {**MACHINES, "cpu": CPU, "gpu-ramp": GPU_RAMP, "slow carry-over": SLOW_CARRY}
    machine = {**machines, **WORKER_MACHINES}[cell.machine]
    heavy = "carry-over" in cell.machine
    return cell, tally(
        cell.truth,
        machine,
        trial,
        schedule,
        n,
        cell.seed,
        cell.step_s,
        heavy,
        cell.analysis_rounds_per_unit,
    )


# A sub-millisecond GPU step (100 us) whose clocks ramp up at the start of every trial:
# 2x slower at first, decaying with tau 20 ms.
GPU_RAMP = Machine(sd_step=0.01, sd_trial=0.003, ramp=1.0, ramp_tau_s=0.02, startup_s=0.0)
OLD_QUICK = (("warmup_s", 0.0), ("min_s", 0.0), ("steady_tolerance", 0.0))

# Warm workers: the quiet and the CPU machine as above (sd_worker 0), and layout-sensitive,
# with a per-process offset of 5 % that a worker brings to all its trials (a fixed heap
# layout moved this project's convnet step by up to 15 %: RESULTS.md, "Heap layout").
# With a fresh process per trial the same offset is more per-trial noise.
LAYOUT_SD = 0.05
WORKER_MACHINES = {
    name + suffix: with_fields(machine, sd_worker=sd)
    for name, machine in (("quiet", QUIET), ("cpu", CPU))
    for suffix, sd in (("", 0.0), ("+layout", LAYOUT_SD))
}
# (schedule.isolation, schedule.trials_per_worker)
ISOLATION_MODES = (("process", 1), ("worker", 2), ("worker", 4))
# true effects beyond 2 delta at delta = 1 %; the second, the size of one worker's layout
# offset, on the layout-sensitive CPU only (the cells of the noisiest machine cost most)
WORKER_EFFECTS = (1.025, 1.05)


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


def worker_cells() -> list[Cell]:
    """Every worker machine under each isolation mode and preset; with warm workers the
    A/A cells once more, the same data analysed as if every round were independent."""
    out = []
    seed = 5000
    for name in WORKER_MACHINES:
        effects = WORKER_EFFECTS if name == "cpu+layout" else WORKER_EFFECTS[:1]
        for p in ("default", "quick"):
            for isolation, k in ISOLATION_MODES:
                for truth in (1.0, *effects):
                    seed += 1
                    cell = Cell(name, p, truth, seed, isolation=isolation, trials_per_worker=k)
                    out.append(cell)
                    if isolation == "worker" and truth == 1.0:
                        out.append(dataclasses.replace(cell, analysis_rounds_per_unit=1))
    # carry-over from a heavy baseline into the trial after it, with warm workers: the
    # default preset only (its warm-up waits the carry-over out; the rest is the carry-over
    # estimate's), appended so that the cells above keep their seeds
    for isolation, k in ISOLATION_MODES:
        for truth in (1.0, WORKER_EFFECTS[0]):
            seed += 1
            out.append(
                Cell("carry-over", "default", truth, seed, isolation=isolation, trials_per_worker=k)
            )
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
            false_calls = t.count("FASTER", "SLOWER")
            line(
                at_most(false_calls, n, 0.05),
                f"A/A false FASTER/SLOWER, {label}",
                rate(false_calls, n),
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
            found = t.count("FASTER")
            line(
                at_least(found, t.experiments, 0.95),
                f"power, true 1.05x within 10 rounds, {cell.machine}",
                rate(found, t.experiments),
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


def short(status: str) -> str:
    return {"CONSISTENT": "CONS"}.get(status, status)


def brief_rate(count: int, n: int, status: str) -> str:
    """count/n, the rate and the Clopper-Pearson upper end, for a rate that must stay low."""
    return f"{count}/{n} {count / n:.1%} (<={clopper_pearson(count, n)[1]:.1%}) {short(status)}"


def mode_name(cell: Cell) -> str:
    if cell.isolation != "worker":
        return cell.isolation
    units = " units=rounds" if cell.analysis_rounds_per_unit == 1 else ""
    return f"worker k={cell.trials_per_worker}{units}"


def worker_row(cell: Cell, by_truth: dict[float, Tally]) -> tuple[int, int]:
    """One table row: the A/A cell's false FASTER/SLOWER, sentinel and carry-over alarms,
    rounds and half-width, the effects' false EQUIVALENT and wrong-direction verdicts,
    and the coverage of all its cells; with the row's covered and experiments counts."""
    aa = by_truth[1.0]
    n = aa.experiments
    wrong = aa.count("FASTER", "SLOWER")
    cols = [
        f"{cell.machine:<17} {cell.preset:<7} {mode_name(cell):<24}",
        f"{brief_rate(wrong, n, at_most(wrong, n, 0.05)):<28}",
        f"{aa.unreliable:>3} {aa.carryover_flags:>3}",
    ]
    wrong_way = 0
    for truth in WORKER_EFFECTS:
        t = by_truth.get(truth)
        if t is None:
            cols.append(f"{'-':<28}")
            continue
        eq = t.count("EQUIVALENT")
        wrong_way += t.count("SLOWER")
        cols.append(f"{brief_rate(eq, t.experiments, at_most(eq, t.experiments, 0.05)):<28}")
    covered = sum(t.covered for t in by_truth.values())
    total = sum(t.experiments for t in by_truth.values())
    low, high = clopper_pearson(covered, total)
    status = short(at_least(covered, total, 0.93))
    cols += [
        f"{wrong_way:>2}",
        f"{covered}/{total} {covered / total:.1%} [{low:.1%}, {high:.1%}] {status:<4}",
        f"{aa.mean_rounds:5.1f} {aa.median_half_width:6.2%}",
    ]
    print("  ".join(cols))
    return covered, total


WORKER_HEADER = (
    f"{'machine':<17} {'preset':<7} {'isolation':<24}  {'A/A false FASTER/SLOWER':<28}"
    f"  UNR CO  {'false EQUIVALENT 1.025x':<28}  {'false EQUIVALENT 1.05x':<28}  WD"
    f"  {'95 % CI coverage, all truths':<34}  A/A: rounds half-width"
)


def worker_report(results: dict[Cell, Tally]) -> None:
    """The warm-worker cells (worker_cells), one row per machine, preset and isolation
    mode; then the coverage of each mode over all machines. UNR: A/A sentinel UNRELIABLE,
    CO: A/A carry-over flags (both out of the A/A experiments); WD: wrong direction
    verdicts of the true effects; rates: count, rate, Clopper-Pearson upper end, status."""
    rows: dict[Cell, dict[float, Tally]] = {}
    for cell, t in results.items():
        rows.setdefault(dataclasses.replace(cell, truth=1.0, seed=0), {})[cell.truth] = t
    print(WORKER_HEADER)
    pooled: dict[str, tuple[int, int]] = {}
    for cell, by_truth in rows.items():
        covered, total = worker_row(cell, by_truth)
        was = pooled.get(mode_name(cell), (0, 0))
        pooled[mode_name(cell)] = (was[0] + covered, was[1] + total)
    for mode, (covered, total) in pooled.items():
        line(
            at_least(covered, total, 0.93),
            f"95 % CI coverage, {mode}, every machine and preset",
            rate(covered, total),
            ">= 93 %",
        )


def warmup_rule(n: int) -> None:
    """What the warm-up rule does to single trials: how long it warms up and how much of a
    start-of-trial slowdown is left in the timed block (median, mean and worst of n
    trials), with the steady window thrown away and kept (trial.keep_steady_window)."""
    import numpy as np

    from perflab.analysis.simulation import SimVariant, run_trial

    cases = (
        ("30 % slow start, tau 0.2 s, GPU-like noise", CARRY, 0.01, True),
        ("30 % slow start, tau 1 s, GPU-like noise", SLOW_CARRY, 0.01, True),
        ("steady 90 ms steps, 4 % noise (the CPU)", CPU, 0.09, False),
        ("100 us GPU step, 2x slow start, tau 20 ms", GPU_RAMP, 100e-6, False),
    )
    for name, machine, step_s, after_heavy in cases:
        for p in ("default", "quick"):
            for keep in (False, True):
                trial, _ = preset(p)
                trial = with_fields(trial, keep_steady_window=keep)
                rng = np.random.default_rng(12)
                runs = [
                    run_trial(rng, SimVariant(step_s), machine, trial, 0.0, after_heavy, None)
                    for _ in range(n)
                ]
                left = [
                    cost / (step_s * 1e9) - 1 - machine.carry_offset * after_heavy
                    for cost, _, _, _ in runs
                ]
                warm = [w.seconds for _, _, w, _ in runs]
                print(
                    f"INFO  warm-up rule, {name}, preset={p}, steady window "
                    f"{'kept' if keep else 'dropped'}: warm-up median {np.median(warm):.2f} s "
                    f"(max {max(warm):.2f}); slowdown left in the timed block median "
                    f"{np.median(left):+.2%}, mean {np.mean(left):+.2%}, worst {max(left):+.2%}"
                )


def family(n: int) -> None:
    """A 20-variant null grid against one baseline, 10 rounds each (3 % per-round noise):
    how often does any variant get a FASTER/SLOWER verdict, without and with Holm?"""
    import numpy as np

    from perflab.analysis import stats

    rng = np.random.default_rng(8)
    any_raw = any_holm = 0
    for _ in range(n):
        effects = [stats.paired_effect(rng.normal(0, 0.03, 10).tolist()) for _ in range(20)]
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
    parser.add_argument("--section", choices=("all", "process", "workers", "warmup"), default="all")
    parser.add_argument("--machine", help="only the cells of this machine, e.g. carry-over")
    args = parser.parse_args()
    start = time.monotonic()
    if args.section == "warmup":
        warmup_rule(2000)
        return
    main_cells = cells() if args.section != "workers" else []
    more = worker_cells() if args.section != "process" else []
    if args.machine:
        main_cells = [c for c in main_cells if c.machine == args.machine]
        more = [c for c in more if c.machine == args.machine]
    todo = [(c, args.experiments) for c in (*main_cells, *more)]
    if args.workers > 1:
        # the long default-preset cells first, so that no process is left with one at the
        # end; the report keeps the cells' own order
        ordered = sorted(todo, key=lambda t: t[0].preset != "default")
        with ProcessPoolExecutor(args.workers) as pool:
            results = dict(pool.map(run_cell, ordered))
    else:
        results = dict(map(run_cell, todo))
    if main_cells:
        report({c: results[c] for c in main_cells})
        warmup_rule(200)
        family(1000)
        changepoint(1000)
    if more:
        worker_report({c: results[c] for c in more})
    print(
        f"({len(todo)} cells x {args.experiments} experiments in {time.monotonic() - start:.0f} s)"
    )


if __name__ == "__main__":
    main()
