"""The process boundary: the fork server and its warm workers (isolation), what a
trial process is asked to do (trial_request), and the console a sweep prints on."""

# The public face: every module: the process boundary is used from both sides.
# tests/test_layout.py checks that no other package imports a module not listed.
__all__ = ["console_streams", "cuda_probe", "isolation", "shipped", "trial_request"]
