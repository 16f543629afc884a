"""perflab's pytest plugin: a test runs an experiment and asserts on its verdicts.

Installed with perflab (the ``pytest11`` entry point) and idle unless a test asks for
the ``perflab_run`` fixture:

    def test_sdpa_is_faster(perflab_run):
        result = perflab_run(model="function", model__fn=[attention_ref, attention_sdpa],
                             model__inputs=inputs, budget_s=60)
        result.assert_faster(model__fn=attention_sdpa, by=0.05)

A claim the interval decides passes or fails (AssertionError). One it cannot decide
(INCONCLUSIVE, NO DATA, an UNRELIABLE run) is neither: it is skipped with the reason and
the rounds that would likely decide it, or with ``--perflab-undecided=error`` (ini
``perflab_undecided = error``) it raises perflab.Undecided, so the test fails as
undecided rather than as a failed claim. Every outcome's message carries the error rates
of the decision at the rounds and noise it had.

``budget_s`` bounds the experiment: its rounds get schedule.time_budget_s, and the whole
run is stopped cleanly at budget_s (the partial summary is what the test judges).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import pytest

from perflab.api.result import Result
from perflab.api.running import run

UNDECIDED_CHOICES = ("skip", "error")
# the share of budget_s the rounds get: the rest is start-up (a settings check per
# variant, the warm workers) and the summary and report, about 5-10 s on a 2-core CPU
# (docs/python.md)
ROUNDS_SHARE = 0.6
DEFAULT_BUDGET_S = 120.0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perflab")
    group.addoption(
        "--perflab-undecided",
        choices=UNDECIDED_CHOICES,
        default=None,
        help="what a perflab claim its interval cannot decide does: skip (default) or error",
    )
    parser.addini(
        "perflab_undecided", "perflab: skip or error for an undecided claim", default="skip"
    )


def _undecided_mode(config: pytest.Config) -> str:
    mode = config.getoption("--perflab-undecided") or config.getini("perflab_undecided")
    if mode not in UNDECIDED_CHOICES:
        raise pytest.UsageError(
            f"perflab_undecided={mode!r}: allowed: {', '.join(UNDECIDED_CHOICES)}"
        )
    return str(mode)


def _skip(message: str) -> NoReturn:
    pytest.skip(message)


@pytest.fixture
def perflab_run(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Result]]:
    """``perflab_run(*overrides, budget_s=120, **fields)``: perflab.run in the test's
    temporary directory, bounded by ``budget_s``; returns a Result whose assert_*
    methods follow --perflab-undecided."""
    # "error" is the Result's own way: raise perflab.Undecided
    skip = _undecided_mode(request.config) == "skip"
    runs = iter(range(1_000))

    def run_experiment(
        *overrides: str, budget_s: float = DEFAULT_BUDGET_S, **fields: Any
    ) -> Result:
        if budget_s <= 0:
            raise ValueError(f"budget_s={budget_s}: allowed: seconds > 0")
        if not any(o.startswith("schedule.time_budget_s=") for o in overrides):
            fields.setdefault("schedule__time_budget_s", round(budget_s * ROUNDS_SHARE, 1))
        sweep_dir = tmp_path / f"perflab-{next(runs)}"
        result = run(*overrides, sweep_dir=sweep_dir, timeout_s=budget_s, **fields)
        return replace(result, on_undecided=_skip) if skip else result

    yield run_experiment
