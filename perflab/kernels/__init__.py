"""perflab's own fused Triton kernels, the knob ``fused=triton``.

- ``_triton.py``: the ``@triton.jit`` kernels (bias + exact GELU forward and backward,
  LayerNorm forward and backward), imported lazily: Triton is optional, and on CPU it
  must be told to interpret before the kernels are decorated.
- ``ops.py``: the kernels as torch custom ops (``perflab::bias_gelu``,
  ``perflab::bias_gelu_backward``, ``perflab::layer_norm``,
  ``perflab::layer_norm_backward``), their tolerance table and the call counter behind
  the trial's evidence.

Not a speed-up as measured: on an H100 the bf16 transformer training step ran 0.70x of
eager with them (benchmarks/kernels.py; benchmarks/RESULTS.md, "perflab's fused kernels
against eager and torch.compile"; the reasons: docs/design.md).
- ``modules.py``: FusedLinearGELU, FusedLayerNorm and ``fuse_model``.

Importing this package needs torch, not Triton.
"""

from perflab.kernels.modules import FusedLayerNorm, FusedLinearGELU, fuse_model
from perflab.kernels.ops import CALLS, TOLERANCES, interpreted, load

__all__ = [
    "CALLS",
    "TOLERANCES",
    "FusedLayerNorm",
    "FusedLinearGELU",
    "fuse_model",
    "interpreted",
    "load",
]
