"""The Triton kernels and their launchers. Imported only through ``ops.load``.

When TRITON_INTERPRET is read (triton 3.7.1, read in its source and checked by
tests/test_kernels.py): ``triton.knobs.runtime.interpret`` reads os.environ afresh on
every access, but the only place that chooses between the interpreter and the compiler
is the ``@triton.jit`` decorator (triton/runtime/jit.py, ``jit.decorator``): it returns
an ``InterpretedFunction`` or a ``JITFunction`` once, at decoration time, i.e. when the
module holding the kernel is imported; nothing re-reads it at launch. Two consequences:

- This module must be imported after the variable is set; setting it later changes
  nothing, and a ``JITFunction`` launched on CPU tensors fails for want of a GPU driver.
  ``ops.load`` sets it (CPU only) before the first import, and the kernel objects say
  afterwards which mode they got (``interpreted``).
- Triton's own ``@jit`` library functions (``tl.sum``, ``tl.max``, ``tl.cdiv``, ...) were
  decorated when ``triton.language`` was first imported, and ``import torch._dynamo``
  imports it (perflab's fork server preloads dynamo; ``torch.compiler.disable`` in
  perflab/workloads/models.py imports it too), so in a perflab process they are compiled
  ``JITFunction``s, and calling one inside an interpreted kernel raises "Cannot call
  @triton.jit'd outside of the scope of a kernel". The kernels therefore use builtins
  only, and sum with ``tl.reduce(x, 0, _sum_combine)``: what ``tl.sum`` does inside,
  and the combine function the interpreter recognises (by identity) to sum with numpy.

Every kernel loads in the input's dtype, computes in fp32 and stores in the output's
dtype, so fp32, bf16 and fp16 inputs share one code path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# private, pinned by constraints/cpu.txt (triton==3.7.1); see the module docstring
from triton.language.standard import _sum_combine

# 1/sqrt(2) and 1/sqrt(2*pi), for the exact (erf) GELU and its derivative; constexpr,
# as the compiler allows no other globals inside a kernel (the interpreter would)
_SQRT1_2 = tl.constexpr(0.7071067811865476)
_INV_SQRT_2PI = tl.constexpr(0.3989422804014327)

# Elements per program of the elementwise kernels: a power of two that fills a GPU's
# vector units; in the interpreter fewer, larger programs are faster (it runs each
# program as numpy operations on whole blocks).
BLOCK = 1024


@triton.jit
def perflab_bias_gelu_fwd_kernel(x_ptr, b_ptr, out_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0).to(tl.float32)
    y = x + b
    out = 0.5 * y * (1.0 + tl.math.erf(y * _SQRT1_2))
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def perflab_bias_gelu_bwd_kernel(
    g_ptr, x_ptr, b_ptr, out_ptr, n_elements, n_cols, BLOCK: tl.constexpr
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0).to(tl.float32)
    y = x + b
    # d/dy [y * Phi(y)] = Phi(y) + y * phi(y)
    cdf = 0.5 * (1.0 + tl.math.erf(y * _SQRT1_2))
    pdf = tl.exp(-0.5 * y * y) * _INV_SQRT_2PI
    tl.store(out_ptr + offs, (g * (cdf + y * pdf)).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def perflab_layer_norm_fwd_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, mean_ptr, rstd_ptr, n_cols, eps, BLOCK: tl.constexpr
):
    # one program per row; BLOCK >= n_cols, so the whole row sits in registers
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.reduce(x, 0, _sum_combine) / n_cols
    centred = tl.where(mask, x - mean, 0.0)
    var = tl.reduce(centred * centred, 0, _sum_combine) / n_cols  # biased, as torch's
    rstd = tl.math.rsqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    out = centred * rstd * w + b
    tl.store(out_ptr + row * n_cols + cols, out.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


def interpreted() -> bool:
    """Whether the kernels were decorated in interpreter mode (decided at import)."""
    return type(perflab_bias_gelu_fwd_kernel).__name__ == "InterpretedFunction"


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x + bias) for a contiguous x whose last dimension is bias's length."""
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        perflab_bias_gelu_fwd_kernel[(triton.cdiv(n, BLOCK),)](
            x, bias, out, n, bias.numel(), BLOCK=BLOCK
        )
    return out


def bias_gelu_backward(grad: torch.Tensor, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """grad * gelu'(x + bias), in x's dtype."""
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        perflab_bias_gelu_bwd_kernel[(triton.cdiv(n, BLOCK),)](
            grad, x, bias, out, n, bias.numel(), BLOCK=BLOCK
        )
    return out


def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LayerNorm over the last dimension of a contiguous x; also the fp32 mean and
    1/std of every row, which the backward reuses."""
    n_cols = x.shape[-1]
    rows = x.numel() // n_cols if n_cols else 0
    out = torch.empty_like(x)
    mean = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    if rows:
        perflab_layer_norm_fwd_kernel[(rows,)](
            x, weight, bias, out, mean, rstd, n_cols, eps, BLOCK=triton.next_power_of_2(n_cols)
        )
    return out, mean, rstd
