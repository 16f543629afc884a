"""Statistics: exact values on small inputs, and seeded simulations that can fail."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats as sps

from perflab import stats
from perflab.simulation import Machine, one_experiment, rates, sequential_experiment


def test_paired_effect_matches_a_paired_t_test_on_log_costs():
    base = [10.0, 11.0, 10.5, 10.2, 10.8]
    var = [8.0, 9.1, 8.4, 8.3, 8.9]
    d = stats.paired_log_ratios(base, var)
    effect = stats.paired_effect(d, 0.95)
    reference = sps.ttest_rel([math.log(b) for b in base], [math.log(v) for v in var])
    assert effect.p_value == pytest.approx(reference.pvalue)
    assert effect.speedup == pytest.approx(math.exp(sum(d) / 5))
    assert effect.low < effect.speedup < effect.high
    assert effect.n == 5


def test_paired_effect_needs_two_rounds():
    with pytest.raises(ValueError):
        stats.paired_effect([0.1])


def test_signed_rank_distribution_is_exact():
    cdf = stats._signed_rank_cdf(10)
    assert cdf[-1] == pytest.approx(1.0)
    # published critical value: n=10, two-sided 5 %: W <= 8 rejects (P = 0.0244)
    assert cdf[8] == pytest.approx(0.02441, abs=1e-4)
    assert stats._signed_rank_critical(10, 0.05) == 9


def test_hodges_lehmann_interval_brackets_the_estimate():
    d = [0.05, 0.07, 0.04, 0.06, 0.05, 0.08, 0.03, 0.06, 0.05, 0.07]
    est, low, high = stats.hodges_lehmann(d)
    assert low < est < high
    assert est == pytest.approx(math.exp(0.055), rel=1e-3)


def test_hodges_lehmann_with_too_few_rounds_is_unbounded():
    assert stats.hodges_lehmann([0.1, 0.2])[2] == math.inf


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (1.05, 1.10, "FASTER"),
        (0.90, 0.95, "SLOWER"),
        (0.995, 1.005, "EQUIVALENT"),
        (0.98, 1.05, "INCONCLUSIVE"),
        (1.005, 1.02, "INCONCLUSIVE"),
    ],
)
def test_four_state_verdict(low, high, expected):
    assert stats.verdict(low, high, 0.01) == expected


def test_rounds_to_decide_grows_as_the_effect_nears_the_band():
    far = stats.Effect(1.05, 0.99, 1.11, 0.95, 10, math.log(1.05), 0.08, 0.1)
    near = stats.Effect(1.02, 0.96, 1.08, 0.95, 10, math.log(1.02), 0.08, 0.3)
    assert stats.rounds_to_decide(far, 0.01) < stats.rounds_to_decide(near, 0.01)
    edge = stats.Effect(1.01, 0.95, 1.07, 0.95, 10, math.log(1.01), 0.08, 0.5)
    assert stats.rounds_to_decide(edge, 0.01) is None


def test_holm_and_benjamini_hochberg_on_a_textbook_example():
    p = [0.01, 0.04, 0.03, 0.005]
    assert stats.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])


def test_outliers_are_flagged():
    values = [10, 11, 10, 12, 11, 10, 50]
    assert stats.tukey_outliers(values) == [6]
    assert stats.mad_outliers(values) == [6]
    assert stats.mad_outliers([5, 5, 5]) == []


def test_changepoints_find_a_level_shift_and_not_noise():
    rng = random.Random(1)
    steady = [rng.gauss(0, 0.02) for _ in range(60)]
    shifted = steady[:30] + [x + 0.2 for x in steady[30:]]
    assert stats.changepoints(steady) == []
    assert stats.changepoints(shifted) == [30]


def test_changepoint_false_flags_on_stationary_noise_are_rare():
    flagged = sum(
        bool(stats.changepoints([random.Random(s).gauss(0, 1) for _ in range(40)]))
        for s in range(100)
    )
    assert flagged <= 5


def test_describe_labels_unbounded_tail_percentiles():
    d = stats.describe([float(i) for i in range(100)])
    assert d.bounded == ("p50", "p90")
    assert stats.describe([float(i) for i in range(2000)]).bounded == ("p50", "p90", "p95", "p99")


def test_variance_split_points_at_the_dominant_source():
    rng = random.Random(0)
    between = [[m + rng.gauss(0, 0.001) for _ in range(50)] for m in (0, 0.2, -0.1, 0.15)]
    assert "more rounds" in stats.variance_split(between).advice
    within = [[rng.gauss(0, 0.5) for _ in range(5)] for _ in range(6)]
    assert "more steps" in stats.variance_split(within).advice


# --- seeded simulations: small versions of benchmarks/validate_statistics.py -----------

NOISY = Machine(sd_trial=0.02, ar_phi=0.5, sd_state=0.01)


def test_aa_false_verdicts_stay_near_alpha():
    r = rates(lambda rng: one_experiment(rng, 1.0, 10, NOISY), 1.0, 300, seed=7)
    assert r.decided <= 0.09  # 5 % expected; 9 % leaves room for 300 draws
    assert r.coverage >= 0.91


def test_aa_false_verdicts_with_the_delta_band_are_rare():
    r = rates(lambda rng: one_experiment(rng, 1.0, 10, NOISY, delta=0.01), 1.0, 300, seed=8)
    assert r.decided <= 0.02


def test_power_for_a_five_percent_speedup_within_ten_rounds():
    machine = Machine(sd_trial=0.014, ar_phi=0.0, sd_state=0.0)  # s_d = 2 %
    r = rates(lambda rng: one_experiment(rng, 1.05, 10, machine, delta=0.01), 1.05, 200, seed=9)
    assert r.decided >= 0.95 and abs(r.bias) < 0.005


def test_interleaving_keeps_drift_from_reading_as_an_effect():
    drifting = Machine(sd_trial=0.01, ar_phi=0.0, sd_state=0.0, drift=0.002)
    mixed = rates(lambda rng: one_experiment(rng, 1.0, 10, drifting), 1.0, 200, seed=10)
    sequential = rates(
        lambda rng: one_experiment(rng, 1.0, 10, drifting, interleaved=False), 1.0, 200, seed=10
    )
    assert mixed.decided <= 0.10
    assert sequential.decided >= 0.5


def test_stopping_rule_keeps_coverage():
    r = rates(lambda rng: sequential_experiment(rng, 1.0, NOISY, 10, 40, 0.01), 1.0, 200, seed=11)
    assert r.coverage >= 0.90 and r.decided <= 0.10
