"""The Triton kernels (bias + GELU forward and backward, LayerNorm forward and backward)
and their launchers. Imported only through ``ops.load``.

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

import functools

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


@triton.jit
def perflab_layer_norm_bwd_kernel(
    g_ptr,
    x_ptr,
    w_ptr,
    mean_ptr,
    rstd_ptr,
    dx_ptr,
    dw_ptr,
    db_ptr,
    n_rows,
    n_cols,
    rows_per_program,
    BLOCK: tl.constexpr,
):
    # Each program takes rows_per_program consecutive rows: the input gradient of each
    # row in one pass over it, and the weight and bias gradients summed over its rows in
    # registers, written once as the program's row of (programs, n_cols) fp32 partials
    # (summed by the launcher): no atomics, no second pass over x and the gradient.
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.full([BLOCK], 0.0, tl.float32)  # tl.zeros is @jit: see the docstring
    db = tl.full([BLOCK], 0.0, tl.float32)
    for i in range(0, rows_per_program):
        row = pid * rows_per_program + i
        live = row < n_rows
        m = mask & live
        x = tl.load(x_ptr + row * n_cols + cols, mask=m, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * n_cols + cols, mask=m, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + row, mask=live, other=0.0)
        rstd = tl.load(rstd_ptr + row, mask=live, other=0.0)
        xhat = tl.where(m, (x - mean) * rstd, 0.0)
        gw = g * w
        # dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), the means over the row
        c1 = tl.reduce(xhat * gw, 0, _sum_combine) / n_cols
        c2 = tl.reduce(gw, 0, _sum_combine) / n_cols
        dx = (gw - (xhat * c1 + c2)) * rstd
        tl.store(dx_ptr + row * n_cols + cols, dx.to(dx_ptr.dtype.element_ty), mask=m)
        dw += g * xhat
        db += g
    tl.store(dw_ptr + pid * n_cols + cols, dw, mask=mask)
    tl.store(db_ptr + pid * n_cols + cols, db, mask=mask)


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


def _row_warps(block: int) -> int:
    """Warps for a program that holds one row of ``block`` elements: one per 256
    elements, between 1 and 8 (the rule of Triton's LayerNorm tutorial). Triton's default
    of 4 leaves warps without work on narrow rows (the small transformer's 128) and runs
    out of registers on rows of several thousand."""
    return min(max(block // 256, 1), 8)


# Programs of the LayerNorm backward per streaming multiprocessor: each keeps a row of
# partial weight/bias sums, so more programs mean more partials to add up at the end;
# 4 per SM keeps the loads of several rows in flight on every SM.
_LN_BWD_PROGRAMS_PER_SM = 4
# in Triton's interpreter every program is a Python loop; a few suffice
_LN_BWD_PROGRAMS_INTERPRETED = 8


@functools.cache
def _ln_bwd_programs(device: torch.device) -> int:
    if device.type != "cuda":
        return _LN_BWD_PROGRAMS_INTERPRETED
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return _LN_BWD_PROGRAMS_PER_SM * sms


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
        block = triton.next_power_of_2(n_cols)
        perflab_layer_norm_fwd_kernel[(rows,)](
            x, weight, bias, out, mean, rstd, n_cols, eps, BLOCK=block, num_warps=_row_warps(block)
        )
    return out, mean, rstd


def layer_norm_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of LayerNorm with respect to x (in x's dtype), weight and bias (fp32),
    from contiguous tensors and the forward's fp32 mean and 1/std."""
    n_cols = x.shape[-1]
    rows = x.numel() // n_cols if n_cols else 0
    dx = torch.empty_like(x)
    if not rows:
        zeros = torch.zeros(n_cols, dtype=torch.float32, device=x.device)
        return dx, zeros, zeros.clone()
    per_program = triton.cdiv(rows, min(rows, _ln_bwd_programs(x.device)))
    programs = triton.cdiv(rows, per_program)
    partial_dw = torch.empty((programs, n_cols), dtype=torch.float32, device=x.device)
    partial_db = torch.empty_like(partial_dw)
    block = triton.next_power_of_2(n_cols)
    perflab_layer_norm_bwd_kernel[(programs,)](
        grad,
        x,
        weight,
        mean,
        rstd,
        dx,
        partial_dw,
        partial_db,
        rows,
        n_cols,
        per_program,
        BLOCK=block,
        num_warps=_row_warps(block),
    )
    return dx, partial_dw.sum(0), partial_db.sum(0)
