"""Statistics: exact values on small inputs, and seeded simulations that can fail."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats as sps

from perflab.analysis import stats


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


def test_paired_effect_needs_two_rounds():  # analysis asks for MIN_PAIRED_ROUNDS
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


def test_trimmed_interval_ignores_two_wild_rounds():
    rng = random.Random(3)
    d = [0.05 + rng.gauss(0, 0.01) for _ in range(10)]
    wild = d[:8] + [-0.3, 0.4]
    t, trimmed = stats.paired_effect(wild), stats.trimmed_effect(wild)
    assert t.low < 1.0  # the t interval is blown open by the two rounds
    assert 1.03 < trimmed.low < trimmed.speedup < trimmed.high < 1.08
    # on clean rounds the two agree closely
    clean_t, clean_trimmed = stats.paired_effect(d), stats.trimmed_effect(d)
    assert clean_trimmed.speedup == pytest.approx(clean_t.speedup, rel=0.005)


def test_trimmed_interval_matches_yuens_test_for_one_sample():
    # scipy has Yuen's test for two samples only: check the one-sample form against its
    # definition (20 % trimmed mean, winsorized spread, n - 2g - 1 degrees of freedom)
    d = [0.1, 0.3, 0.2, 0.25, 0.15, 0.5, -0.1, 0.22, 0.18, 0.21]
    e = stats.trimmed_effect(d, 0.95, trim=0.2)
    x = sorted(d)
    mean = sum(x[2:8]) / 6
    w = [min(max(v, x[2]), x[7]) for v in x]
    mw = sum(w) / 10
    sw = math.sqrt(sum((v - mw) ** 2 for v in w) / 9)
    se = sw / (0.6 * math.sqrt(10))
    assert math.log(e.speedup) == pytest.approx(mean)
    assert e.p_value == pytest.approx(2 * sps.t.sf(mean / se, 5))


def test_widest_half_width_needs_three_paired_rounds():
    base, var = {0: 10.0, 1: 10.5}, {0: 9.0, 1: 9.4}
    assert stats.widest_half_width([("v", base, var)], 0.95) == (math.inf, "v")
    base[2], var[2] = 10.2, 9.1
    width, who = stats.widest_half_width([("v", base, var)], 0.95)
    assert who == "v" and 0 < width < 1
    assert stats.widest_half_width([], 0.95) == (-1.0, "")


def test_rounds_to_narrow_scales_with_the_square_of_the_width():
    # estimate 1.05, interval +-3 % (log), band 1 %: margin log(1.05) - log(1.01)
    n = stats.rounds_to_narrow(1.05, 1.05 / math.exp(0.03), 1.05 * math.exp(0.03), 10, 0.01)
    margin = math.log(1.05) - math.log(1.01)
    assert n == max(10, math.ceil(10 * (0.03 / margin) ** 2))
    assert stats.rounds_to_narrow(1.01, 0.99, 1.03, 10, 0.01) is None
