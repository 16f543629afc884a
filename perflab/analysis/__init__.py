"""Pure statistics over the records of a sweep: per-trial summaries, paired comparisons,
verdicts, carry-over, the numerics check, health flags and the simulator that measures
the method's error rates. ``python -m perflab.report SWEEP_DIR`` recomputes summary.json."""

# The public face: the modules the other packages use (the report, the sweep, the
# trial's steady window); carryover, health and simulation are the analysis's own.
# tests/test_layout.py checks that no other package imports a module not listed.
__all__ = [
    "__main__",
    "gate_rates",
    "numerics",
    "stats",
    "steady",
    "summarize",
    "sweep",
    "trials",
    "variants",
    "sessions",
]
