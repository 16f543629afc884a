"""The trial process: resolves the settings on this machine, builds the workload, applies
the knobs, times the step and writes one record. The only part of perflab that runs the
user's model."""

# The public face: what perflab.process starts in a trial process, by name; the rest is
# the trial's own. tests/test_layout.py checks that no other package imports a module
# not listed.
__all__ = ["preflight", "profiling_pass", "resolve", "trial"]
