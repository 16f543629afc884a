"""perflab's fused kernels as torch custom ops: named in the profiler, traceable by
torch.compile (``register_fake``), differentiable (``register_autograd``).

``torch.library.custom_op`` + ``register_fake``, not ``triton_op`` + ``wrap_triton``:
the latter failed under torch.compile on CPU (docs/design.md#fused-kernels). The Triton kernels are
imported on the first call of an op, by :func:`load`, which sets TRITON_INTERPRET=1
first when the tensors are on the CPU (see perflab/kernels/_triton.py for when Triton
reads it). Every call of an op's real implementation is counted in :data:`CALLS`: the
trial's evidence that the fused kernels really ran (fake, traced calls do not count).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from types import ModuleType
from typing import Any

import torch

# Tolerances of the fused ops against eager PyTorch in the same dtype, forward and
# backward (torch.testing.assert_close's atol/rtol; tests/test_kernels.py holds the ops
# to them). The kernels compute in fp32 and round once, at the store; eager rounds the
# pre-activation x + b to the input dtype before its GELU, and sums reductions in
# another order, so the two differ by up to about one rounding of the input dtype,
# propagated through GELU (slope <= 1.13) or LayerNorm. Parameter gradients are sums
# over rows, whose rounding error scales with the largest sum rather than with each
# element (eager bf16 was off from an fp64 reference by up to 0.07 on sums of ~15, the
# kernels' path by 0.03): compare them with atol = rtol * max|reference|.
TOLERANCES: dict[torch.dtype, dict[str, float]] = {
    # a few fp32 ulps: the kernels' erf (libdevice on CUDA, math.erf in the interpreter)
    # is not ATen's vectorised erf, and the LayerNorm row sums are a tree reduction
    # where ATen uses Welford; 1e-5 leaves room for rows of a few thousand elements
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    # 2 x bf16's machine epsilon (2**-7): the rounding of x + b in eager bf16 (half an
    # ulp, times GELU's slope) plus the output's own rounding (half an ulp)
    torch.bfloat16: {"atol": 1.6e-2, "rtol": 1.6e-2},
    # 2 x fp16's machine epsilon (2**-10), for the same two roundings
    torch.float16: {"atol": 2e-3, "rtol": 2e-3},
}

# real (not fake) calls of each op in this process
CALLS: Counter[str] = Counter()

_KERNELS = "perflab.kernels._triton"


def load(device: torch.device | str) -> ModuleType:
    """Import the Triton kernels; on CPU in interpreter mode, the only mode Triton has
    there. Raises RuntimeError when they were already imported in compiled mode and the
    tensors are on the CPU (TRITON_INTERPRET is read when the kernels are decorated)."""
    on_cpu = torch.device(device).type == "cpu"
    if on_cpu and _KERNELS not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
    from perflab.kernels import _triton

    if on_cpu and not _triton.interpreted():
        raise RuntimeError(
            "perflab's Triton kernels were imported without TRITON_INTERPRET=1 and cannot "
            "run on the CPU; set TRITON_INTERPRET=1 before importing them"
        )
    return _triton


def interpreted() -> bool | None:
    """Whether the kernels run in Triton's interpreter; None before they were loaded."""
    module = sys.modules.get(_KERNELS)
    return None if module is None else bool(module.interpreted())


def _check_last_dim(name: str, x: torch.Tensor, *params: torch.Tensor) -> None:
    for p in params:
        if p.shape != (x.shape[-1],):
            raise ValueError(
                f"{name}: parameter of shape {tuple(p.shape)} does not match the last "
                f"dimension of the input, {tuple(x.shape)}"
            )


def _leading_dims(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(range(x.dim() - 1))


# --- bias + GELU -------------------------------------------------------------------


@torch.library.custom_op("perflab::bias_gelu", mutates_args=())
def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Exact (erf) GELU of x + bias, bias broadcast over x's last dimension."""
    _check_last_dim("perflab::bias_gelu", x, bias)
    CALLS["bias_gelu"] += 1
    return load(x.device).bias_gelu(x.contiguous(), bias.contiguous())


@bias_gelu.register_fake
def _(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    _check_last_dim("perflab::bias_gelu", x, bias)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("perflab::bias_gelu_backward", mutates_args=())
def bias_gelu_backward(grad: torch.Tensor, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """grad * gelu'(x + bias): the gradient of bias_gelu with respect to x."""
    _check_last_dim("perflab::bias_gelu_backward", x, bias)
    CALLS["bias_gelu_backward"] += 1
    kernels = load(x.device)
    return kernels.bias_gelu_backward(grad.contiguous(), x.contiguous(), bias.contiguous())


@bias_gelu_backward.register_fake
def _(grad: torch.Tensor, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# ctx is typed Any: torch's FunctionCtx does not declare saved_tensors or our attributes
def _bias_gelu_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(*inputs)


def _bias_gelu_grad(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, bias = ctx.saved_tensors
    grad_x = bias_gelu_backward(grad, x, bias)
    # accumulated in fp32 without an fp32 copy of grad_x (grad_x.float() wrote one, twice
    # the size of a bf16 activation, every step); on CUDA ATen reads bf16/fp16 and sums
    # in fp32 in one kernel
    grad_bias = grad_x.sum(_leading_dims(x), dtype=torch.float32).to(bias.dtype)
    return grad_x, grad_bias


bias_gelu.register_autograd(_bias_gelu_grad, setup_context=_bias_gelu_setup)


# --- LayerNorm ---------------------------------------------------------------------


@torch.library.custom_op("perflab::layer_norm", mutates_args=())
def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LayerNorm over x's last dimension; returns the output and, for the backward, the
    fp32 mean and 1/std of every row."""
    _check_last_dim("perflab::layer_norm", x, weight, bias)
    CALLS["layer_norm"] += 1
    kernels = load(x.device)
    return kernels.layer_norm(x.contiguous(), weight.contiguous(), bias.contiguous(), eps)


@layer_norm.register_fake
def _(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_last_dim("perflab::layer_norm", x, weight, bias)
    stats = x.new_empty(x.shape[:-1], dtype=torch.float32)
    return torch.empty_like(x, memory_format=torch.contiguous_format), stats, stats.clone()


def _layer_norm_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    x, weight, bias, _ = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, mean, rstd)
    ctx.bias_dtype = bias.dtype


@torch.library.custom_op("perflab::layer_norm_backward", mutates_args=())
def layer_norm_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of layer_norm for x (in x's dtype), weight and bias (fp32 sums), from
    the forward's fp32 mean and 1/std, in one Triton kernel."""
    _check_last_dim("perflab::layer_norm_backward", x, weight)
    CALLS["layer_norm_backward"] += 1
    kernels = load(x.device)
    return kernels.layer_norm_backward(
        grad.contiguous(), x.contiguous(), weight.contiguous(), mean.contiguous(), rstd.contiguous()
    )


@layer_norm_backward.register_fake
def _(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_last_dim("perflab::layer_norm_backward", x, weight)
    sums = weight.new_empty(weight.shape, dtype=torch.float32)
    return torch.empty_like(x, memory_format=torch.contiguous_format), sums, sums.clone()


def _layer_norm_grad(
    ctx: Any,
    grad_out: torch.Tensor,
    _grad_mean: torch.Tensor | None,
    _grad_rstd: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
    # One Triton kernel (perflab::layer_norm_backward). It was a dozen ATen ops on fp32
    # copies of x and the gradient: on the H100's bf16 transformer step (fused=triton at
    # 0.512x of eager) they took 3.2 ms of device time a step, eager's LayerNorm backward
    # 0.78 ms, and each cost a launch. The mean and 1/std outputs get no gradient.
    x, weight, mean, rstd = ctx.saved_tensors
    grad_x, grad_weight, grad_bias = layer_norm_backward(grad_out, x, weight, mean, rstd)
    return grad_x, grad_weight.to(weight.dtype), grad_bias.to(ctx.bias_dtype), None


layer_norm.register_autograd(_layer_norm_grad, setup_context=_layer_norm_setup)
