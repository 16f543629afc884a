"""Statistics: exact values on small inputs, and seeded simulations that can fail."""

from __future__ import annotations

import math
import random
import statistics
import warnings

import pytest
from scipy import stats as sps

from perflab.analysis import stats
from perflab.analysis.simulation import clopper_pearson


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
    assert stats.widest_half_width([("v", base, var, None)], 0.95) == (math.inf, "v")
    base[2], var[2] = 10.2, 9.1
    width, who = stats.widest_half_width([("v", base, var, None)], 0.95)
    assert who == "v" and 0 < width < 1
    assert stats.widest_half_width([], 0.95) == (-1.0, "")


def test_rounds_to_narrow_scales_with_the_square_of_the_width():
    # estimate 1.05, interval +-3 % (log), band 1 %: margin log(1.05) - log(1.01)
    n = stats.rounds_to_narrow(1.05, 1.05 / math.exp(0.03), 1.05 * math.exp(0.03), 10, 0.01)
    margin = math.log(1.05) - math.log(1.01)
    assert n == max(10, math.ceil(10 * (0.03 / margin) ** 2))
    assert stats.rounds_to_narrow(1.01, 0.99, 1.03, 10, 0.01) is None


# --- the scipy calls against the formulas they replaced ---------------------------------
# paired_effect, welch_effect and benjamini_hochberg call scipy; these reference versions
# are the hand formulas stats.py used before, computed here with the statistics module
# (correctly rounded sums) so that the two sides share no arithmetic but the t quantile.


def _hand_t(mean: float, se: float, dof: float, level: float) -> tuple[float, float, float]:
    half = float(sps.t.ppf(0.5 + level / 2, dof)) * se
    return math.exp(mean - half), math.exp(mean + half), float(2 * sps.t.sf(abs(mean) / se, dof))


def _hand_paired(d: list[float], level: float) -> tuple[float, float, float]:
    n = len(d)
    return _hand_t(statistics.fmean(d), statistics.stdev(d) / math.sqrt(n), n - 1, level)


def _hand_welch(base: list[float], var: list[float], level: float) -> tuple[float, float, float]:
    a, b = [math.log(x) for x in base], [math.log(x) for x in var]
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return _hand_t(statistics.fmean(a) - statistics.fmean(b), math.sqrt(va + vb), df, level)


def _hand_bh(p: list[float]) -> list[float]:
    """Benjamini-Hochberg from its definition: the smallest p_(j) m / j over the sorted
    p-values at or above p_i, capped at 1 (O(m^2), no running minimum)."""
    s, m = sorted(p), len(p)
    return [min([1.0] + [s[j] * m / (j + 1) for j in range(m) if s[j] >= x]) for x in p]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_paired_effect_matches_the_hand_t_interval(seed, level):
    rng = random.Random(seed)
    n = 2 + seed * 3  # 2 (one degree of freedom) to 35 rounds
    d = [rng.gauss(0.03, 10 ** rng.uniform(-4, -0.5)) for _ in range(n)]
    e = stats.paired_effect(d, level)
    low, high, p = _hand_paired(d, level)
    assert e.low == pytest.approx(low, rel=1e-12)
    assert e.high == pytest.approx(high, rel=1e-12)
    assert e.p_value == pytest.approx(p, rel=1e-12)
    assert e.speedup == pytest.approx(math.exp(statistics.fmean(d)), rel=1e-14)
    assert e.sd_log == pytest.approx(statistics.stdev(d), rel=1e-12)
    assert (e.n, e.level) == (n, level)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_welch_effect_matches_the_hand_welch_interval(seed, level):
    rng = random.Random(100 + seed)
    na, nb = 2 + seed, 2 + (seed * 5) % 13  # unequal sizes, down to 2 and 2
    base = [1e6 * math.exp(rng.gauss(0, 0.02)) for _ in range(na)]
    var = [8e5 * math.exp(rng.gauss(0, 10 ** rng.uniform(-3, -1))) for _ in range(nb)]
    e = stats.welch_effect(base, var, level)
    low, high, p = _hand_welch(base, var, level)
    assert e.low == pytest.approx(low, rel=1e-12)
    assert e.high == pytest.approx(high, rel=1e-12)
    assert e.p_value == pytest.approx(p, rel=1e-12)
    assert e.n == min(na, nb)


def test_intervals_without_spread_keep_their_collapsed_limit():
    # scipy divides by a zero standard error here (p NaN at no effect); perflab reports
    # the limit: p = 1 at no effect, 0 at an effect, and an interval of one point
    for d, p in (([0.0, 0.0, 0.0, 0.0], 1.0), ([0.25, 0.25, 0.25], 0.0)):
        e = stats.paired_effect(d)
        assert (e.low, e.speedup, e.high, e.p_value, e.sd_log) == (
            math.exp(d[0]),
            math.exp(d[0]),
            math.exp(d[0]),
            p,
            0.0,
        )
    same = stats.welch_effect([4.0, 4.0], [4.0, 4.0])
    assert (same.low, same.high, same.p_value) == (1.0, 1.0, 1.0)
    both = stats.welch_effect([5.0] * 3, [4.0] * 2)
    assert both.low == both.high == pytest.approx(1.25) and both.p_value == 0.0


def test_repeated_costs_give_no_precision_warning():
    # the mean of [0.1] * 3 is not 0.1 in floating point: a standard error of ~1e-17
    # that scipy warns about; the interval is still the point and is computed silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e = stats.paired_effect([0.1] * 3)
        w = stats.welch_effect([1e6] * 4, [8e5, 8.1e5, 7.9e5])
    assert e.low == pytest.approx(math.exp(0.1)) == e.high
    assert e.p_value < 1e-20
    low, high, _ = _hand_welch([1e6] * 4, [8e5, 8.1e5, 7.9e5], 0.95)
    assert (w.low, w.high) == (pytest.approx(low, rel=1e-12), pytest.approx(high, rel=1e-12))


@pytest.mark.parametrize("seed", range(20))
def test_benjamini_hochberg_matches_its_definition(seed):
    rng = random.Random(seed)
    m = 1 + seed * 2
    p = [rng.random() ** rng.uniform(1, 6) for _ in range(m)]
    if seed % 2:  # ties, exact ones and zeros, in any order
        p[: m // 2] = [p[0]] * (m // 2)
        p[-1], p[len(p) // 2] = 1.0, 0.0
        rng.shuffle(p)
    adjusted = stats.benjamini_hochberg(p)
    assert adjusted == pytest.approx(_hand_bh(p), rel=1e-12, abs=1e-15)
    assert all(type(x) is float for x in adjusted)


def test_benjamini_hochberg_edges():
    assert stats.benjamini_hochberg([]) == []
    assert stats.benjamini_hochberg([0.3]) == [0.3]
    assert stats.benjamini_hochberg([1.0, 1.0, 1.0]) == [1.0, 1.0, 1.0]
    assert stats.benjamini_hochberg([0.02, 0.02, 0.9]) == pytest.approx([0.03, 0.03, 0.9])
    with pytest.raises(ValueError):  # the old loop adjusted NaN into a number
        stats.benjamini_hochberg([0.01, math.nan])


@pytest.mark.parametrize("trials", [1, 2, 7, 40, 1000])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_clopper_pearson_solves_its_defining_tail_equations(trials, level):
    # each end is the rate at which the observed count is just in the alpha/2 tail;
    # scipy's binomtest(...).proportion_ci(method="exact") solves these by root search
    # and misses them by up to ~7e-9 (relative), the beta quantiles by ~2e-12
    tail = (1 - level) / 2
    for successes in sorted({0, 1, trials // 3, trials - 1, trials}):
        low, high = clopper_pearson(successes, trials, level)
        if successes == 0:
            assert low == 0.0
        else:
            assert sps.binom.sf(successes - 1, trials, low) == pytest.approx(tail, rel=1e-10)
        if successes == trials:
            assert high == 1.0
        else:
            assert sps.binom.cdf(successes, trials, high) == pytest.approx(tail, rel=1e-10)
        scipy_ci = sps.binomtest(successes, trials).proportion_ci(level, method="exact")
        assert (low, high) == (
            pytest.approx(scipy_ci.low, abs=1e-11),
            pytest.approx(scipy_ci.high, abs=1e-11),
        )
