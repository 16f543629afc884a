"""Warm workers (schedule.isolation=worker) in the statistics: a worker generation is one
unit of the analysis (stats.paired_units, summary.compare), and the simulator
(perflab.analysis.simulation) runs warm workers as perflab does, so that seeded simulations
can show what the cluster analysis buys. The full figures: benchmarks/validate_statistics.py
--section workers. No torch, no timing."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from perflab.analysis import stats
from perflab.analysis import verdicts as analysis
from perflab.analysis.simulation import Machine, SimVariant, experiment, tally, with_fields
from perflab.config.schema import ScheduleConfig, TrialConfig
from perflab.formats.dataclass_json import encode

# Short trials (as preset=quick), spelled out so that a preset's edit moves no figure here;
# the warm-up's steady window thrown away, as when the figures were computed
TRIAL = TrialConfig(
    warmup_steps=2,
    warmup_s=0.1,
    steady_tolerance=0.02,
    warmup_max_s=5.0,
    min_steps=3,
    min_s=0.2,
    max_steps=5000,
    max_s=3.0,
    keep_steady_window=False,
)


def _schedule(isolation: str, k: int, **changes: float) -> ScheduleConfig:
    sched = ScheduleConfig(
        min_rounds=5,
        max_rounds=10,
        target_half_width=0.05,
        time_budget_s=75.0,
        confidence=0.95,
        delta=0.01,
        sentinel=True,
        isolation=isolation,
        trials_per_worker=k,
    )
    return with_fields(sched, **changes)


# --- generations as units ---------------------------------------------------------------


def test_paired_units_are_worker_generations_partial_and_gappy_ones_included():
    base = {r: 100.0 for r in range(10)}
    var = {r: 100.0 / math.exp(0.01 * r) for r in range(10) if r not in (5, 6)}
    var[11] = 50.0  # no baseline trial in round 11: unpaired, left out
    d, units = stats.paired_units(base, var, 4)
    # rounds 0-3, 4-7 (5 and 6 missing), and the partial last generation 8-9
    assert units == [[0, 1, 2, 3], [4, 7], [8, 9]]
    assert d == pytest.approx([0.015, 0.055, 0.085])
    # a generation with no paired round is no unit; 1 round per unit is the plain pairing
    del var[8], var[9]
    assert stats.paired_units(base, var, 4)[1] == [[0, 1, 2, 3], [4, 7]]
    d1, units1 = stats.paired_units(base, var, 1)
    assert units1 == [[r] for r in (0, 1, 2, 3, 4, 7)]
    rounds = [r for (r,) in units1]
    assert d1 == stats.paired_log_ratios([base[r] for r in rounds], [var[r] for r in rounds])


# per-round log-ratios and what compare() returned for them before warm workers existed
# (computed with the code of that time): k = 1 must still give exactly this
_LOGS = [0.03, 0.01, 0.05, -0.01, 0.02, 0.04, 0.0, 0.03, 0.02]
_BEFORE = (
    '{"ci_high": 1.0363636039874202, "ci_level": 0.95, "ci_low": 1.0065253689133065, '
    '"distribution_sensitive": false, "half_width": 0.014714142934254326, "hodges_lehmann": '
    '{"ci_high": 1.0356197087996224, "ci_low": 1.005012520859401, "speedup": '
    '1.0202013400267553}, "interval": "t", "outlier_rounds": [], "p_value": '
    '0.010340937668592664, "rounds": 9, "rounds_to_decide": 14, "sd_log_ratio": '
    '0.019002923751651895, "speedup": 1.02133552705845, "t": {"ci_high": 1.0363636039874202, '
    '"ci_low": 1.0065253689133065, "speedup": 1.02133552705845}, "verdict": "INCONCLUSIVE", '
    '"welch": {"ci_high": 1.0363636039874204, "ci_low": 1.0065253689133067, "p_value": '
    '0.01034093766859218, "speedup": 1.0213355270584503}}'
)


def test_compare_reports_its_units_with_workers_and_is_unchanged_without():
    base = {r: 1e6 for r in range(len(_LOGS))}
    var = {r: 1e6 / math.exp(x) for r, x in enumerate(_LOGS)}
    plain = analysis.compare(base, var, 0.95, 0.01, 1)
    assert plain is not None and plain.units is None and plain.rounds_per_unit is None
    assert json.dumps(encode(plain), sort_keys=True) == _BEFORE  # as summary.json holds it
    assert json.dumps(encode(analysis.compare(base, var, 0.95, 0.01)), sort_keys=True) == _BEFORE
    c = analysis.compare(base, var, 0.95, 0.01, 4)
    assert c is not None and c.units == 3 and c.rounds_per_unit == 4 and c.rounds == 9
    # the estimate: the mean of the generations' mean log-ratios (the last has 1 round)
    means = [float(np.mean(_LOGS[0:4])), float(np.mean(_LOGS[4:8])), _LOGS[8]]
    assert c.speedup == pytest.approx(math.exp(np.mean(means)))
    # and the interval: Student t on those 3 means, with 2 degrees of freedom
    sd = float(np.std(means, ddof=1))
    half = 4.302652729911275 * sd / math.sqrt(3)  # t(0.975, 2)
    assert c.interval == "t" and c.sd_log_ratio == pytest.approx(sd)
    assert c.ci_low == pytest.approx(math.exp(np.mean(means) - half))
    assert c.ci_high == pytest.approx(math.exp(np.mean(means) + half))
    # too few units for an interval, however many rounds
    assert analysis.compare(base, var, 0.95, 0.01, 5) is None


# --- the simulator ------------------------------------------------------------------------


def test_the_simulator_with_a_fresh_process_per_trial_gives_what_it_always_gave():
    # computed with the simulator before warm workers were added to it
    machine = Machine(
        sd_step=0.04, sd_trial=0.04, ar_phi=0.5, sd_state=0.02, outlier_p=0.05, drift=0.001
    )
    variants = [SimVariant(0.01), SimVariant(0.01 / 1.03)]
    sched = _schedule("process", 1)
    out = experiment(np.random.default_rng(2026), variants, machine, TRIAL, sched)
    c = out.comparisons[0].estimate
    assert c is not None and (c.speedup, c.ci_low, c.ci_high) == (
        1.0228800256357684,
        0.939192615292381,
        1.1140244608065948,
    )
    assert (c.verdict, out.rounds, out.stop) == ("INCONCLUSIVE", 10, "max rounds")
    assert out.sentinel is not None and out.sentinel.estimate.speedup == 1.0395332571409313
    assert out.timed_steps == {1: 23, 0: 20} and out.rounds_per_unit == 1
    t = tally(1.0, Machine(), TRIAL, sched, 25, seed=7)
    assert (t.verdicts, t.covered, t.unreliable, t.carryover_flags) == (
        {"INCONCLUSIVE": 25},
        24,
        0,
        1,
    )
    assert t.mean_rounds == 5.68 and t.median_half_width == 0.02163943834169202


def test_workers_stop_only_at_generation_ends_and_pay_the_process_start_once():
    rng = np.random.default_rng(5)
    variants = [SimVariant(0.01), SimVariant(0.01)]
    sched = _schedule("worker", 3, max_rounds=22, target_half_width=0.03, time_budget_s=1e9)
    outs = [experiment(rng, variants, Machine(sd_worker=0.01), TRIAL, sched) for _ in range(8)]
    assert all(o.rounds % 3 == 0 or o.rounds == 22 for o in outs)
    assert any(o.stop == "precision reached" and o.rounds < 22 for o in outs)
    assert all(o.comparisons[0].estimate.units == -(-o.rounds // 3) for o in outs)
    # a 1 s process start: fresh processes fit 10 rounds in the 40 s budget, warm workers
    # of 4 trials (a round of starts, then 3 rounds at 0.02 s) 20
    slow_start = Machine(startup_s=1.0, worker_startup_s=0.02)
    budget = {"min_rounds": 4, "max_rounds": 40, "target_half_width": 0.0, "time_budget_s": 40}
    rounds = {
        isolation: experiment(rng, variants, slow_start, TRIAL, _schedule(isolation, k, **budget))
        for isolation, k in (("process", 1), ("worker", 4))
    }
    assert rounds["process"].rounds == 10 and rounds["process"].stop == "time budget"
    assert rounds["worker"].rounds == 20 and rounds["worker"].stop == "time budget"
    # the steady window opening the timed block shortens every trial: more rounds fit
    kept = with_fields(TRIAL, keep_steady_window=True)
    more = experiment(rng, variants, slow_start, kept, _schedule("worker", 4, **budget))
    assert more.rounds > 20 and more.stop == "time budget"


@pytest.mark.slow
def test_a_workers_offset_is_covered_by_the_cluster_analysis_and_not_without_it():
    # a layout-sensitive machine (8 % per worker) and 3 generations of 4 rounds: the same
    # experiments analysed by generation, and as if their 12 rounds were independent
    sched = _schedule("worker", 4, min_rounds=12, max_rounds=12, sentinel=False)
    machine = Machine(sd_worker=0.08)
    clustered = tally(1.0, machine, TRIAL, sched, 150, seed=1)
    ignored = tally(1.0, machine, TRIAL, sched, 150, seed=1, analysis_rounds_per_unit=1)
    assert clustered.covered >= 135  # 90 %; nominal 95 %
    assert ignored.covered <= 120 and clustered.covered - ignored.covered >= 30
    assert clustered.count("FASTER", "SLOWER") <= 10 < ignored.count("FASTER", "SLOWER")
