"""What an experiment is: the typed config, its vocabulary and rules, the Hydra glue that
composes it, and the plan (variants, cells, baselines) a sweep's jobs make of it."""

# The public face: the modules the other packages use; rules is the config's own.
# tests/test_layout.py checks that no other package imports a module not listed.
__all__ = ["compose", "devices", "hf", "plan", "schema", "user_code", "bounds", "vocabulary"]
