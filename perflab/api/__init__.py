"""perflab from Python: ``perflab.run`` runs the experiment ``perflab -m`` runs and
returns its typed summary (docs/python.md).

    import perflab
    result = perflab.run("amp=off,bf16", preset="quick")
    result.comparison("amp=bf16").verdict      # "FASTER", "EQUIVALENT", ...
    result.assert_faster("amp=bf16", by=0.05)  # AssertionError, or Undecided
    result.to_frame()                          # pandas, one row per comparison

The pytest plugin (perflab.api.pytest_plugin) gives tests a ``perflab_run`` fixture.
"""

from perflab.api.expect import Check
from perflab.api.result import ExperimentError, Result, Undecided, load_result
from perflab.api.running import run

__all__ = ["Check", "ExperimentError", "Result", "Undecided", "load_result", "run"]
