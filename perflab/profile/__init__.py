"""The profiled pass and its evidence: capturing a trace in its own trial process, naming
kernel families, attributing CUDA kernels to the operators that launched them, and the
diagnosis ("why") drawn from two variants' profiles."""

# The public face: every module (capture only from perflab.measure).
# tests/test_layout.py checks that no other package imports a module not listed.
__all__ = ["attribution", "capture", "diagnosis", "families", "operators", "trace_events"]
