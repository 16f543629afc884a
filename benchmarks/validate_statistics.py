"""Validate perflab's statistics on simulated experiments with known truth.

Every experiment is simulated with perflab.simulation (seeded: the same command prints
the same figures) and analysed with perflab.stats exactly as perflab analyses real
trials. Prints one line per check with the figure and the bar it must meet.

    python benchmarks/validate_statistics.py [--experiments 1000]
"""

from __future__ import annotations

import argparse
import random

from perflab import stats
from perflab.simulation import (
    Machine,
    clopper_pearson,
    one_experiment,
    rates,
    run_rounds,
    sentinel_experiment,
    sequential_experiment,
)

# A realistic noisy machine: 2 % per-trial noise and an AR(1) machine state on top
# (per-round s_d of the log-ratio about 3 %).
NOISY = Machine(sd_trial=0.02, ar_phi=0.5, sd_state=0.01)
# s_d = 2 % exactly: per-trial sd 2 % / sqrt(2)
TWO_PERCENT = Machine(sd_trial=0.02 / 2**0.5, ar_phi=0.0, sd_state=0.0)
ROUGH = Machine(sd_trial=0.03, ar_phi=0.7, sd_state=0.02, outlier_p=0.05, outlier_size=0.3)


def line(name: str, figure: str, bar: str, ok: bool) -> None:
    print(f"{'PASS' if ok else 'MISS'}  {name}: {figure}  (bar: {bar})")


def aa(n: int) -> None:
    for machine_name, machine in (("noisy", NOISY), ("rough+outliers", ROUGH)):
        plain = rates(lambda rng, m=machine: one_experiment(rng, 1.0, 10, m), 1.0, n, seed=1)
        count = round(plain.decided * n)
        low, high = clopper_pearson(count, n)
        line(
            f"A/A false FASTER/SLOWER, {machine_name}, 10 rounds, no band",
            f"{count}/{n} = {plain.decided:.1%} [CP 95 % {low:.1%}, {high:.1%}]",
            "<= 5 %, PASS when consistent with it",
            low <= 0.05,
        )
        banded = rates(
            lambda rng, m=machine: one_experiment(rng, 1.0, 10, m, delta=0.01), 1.0, n, seed=2
        )
        line(
            f"A/A false FASTER/SLOWER, {machine_name}, fixed band delta 1 %",
            f"{round(banded.decided * n)}/{n} = {banded.decided:.1%}",
            "<= 1 %",
            banded.decided <= 0.01,
        )
        full = rates(lambda rng, m=machine: sentinel_experiment(rng, 1.0, 10, m), 1.0, n, seed=2)
        line(
            f"A/A false FASTER/SLOWER, {machine_name}, perflab's band max(1 %, sentinel)",
            f"{round(full.decided * n)}/{n} = {full.decided:.1%}",
            "<= 1 %",
            full.decided <= 0.01,
        )


def coverage(n: int) -> None:
    # Costs are log-normal, so the interval's behaviour does not depend on the ratio; each
    # ratio still gets its own seed, so the lines are independent checks.
    for i, ratio in enumerate((0.5, 0.8, 0.95, 1.0, 1.05, 1.25, 2.0)):
        r = rates(lambda rng, t=ratio: one_experiment(rng, t, 10, NOISY), ratio, n, seed=30 + i)
        line(
            f"95 % CI coverage, true ratio {ratio}",
            f"{r.coverage:.1%} (bias {r.bias:+.2%})",
            ">= 93 %",
            r.coverage >= 0.93,
        )


def power(n: int) -> None:
    r = rates(lambda rng: one_experiment(rng, 1.05, 10, TWO_PERCENT, delta=0.01), 1.05, n, seed=4)
    line(
        "power, true 5 % speedup, s_d 2 %, 10 rounds, delta 1 %",
        f"{r.decided:.1%} called FASTER",
        ">= 95 %",
        r.decided >= 0.95,
    )


def drift(n: int) -> None:
    drifting = Machine(sd_trial=0.01, ar_phi=0.0, sd_state=0.0, drift=0.002)
    mixed = rates(lambda rng: one_experiment(rng, 1.0, 10, drifting), 1.0, n, seed=5)
    seq = rates(
        lambda rng: one_experiment(rng, 1.0, 10, drifting, interleaved=False), 1.0, n, seed=5
    )
    count = round(mixed.decided * n)
    low, high = clopper_pearson(count, n)
    line(
        "A/A under +0.2 %/trial drift, interleaved",
        f"{count}/{n} = {mixed.decided:.1%} false verdicts [CP 95 % {low:.1%}, {high:.1%}]",
        "<= 5 %, PASS when consistent with it",
        low <= 0.05,
    )
    line(
        "A/A under +0.2 %/trial drift, sequential (for contrast)",
        f"{seq.decided:.1%} false verdicts",
        "~90 % expected",
        True,
    )


def stopping(n: int) -> None:
    r = rates(lambda rng: sequential_experiment(rng, 1.0, NOISY, 10, 60, 0.01), 1.0, n, seed=6)
    line(
        "stopping rule (min 10, stop at +-1 %), A/A",
        f"{r.decided:.1%} false verdicts",
        "<= 6 %",
        r.decided <= 0.06,
    )
    line("stopping rule, A/A", f"coverage {r.coverage:.1%}", ">= 94 %", r.coverage >= 0.94)
    r = rates(lambda rng: sequential_experiment(rng, 1.05, NOISY, 10, 60, 0.01), 1.05, n, seed=7)
    line("stopping rule, true 1.05", f"coverage {r.coverage:.1%}", ">= 94 %", r.coverage >= 0.94)


def family(n: int) -> None:
    """A 20-variant null grid against one baseline: how often does any variant get a
    FASTER/SLOWER verdict after Holm?"""
    rng = random.Random(8)
    any_raw = any_holm = 0
    for _ in range(n):
        p_values, raw_decided = [], False
        for _ in range(20):
            base, var = run_rounds(rng, 1.0, 10, NOISY)
            effect = stats.paired_effect(stats.paired_log_ratios(base, var))
            p_values.append(effect.p_value)
            raw_decided |= stats.verdict(effect.low, effect.high, 0.0) != "INCONCLUSIVE"
        any_raw += raw_decided
        any_holm += any(p < 0.05 for p in stats.holm(p_values))
    line(
        "family-wise error, 20 null variants, unadjusted",
        f"{any_raw / n:.1%}",
        "for contrast (1 - 0.95^20 = 64 %)",
        True,
    )
    line(
        "family-wise error, 20 null variants, Holm",
        f"{any_holm / n:.1%}",
        "<= 5 %",
        any_holm / n <= 0.05,
    )


def changepoint(n: int) -> None:
    rng = random.Random(9)
    false_flags = sum(
        bool(stats.changepoints([rng.gauss(0, 0.02) for _ in range(30)])) for _ in range(n)
    )
    detected = 0
    for _ in range(n):
        series = [rng.gauss(0, 0.02) for _ in range(30)]
        detected += bool(stats.changepoints(series[:15] + [x + 0.05 for x in series[15:]]))
    big = 0
    for _ in range(n):
        series = [rng.gauss(0, 0.02) for _ in range(30)]
        big += bool(stats.changepoints(series[:15] + [x + 0.10 for x in series[15:]]))
    line(
        "changepoint false flags, 30 steady blocks (2 % noise)",
        f"{false_flags / n:.1%}",
        "<= 5 %",
        false_flags / n <= 0.05,
    )
    line(
        "changepoint detection, +5 % level shift (2.5 sd) at block 15",
        f"{detected / n:.1%}",
        "reported",
        True,
    )
    line(
        "changepoint detection, +10 % level shift (5 sd) at block 15",
        f"{big / n:.1%}",
        ">= 95 %",
        big / n >= 0.95,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--experiments", type=int, default=1000)
    n = parser.parse_args().experiments
    for check in (aa, coverage, power, drift, stopping, family, changepoint):
        check(n)


if __name__ == "__main__":
    main()
