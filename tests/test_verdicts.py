"""What a verdict claims: the band is the user's alone, the A/A sentinel checks the method,
a carry-over is found and adjusted for, and seeded simulations of perflab's whole method
(perflab.analysis.simulation; the full ones are benchmarks/validate_statistics.py) keep their error
rates. No torch, no timing: device=cpu is irrelevant here."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from perflab.analysis import carryover, stats
from perflab.analysis import verdicts as analysis
from perflab.analysis.simulation import Machine, preset, tally, with_fields
from perflab.formats.summary import Sentinel


def _costs(ratios_log: list[float], base: float = 1e6) -> tuple[dict, dict]:
    return (
        {r: base for r in range(len(ratios_log))},
        {r: base / math.exp(x) for r, x in enumerate(ratios_log)},
    )


def test_a_wide_interval_around_one_is_inconclusive_never_equivalent():
    # an A/A pair on a noisy machine: centred near 1, +-10 % wide
    base, var = _costs([0.12, -0.1, 0.05, -0.08, 0.02, -0.11, 0.09, -0.03, 0.0, 0.04])
    c = analysis.compare(base, var, 0.95, 0.01)
    assert c is not None and c.ci_low < 0.99 and c.ci_high > 1.01
    assert c.verdict == "INCONCLUSIVE" and c.rounds_to_decide > 10


def test_equivalent_needs_the_whole_interval_inside_the_band():
    base, var = _costs([0.001, -0.002, 0.0015, -0.001, 0.0005, -0.0005, 0.001, 0.0, -0.001, 0.0])
    assert analysis.compare(base, var, 0.95, 0.01).verdict == "EQUIVALENT"
    assert analysis.compare(base, var, 0.95, 0.0005).verdict == "INCONCLUSIVE"


def test_no_interval_before_three_paired_rounds():
    base, var = _costs([0.1, 0.12])
    assert analysis.compare(base, var, 0.95, 0.01) is None
    base, var = _costs([0.1, 0.12, 0.11])
    assert analysis.compare(base, var, 0.95, 0.01).verdict == "FASTER"


def test_an_outlier_round_hands_the_verdict_to_the_trimmed_interval():
    d = [0.05, 0.052, 0.048, 0.051, 0.049, 0.05, 0.053, 0.047, 0.05, -0.3]
    c = analysis.compare(*_costs(d), 0.95, 0.01)
    assert c.interval == "trimmed" and c.outlier_rounds == [9]
    assert c.verdict == "FASTER" and c.t.ci_low < 1.0 < c.ci_low


def _sentinel(low: float, high: float) -> Sentinel | None:
    """An A/A sentinel whose interval is [low, high] (the rest of its estimate aside)."""
    estimate = analysis.compare(*_costs([0.01, 0.0, 0.02]), 0.95, 0.01)
    assert estimate is not None
    s, verdict = math.sqrt(low * high), stats.verdict(low, high, 0.01)
    return analysis.as_sentinel(
        replace(estimate, speedup=s, ci_low=low, ci_high=high, verdict=verdict)
    )


def test_the_sentinel_never_widens_the_band_it_checks_the_method():
    unreliable, notes = analysis.sentinel_findings(_sentinel(1.02, 1.05), 0.01)
    assert unreliable and "outside the band +-1.0%" in unreliable[0] and not notes
    unreliable, notes = analysis.sentinel_findings(_sentinel(1.002, 1.008), 0.01)
    assert not unreliable and "A/A bias" in notes[0] and "+0.5%" in notes[0]
    assert analysis.sentinel_findings(_sentinel(0.95, 1.06), 0.01) == ([], [])
    assert analysis.sentinel_findings(None, 0.01) == ([], [])


def _order(rng: np.random.Generator, rounds: int, carry: float) -> list[carryover.TrialInOrder]:
    """Trials of a baseline "0" (heavy), its A/A copy and a variant "1" 5 % faster, in
    shuffled rounds; a trial after the heavy configuration is ``carry`` slower."""
    out: list[carryover.TrialInOrder] = []
    for r in range(rounds):
        for name in rng.permutation(["0", "sentinel", "1"]):
            config = "0" if name == "sentinel" else str(name)
            after = out[-1].config if out else None
            cost = math.log(1e6 / (1.05 if config == "1" else 1.0)) + 0.01 * rng.standard_normal()
            cost += math.log1p(carry) if after == "0" else 0.0
            out.append(carryover.TrialInOrder(r, str(name), config, cost, after))
    return out


def test_a_carry_over_is_found_with_its_size_and_adjusted_for():
    fit = carryover.fit(_order(np.random.default_rng(1), 12, 0.06), reference="0")
    assert fit is not None
    [row] = fit.carryovers(0.95)
    # trials after the variant run about 6 % faster than those after the heavy baseline
    assert row.after == "1" and row.low < -0.0566 < row.high and row.p_adjusted < 0.01
    speedup, low, high, _ = fit.speedup("0", "1", 0.95)
    assert low < 1.05 < high and speedup == pytest.approx(1.05, rel=0.01)


def test_no_carry_over_is_rarely_flagged():
    rng = np.random.default_rng(2)
    flags = sum(
        bool(carryover.flagged(carryover.estimate(_order(rng, 10, 0.0), 0.95, "0")))
        for _ in range(200)
    )
    assert flags <= 8  # nominal 1 %; 8/200 leaves room for the draw


# --- seeded simulations of the whole method ---------------------------------------------

TRIAL, SCHEDULE = preset("default")


def test_aa_pairs_are_not_called_faster_or_slower():
    t = tally(1.0, Machine(), TRIAL, SCHEDULE, 100, seed=1)
    assert t.count("FASTER", "SLOWER") <= 3 and t.unreliable <= 3
    assert t.covered >= 88


@pytest.mark.parametrize("truth", [1.02, 1 / 1.02, 1.2])
def test_true_effects_beyond_two_deltas_are_never_equivalent_nor_reversed(truth):
    t = tally(truth, Machine(), TRIAL, SCHEDULE, 60, seed=2)
    wrong = "SLOWER" if truth > 1 else "FASTER"
    assert t.count("EQUIVALENT") <= 2 and t.count(wrong) == 0


def test_power_for_five_percent_within_the_minimum_rounds_with_outlier_trials():
    # the default preset's 12 minimum rounds, a fresh process each: twelve independent
    # units (with warm workers they are 12 / trials_per_worker generations, and the same
    # seeds give 49/60: the price of counting generations, docs/design.md#warm-workers)
    twelve = with_fields(SCHEDULE, min_rounds=12, max_rounds=12, isolation="process")
    rough = Machine(outlier_p=0.05, outlier_size=0.3)
    t = tally(1.05, rough, TRIAL, twelve, 60, seed=3)
    assert t.count("FASTER") >= 55


def test_a_carry_over_is_adjusted_for_and_a_fixed_warm_up_alone_is_biased():
    carry = Machine(sd_step=0.005, ramp=0.05, carry=0.3, carry_tau_s=1.0)
    t = tally(1.05, carry, TRIAL, SCHEDULE, 20, seed=4, heavy_baseline=True)
    assert t.count("FASTER") >= 18 and abs(t.bias) < 0.005
    # with the warm-up rule off, the trials after the heavy baseline keep ~10 % of its
    # slowdown: the carry-over is flagged and the estimate adjusted, so still unbiased
    fixed = with_fields(TRIAL, steady_tolerance=0.0)
    t = tally(1.05, carry, fixed, SCHEDULE, 20, seed=5, heavy_baseline=True)
    assert t.carryover_flags >= 18 and abs(t.bias) < 0.01


# --- what the console prints ---------------------------------------------------------------


def test_the_progress_line_prints_no_interval_before_it_exists_and_no_absurd_number():
    from perflab.config.schema import ScheduleConfig
    from perflab.experiment.schedule import _progress

    sched = ScheduleConfig(isolation="process")
    # why there is no interval yet: said in the first round, "n/a" after it
    first = _progress(1, sched, 3, math.inf, "amp=true", 10.0, 10.0)
    assert "; CI n/a until 3 paired rounds (amp=true), target" in first
    early = _progress(2, sched, 3, math.inf, "amp=true", 20.0, 10.0)
    assert "widest CI n/a (amp=true), target" in early
    workers = ScheduleConfig(isolation="worker", trials_per_worker=2)
    first = _progress(1, workers, 3, math.inf, "amp=true", 10.0, 10.0)
    assert "CI n/a until 3 worker generations" in first
    # two rounds' stopping bound once printed +-1741840784946858.5 %
    wild = _progress(3, sched, 3, 1.7e13, "amp=true", 30.0, 10.0)
    assert "widest CI >= +-100% (amp=true)" in wild and "e+" not in wild
    assert "widest CI +-4.2% (amp=true)" in _progress(9, sched, 3, 0.042, "amp=true", 90, 10)


def test_the_console_table_prints_the_band_the_noise_floor_and_experiment_health():
    from perflab.formats.summary import Comparison, Summary
    from perflab.report.console import experiment_table

    base, var = _costs([0.05, 0.06, 0.04, 0.05, 0.055])
    comparison = Comparison(
        variant="amp=true",
        baseline="amp=off",
        cell={},
        metric="latency",
        delta=0.01,
        health=[],
        numerics=None,
        estimate=analysis.compare(base, var, 0.95, 0.01),
    )
    aa = analysis.compare(*_costs([0.01, -0.02, 0.0, 0.015, -0.01]), 0.95, 0.01)
    assert aa is not None
    summary = Summary(
        metric="latency",
        ci_level=0.95,
        delta=0.01,
        label="",
        rounds=5,
        stop_reason="max rounds",
        elapsed_s=12.0,
        unreliable=[],
        health=["carry-over: trials that follow amp=off run +4.0% [+2.0%, +6.0%]"],
        edited_records=[],
        exploratory=False,
        sentinel=Sentinel(estimate=aa, noise_floor=0.03),
        carryover=[],
        comparisons=[comparison],
        scaling=[],
        variants=[],
    )
    text = experiment_table(summary)
    assert "band +-1.0%" in text and "FASTER" in text
    assert "noise floor +-3.0% (information: the band stays +-1.0%)" in text
    assert "  health: carry-over: trials that follow amp=off run +4.0%" in text


def test_the_carry_over_model_has_no_speedup_for_a_variant_without_trials():
    order = [t for t in _order(np.random.default_rng(3), 10, 0.06) if t.variant != "1"]
    order += [carryover.TrialInOrder(0, "2", "2", None, "0")]  # a failed trial only
    fit = carryover.fit(order, reference="0")
    assert fit is not None and fit.speedup("0", "2", 0.95) is None
