"""The sessions of a resumed sweep: which one ran each trial, and what a comparison loses
when its two variants ran a round in different ones.

A sweep resumed into its directory keeps the trials on disk and runs the missing ones in
a new session (perflab.experiment.resume). Usually that fills in the rest of one round.
But when a variant's directory was lost, or it was added to the disk later, every round
of that variant runs in the new session while its baseline's trials come from the old
one. Paired, those rounds measure whatever changed between the sessions along with the
variant: in a hostile test, a machine 2 ms slower per step in the second session turned
an INCONCLUSIVE 0.960x into SLOWER 0.604x. So a round is paired only within one session
(perflab.analysis.stats.Sessions), and the rounds that are not are named.

Pure: the records already read; no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

from perflab.analysis.stats import Sessions
from perflab.analysis.sweep import ResumedSession
from perflab.formats.records import TrialRecord


def of_record(record: TrialRecord, resumed: Sequence[ResumedSession]) -> int:
    """The session that ran ``record``: its own ``session`` field, or for a record from
    before schema 6, how many resumed sessions (experiment.json's ``resumed``, each with
    the time ``at`` it first ran a trial) had started when it did."""
    if record.session is not None:
        return record.session
    started = _time(record.started_at)
    if started is None:
        return 0
    return sum(1 for r in resumed if (at := _time(r.at)) is not None and at <= started)


def _time(value: object) -> datetime | None:
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    # records and experiment.json write UTC with its offset; a time without one is read
    # as UTC too, so that the two can be compared
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def by_round(
    trials: Mapping[int, TrialRecord], resumed: Sequence[ResumedSession]
) -> dict[int, int]:
    """The session of each round's trial of one variant."""
    return {r: of_record(t, resumed) for r, t in trials.items()}


def between(
    base: Mapping[int, TrialRecord],
    variant: Mapping[int, TrialRecord],
    resumed: Sequence[ResumedSession],
) -> Sessions:
    """The sessions of a comparison's two variants, round by round."""
    return Sessions(by_round(base, resumed), by_round(variant, resumed))


# how the health flag of a comparison with rounds run across sessions begins
UNPAIRED = "not paired across sessions"


def finding(label: str, across: list[int]) -> str:
    """The health flag of a comparison with rounds run across sessions."""
    return (
        f"{UNPAIRED}: {_rounds(across)} of {label} ({len(across)}): it and its baseline "
        "ran them in different sessions of the resumed sweep, and a round is paired only "
        "within one session; to measure more rounds in one session, raise "
        "schedule.max_rounds or schedule.time_budget_s and run the same command again"
    )


def _rounds(rounds: list[int]) -> str:
    """Rounds numbered from 1, as the report counts them, with runs shown as ranges."""
    spans: list[list[int]] = []
    for r in sorted(rounds):
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    shown = [f"{a + 1}" if a == b else f"{a + 1}-{b + 1}" for a, b in spans]
    return "round " + shown[0] if len(rounds) == 1 else "rounds " + ", ".join(shown)
