"""Carry-over: does a trial run slower or faster depending on which variant ran before it?

On a GPU a trial that follows a high-power trial can start throttled and hot; on any
machine a trial can inherit caches, page-cache state or a busy co-tenant from its
predecessor. Because every round runs the variants in a fresh random order, each variant
follows each other one by chance, so the effect of the predecessor can be estimated from
the experiment itself: a least-squares fit of the log trial cost on

    round (one level per round: the machine's state that round, drift)
  + variant (what the trial ran)
  + predecessor (the configuration of the trial that ran just before it)

Predecessors are compared with one reference configuration (the first baseline); their
t tests are Holm-adjusted across the predecessors, and a carry-over is flagged below 1 %.
The A/A sentinel runs its baseline's configuration, so the two count as one predecessor.
A carry-over biases the comparisons (a variant that often follows a heavy one looks
slower), and the A/A sentinel cannot see it (the sentinel and its baseline follow the
same mix of variants). A flagged carry-over is a health flag, with its size, and the
comparisons are then estimated from the same fit, with the predecessor held equal
(Fit.speedup), instead of from the plain paired log-ratios.

Pure: numpy and scipy over the records already read; no torch, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from scipy import stats as sps

from perflab.analysis import sessions
from perflab.analysis.stats import holm
from perflab.analysis.sweep import ResumedSession
from perflab.analysis.trials import trial_cost
from perflab.config.plan import Plan
from perflab.formats.records import TrialRecord
from perflab.formats.summary import CarryOverEffect


@dataclass(frozen=True)
class TrialInOrder:
    """One trial, in the order the trials ran."""

    round: int
    # the variant it ran, and the configuration that is (the sentinel's is its baseline's)
    variant: str
    config: str
    # log of its cost (per-trial metric); None for a trial without one (failed)
    log_cost: float | None
    # configuration of the trial that ran just before; None for the first of a session
    after: str | None
    # the session of a resumed sweep that ran it (perflab.analysis.sessions): a round
    # whose trials ran in two sessions is two blocks of the fit, one per session
    session: int = 0


@dataclass(frozen=True)
class Fit:
    """The least-squares fit: its coefficients, their covariance and degrees of freedom,
    and where each variant's and each predecessor's coefficient sits (a reference has
    none: it is zero)."""

    coef: np.ndarray
    cov: np.ndarray
    dof: int
    # the first variant has no column (the rounds' intercepts stand for it)
    first_variant: str
    variant_column: dict[str, int]
    after_column: dict[str, int]
    reference: str
    trials_after: dict[str, int]

    def _contrast(self, plus: dict[int, float], level: float) -> tuple[float, float, float, float]:
        """(estimate, low, high, p) of a linear combination of the coefficients."""
        c = np.zeros(len(self.coef))
        for column, weight in plus.items():
            c[column] += weight
        est, se = float(c @ self.coef), math.sqrt(max(float(c @ self.cov @ c), 0.0))
        half = float(sps.t.ppf(0.5 + level / 2, self.dof)) * se
        p = float(2 * sps.t.sf(abs(est) / se, self.dof)) if se > 0 else float(est == 0)
        return est, est - half, est + half, p

    def carryovers(self, level: float) -> list[CarryOverEffect]:
        """One row per predecessor other than the reference, Holm-adjusted across them."""
        rows = [(after, *self._contrast({k: 1.0}, level)) for after, k in self.after_column.items()]
        adjusted = holm([r[4] for r in rows])
        return [
            CarryOverEffect(
                after=after,
                reference=self.reference,
                effect=math.expm1(est),
                low=math.expm1(low),
                high=math.expm1(high),
                p_adjusted=p_adj,
                trials=self.trials_after[after],
            )
            for (after, est, low, high, _), p_adj in zip(rows, adjusted, strict=True)
        ]

    def speedup(
        self, base: str, variant: str, level: float
    ) -> tuple[float, float, float, float] | None:
        """The speedup of ``variant`` over ``base`` with the predecessor held equal: the
        comparison adjusted for carry-over, as (speedup, low, high, p-value)."""
        fitted = {self.first_variant, *self.variant_column}
        if base not in fitted or variant not in fitted:
            return None  # no ok trial with a predecessor
        weights = {self.variant_column[base]: 1.0} if base in self.variant_column else {}
        if variant in self.variant_column:
            weights[self.variant_column[variant]] = -1.0
        est, low, high, p = self._contrast(weights, level)
        return math.exp(est), math.exp(low), math.exp(high), p


def fit(trials: Sequence[TrialInOrder], reference: str | None = None) -> Fit | None:
    """Fit the model above; None when the design cannot separate predecessors from
    variants and rounds (too few trials, one configuration, too few residual degrees of
    freedom). ``reference``: the predecessor the others are compared with (when it
    occurs; else the first to occur)."""
    used = [t for t in trials if t.log_cost is not None and t.after is not None]
    configs = list(dict.fromkeys(t.after for t in used if t.after is not None))
    if len(configs) < 2:
        return None
    if reference in configs:
        configs.remove(reference)
        configs.insert(0, reference)
    variants = list(dict.fromkeys(t.variant for t in used))
    blocks = sorted({(t.session, t.round) for t in used})
    column = {f"round:{s}:{r}": i for i, (s, r) in enumerate(blocks)}
    column.update({f"variant:{v}": len(column) + i for i, v in enumerate(variants[1:])})
    column.update({f"after:{c}": len(column) + i for i, c in enumerate(configs[1:])})
    design = np.zeros((len(used), len(column)))
    for row, t in enumerate(used):
        block = f"round:{t.session}:{t.round}"
        for key in (block, f"variant:{t.variant}", f"after:{t.after}"):
            if key in column:  # the first variant and the reference predecessor have none
                design[row, column[key]] = 1.0
    y = np.array([t.log_cost for t in used], dtype=np.float64)
    dof = len(y) - design.shape[1]
    if dof < 3 or np.linalg.matrix_rank(design) < design.shape[1]:
        return None
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ coef
    cov = float(residual @ residual) / dof * np.linalg.inv(design.T @ design)
    return Fit(
        coef,
        cov,
        dof,
        variants[0],
        {v: column[f"variant:{v}"] for v in variants[1:]},
        {c: column[f"after:{c}"] for c in configs[1:]},
        configs[0],
        {c: sum(1 for t in used if t.after == c) for c in configs},
    )


def estimate(
    trials: Sequence[TrialInOrder], level: float = 0.95, reference: str | None = None
) -> list[CarryOverEffect]:
    """The carry-over of each predecessor configuration (empty when it cannot be fitted)."""
    result = fit(trials, reference)
    return [] if result is None else result.carryovers(level)


# A carry-over is flagged (and the comparisons adjusted for it) when its Holm-adjusted
# p-value is below 1 %, not 5 %: a flag raised in one clean run out of twenty would teach
# users to ignore it. Measured false-flag rates: benchmarks/RESULTS.md.
CARRYOVER_ALPHA = 0.01


def flagged(
    rows: Sequence[CarryOverEffect], alpha: float = CARRYOVER_ALPHA
) -> list[CarryOverEffect]:
    """The carry-overs whose Holm-adjusted p-value is below ``alpha``."""
    return [r for r in rows if r.p_adjusted < alpha]


def reference(plan: Plan) -> str | None:
    """The configuration other predecessors are compared with: the first baseline."""
    return next((v.name for v in plan.variants if v.baseline is None), None)


# A trial that starts this long after the previous one finished has no predecessor: the
# machine had time to cool down (a resumed session, a pause).
CARRYOVER_GAP_S = 60.0


def in_order(
    plan: Plan,
    trials: dict[str, dict[int, TrialRecord]],
    metric: str,
    resumed: Sequence[ResumedSession] = (),
) -> list[TrialInOrder]:
    """Every trial of the experiment in the order it ran (by its start time), with the
    configuration of the trial just before it and its session (``resumed``: the resumed
    sessions of experiment.json); empty when a record has no usable times."""
    config = {v.name: v.source for v in plan.variants}
    timed = []
    for name, by_round in trials.items():
        for record in by_round.values():
            try:
                start = datetime.fromisoformat(record.started_at)
                end = datetime.fromisoformat(record.finished_at)
            except ValueError:
                return []
            timed.append((start, end, name, record))
    timed.sort(key=lambda t: t[0])
    out, previous = [], None
    for start, end, name, record in timed:
        after = None
        if previous is not None and (start - previous[0]).total_seconds() <= CARRYOVER_GAP_S:
            after = previous[1]
        log_cost = None
        if record.status == "ok" and record.samples is not None:
            log_cost = math.log(trial_cost(record, metric))
        session = sessions.of_record(record, resumed)
        out.append(TrialInOrder(record.round, name, config[name], log_cost, after, session))
        previous = (end, config[name])
    return out


def findings(plan: Plan, rows: list[CarryOverEffect]) -> list[str]:
    return [
        f"carry-over: trials that follow {plan.by_name(c.after).label} run {c.effect:+.1%} "
        f"[{c.low:+.1%}, {c.high:+.1%}] compared with those that follow "
        f"{plan.by_name(c.reference).label} (Holm-adjusted p={c.p_adjusted:.2g}); the comparisons "
        "may be biased by the order: lengthen the warm-up (trial.warmup_s) or let the "
        "machine settle between trials (schedule.settle_s)"
        for c in flagged(rows)
    ]
