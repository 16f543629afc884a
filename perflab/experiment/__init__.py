"""The sweep process: checks every variant, runs the rounds of fresh trial processes,
resumes an interrupted sweep, scales groups out as jobs, and writes the summary and the
report. It never imports torch: trials happen in other processes (perflab.measure)."""

# The public face: what the CLI and the Hydra launcher use; the rest is the sweep's own.
# tests/test_layout.py checks that no other package imports a module not listed.
__all__ = ["invocation", "schedule"]
