"""Claims about a comparison, judged on its interval: passed, failed or undecided.

A claim is decided only where the interval is on one side of the claim's threshold; an
interval across it, a comparison without paired rounds (NO DATA) and a run the A/A
sentinel flags UNRELIABLE are *undecided*, with the reason and the rounds that would
likely decide it, never a silent pass or fail. Each outcome states the error rates of
the decision it made (perflab.analysis.gate_rates), so a gate that is a coin toss reads
as one.

- faster(by): the variant is faster by at least ``by`` (0.05: 5 %). Passes when the
  verdict is FASTER and the interval's lower end is at least 1 + by; fails when the
  verdict is SLOWER or EQUIVALENT or the upper end is below 1 + by.
- not_slower(by): the variant is not slower by more than ``by`` (at least the band).
  Passes when the lower end is at least 1 - by; fails when the upper end is below it.
- equivalent(): the verdict is EQUIVALENT (passes), FASTER or SLOWER (fails).
"""

from __future__ import annotations

from dataclasses import dataclass

from perflab.formats.summary import NO_DATA, Comparison

PASSED, FAILED, UNDECIDED = "passed", "failed", "undecided"


@dataclass(frozen=True)
class Check:
    """One claim about one comparison, and what its interval says of it."""

    # what was claimed, e.g. "amp=bf16 vs amp=off: faster by at least 5.0%"
    claim: str
    # PASSED, FAILED or UNDECIDED
    outcome: str
    # the numbers behind the outcome: verdict, speedup, interval, rounds
    evidence: str
    # for UNDECIDED: why, and what would decide it
    reason: str = ""
    # the decision's error rates at these rounds and this noise, in words
    rates: str = ""

    def __str__(self) -> str:
        parts = [f"{self.claim}: {self.outcome.upper()} ({self.evidence})"]
        parts += [p for p in (self.reason, self.rates) if p]
        return "; ".join(parts)


def evidence(c: Comparison) -> str:
    e = c.estimate
    if e is None:
        return f"{NO_DATA}: fewer than 3 paired rounds"
    low = "-inf" if e.ci_low is None else f"{e.ci_low:.3f}"
    high = "inf" if e.ci_high is None else f"{e.ci_high:.3f}"
    return f"{e.verdict} {e.speedup:.3f}x [{low}, {high}], {e.rounds} rounds"


def _undecided_reason(c: Comparison, unreliable: list[str]) -> str:
    if unreliable:
        return "the run is UNRELIABLE: " + unreliable[0]
    e = c.estimate
    if e is None:
        return "no verdict: fewer than 3 rounds with both trials ok"
    more = (
        f"; about {e.rounds_to_decide} rounds would likely decide it" if e.rounds_to_decide else ""
    )
    return (
        f"the interval is on both sides of the threshold{more} (raise schedule.max_rounds "
        "or the budget)"
    )


def faster(c: Comparison, by: float, unreliable: list[str], rates: str = "") -> Check:
    claim = f"{c.variant} vs {c.baseline}: faster by at least {by:.1%}"
    return _judge(c, claim, unreliable, rates, _faster_outcome(c, by))


def not_slower(c: Comparison, by: float, unreliable: list[str], rates: str = "") -> Check:
    tolerance = max(by, c.delta)
    claim = f"{c.variant} vs {c.baseline}: not slower by more than {tolerance:.1%}"
    return _judge(c, claim, unreliable, rates, _not_slower_outcome(c, tolerance))


def equivalent(c: Comparison, unreliable: list[str], rates: str = "") -> Check:
    claim = f"{c.variant} vs {c.baseline}: equivalent within +-{c.delta:.1%}"
    outcome = {"EQUIVALENT": PASSED, "FASTER": FAILED, "SLOWER": FAILED}.get(c.verdict, UNDECIDED)
    return _judge(c, claim, unreliable, rates, outcome)


def _judge(c: Comparison, claim: str, unreliable: list[str], rates: str, outcome: str) -> Check:
    if unreliable or c.estimate is None:
        outcome = UNDECIDED
    reason = _undecided_reason(c, unreliable) if outcome == UNDECIDED else ""
    return Check(claim, outcome, evidence(c), reason, rates)


def _faster_outcome(c: Comparison, by: float) -> str:
    e = c.estimate
    if e is None:
        return UNDECIDED
    threshold = 1 + by
    if e.verdict == "FASTER" and e.ci_low >= threshold:
        return PASSED
    if e.verdict in ("SLOWER", "EQUIVALENT") or (e.ci_high is not None and e.ci_high < threshold):
        return FAILED
    return UNDECIDED


def _not_slower_outcome(c: Comparison, tolerance: float) -> str:
    e = c.estimate
    if e is None:
        return UNDECIDED
    threshold = 1 - tolerance
    if e.ci_low >= threshold:
        return PASSED
    if e.ci_high is not None and e.ci_high < threshold:
        return FAILED
    return UNDECIDED
