"""The trial process: resolves the settings on this machine, builds the workload, applies
the knobs, times the step and writes one record. The only part of perflab that runs the
user's model."""
