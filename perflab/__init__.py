"""perflab: declarative, statistically honest A/B experiments for PyTorch optimizations.

The data flows down the sub-packages (docs/design.md#data-flow): config (what the
experiment is) -> experiment (the sweep process: rounds of fresh trial processes) ->
measure (one trial process: the timed step) -> records -> analysis (statistics, verdicts)
-> report; profile holds the profiled pass and its evidence. Importing this package
imports no torch. ``StepContext`` is what your own step's factory receives (perflab.step);
``perflab.run`` runs an experiment from Python (perflab.api, docs/python.md).
"""

from typing import TYPE_CHECKING, Any

from perflab.step import StepContext

if TYPE_CHECKING:
    from perflab.api import Check, ExperimentError, Result, Undecided, load_result, run

# perflab.api's names, imported on first use: a user's step module imports perflab for
# StepContext, in every settings-check process, and need not pay ~90 ms for the API
_API = ("Check", "ExperimentError", "Result", "Undecided", "load_result", "run")

__all__ = [
    "StepContext",
    "Check",
    "ExperimentError",
    "Result",
    "Undecided",
    "load_result",
    "run",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _API:
        from perflab import api

        return getattr(api, name)
    raise AttributeError(f"module 'perflab' has no attribute {name!r}")
