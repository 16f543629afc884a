"""Pure statistics over the records of a sweep: per-trial summaries, paired comparisons,
verdicts, carry-over, the numerics check, health flags and the simulator that measures
the method's error rates. ``python -m perflab.report SWEEP_DIR`` recomputes summary.json."""
