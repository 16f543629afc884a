"""Did the optimization change the numbers? Each variant's probe against its baseline's.

Both probes ran the same seeded weights on the same fixed batch (perflab.measure.trial), so any
difference comes from the variant's knobs: reduced precision, a different kernel, a
fused op. Tolerances depend on the lower-precision dtype of the pair: bf16 keeps 8
mantissa bits (relative step 2^-8 ~ 3.9e-3), fp16 11 (~4.9e-4), fp32 24; a whole forward
pass accumulates many such roundings, hence the headroom below.
"""

from __future__ import annotations

import math

from perflab.formats.records import Probe
from perflab.formats.summary import Numerics

# Largest allowed relative error of the outputs, measured against the largest output
# magnitude, by the less precise output dtype of the pair.
REL_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
COSINE_MIN = 0.999


def compare_probes(base: Probe, variant: Probe) -> Numerics:
    """Max abs / rel error and cosine similarity of the sampled outputs, loss difference,
    and a pass/fail against the dtype's tolerance. A diverged model's NaN is kept as it
    is (summary.json writes null for it: perflab.analysis.summarize)."""
    if base.output_shape != variant.output_shape:
        return Numerics(
            ok=False,
            reason=f"output shapes differ: {base.output_shape} vs {variant.output_shape}",
        )
    a, b = base.output_sample, variant.output_sample
    diff = [abs(x - y) for x, y in zip(a, b, strict=True)]
    scale = max(max((abs(x) for x in a), default=0.0), 1e-12)
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    cosine = dot / norms if norms else 1.0
    dtype = _least_precise(base.output_dtype, variant.output_dtype)
    # an unknown dtype (_least_precise ranks it last) gets the loosest tolerance
    tolerance = REL_TOLERANCE.get(dtype, max(REL_TOLERANCE.values()))
    max_rel = max(diff, default=0.0) / scale
    return Numerics(
        max_abs_err=max(diff, default=0.0),
        max_rel_err=max_rel,
        cosine=cosine,
        loss_diff=variant.loss - base.loss,
        dtype=dtype,
        tolerance=tolerance,
        ok=max_rel <= tolerance and cosine >= COSINE_MIN and math.isfinite(variant.loss),
    )


def _least_precise(a: str, b: str) -> str:
    order = ["float32", "float16", "bfloat16"]
    return max((a, b), key=lambda d: order.index(d) if d in order else len(order))
