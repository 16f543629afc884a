"""perflab: declarative, statistically honest A/B experiments for PyTorch optimizations.

The data flows down the sub-packages (docs/design.md#data-flow): config (what the
experiment is) -> experiment (the sweep process: rounds of fresh trial processes) ->
measure (one trial process: the timed step) -> records -> analysis (statistics, verdicts)
-> report; profile holds the profiled pass and its evidence. Importing this package
imports no torch. ``StepContext`` is what your own step's factory receives (perflab.step).
"""

from perflab.step import StepContext

__all__ = ["StepContext"]
__version__ = "0.1.0"
