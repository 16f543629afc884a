"""The profiled pass and its evidence: capturing a trace in its own trial process, naming
kernel families, attributing CUDA kernels to the operators that launched them, and the
diagnosis ("why") drawn from two variants' profiles."""
