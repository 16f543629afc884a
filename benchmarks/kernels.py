"""perflab's fused Triton kernels (fused=triton) against eager PyTorch and torch.compile.

    python benchmarks/kernels.py [--dtypes fp32,bf16] [--rep-ms 200] [--no-step]

A kernel shipped as an optimization has to at least match eager on the step it is for,
and say how it compares with Inductor's own fusion. On a CUDA GPU this prints

1. each fused op alone, forward and forward+backward, at the shapes of the GPU-bound
   transformer (the cuda defaults: batch 32, seq_len 256, d_model 1024, so 8192 rows;
   bias+GELU on the 4096-wide FFN activation, LayerNorm on the 1024-wide residual):
   perflab's op, the eager ops it replaces, and those eager ops under torch.compile;
2. that transformer's forward and training step (cross-entropy, backward, SGD with
   momentum, as a perflab trial runs it): eager, fused=triton (perflab.kernels.fuse_model),
   torch.compile of the eager model (Inductor's fusion), and torch.compile of the fused one;

in fp32 and under bf16 autocast, timed with triton.testing.do_bench (CUDA events, L2
flushed between runs; median and 20th/80th percentiles, ms). "vs eager" is eager's median
over the variant's: above 1 the variant is faster. Without CUDA it prints one line and
exits 2: on a CPU the kernels only run in Triton's interpreter, whose timing means nothing.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F

# the cuda defaults' transformer (conf/model/transformer.yaml) and batch
BATCH, SEQ, D_MODEL, HEADS, LAYERS, VOCAB = 32, 256, 1024, 16, 4, 1024
ROWS = BATCH * SEQ
DEVICE = "cuda"  # a module constant so a smoke test can point it at the CPU's interpreter
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def measure(fn: Callable[[], Any], rep_ms: int, grads: list[torch.Tensor] | None = None) -> Any:
    """(median, p20, p80) in ms. A few calls first: compilation and autotuning happen
    there, not in do_bench's own estimate of how many runs fit in rep_ms."""
    from triton.testing import do_bench

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    return do_bench(fn, warmup=25, rep=rep_ms, grad_to_none=grads, quantiles=[0.5, 0.2, 0.8])


def op_cases(dtype: torch.dtype) -> list[tuple[str, dict[str, Callable[..., Any]], list[Any]]]:
    """(name, variant -> function, inputs) for each fused op, with the eager ops it replaces."""
    from perflab.kernels import ops

    def bias_gelu_eager(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.gelu(x + b)

    def ln_eager(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)

    def ln_fused(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ops.layer_norm(x, w, b, 1e-5)[0]

    def tensor(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=DEVICE, dtype=dtype).requires_grad_()

    return [
        (
            f"bias+GELU [{ROWS}, {4 * D_MODEL}]",
            {"eager": bias_gelu_eager, "fused": ops.bias_gelu},
            [tensor(ROWS, 4 * D_MODEL), tensor(4 * D_MODEL)],
        ),
        (
            f"LayerNorm [{ROWS}, {D_MODEL}]",
            {"eager": ln_eager, "fused": ln_fused},
            [tensor(ROWS, D_MODEL), tensor(D_MODEL), tensor(D_MODEL)],
        ),
    ]


def bench_ops(dtype_name: str, rep_ms: int) -> list[list[str]]:
    rows = []
    for name, variants, inputs in op_cases(DTYPES[dtype_name]):
        fns = {**variants, "compile": torch.compile(variants["eager"])}
        with torch.no_grad():
            error = (fns["fused"](*inputs) - fns["eager"](*inputs)).abs().max().item()
        note = f"max|fused-eager| {error:.2g}"
        rows.append(row(f"{name} fwd", dtype_name, time_op(fns, inputs, False, rep_ms), note))
        rows.append(row(f"{name} fwd+bwd", dtype_name, time_op(fns, inputs, True, rep_ms), note))
    return rows


def time_op(
    fns: dict[str, Callable[..., Any]], inputs: list[Any], backward: bool, rep_ms: int
) -> dict[str, Any]:
    grad = torch.randn_like(inputs[0])
    times = {}
    for variant, fn in fns.items():

        def call(fn: Callable[..., Any] = fn) -> None:
            out = fn(*inputs)
            if backward:
                out.backward(grad)

        with torch.enable_grad() if backward else torch.no_grad():
            times[variant] = measure(call, rep_ms, inputs if backward else None)
    return times


def transformer_variants() -> dict[str, torch.nn.Module]:
    from perflab.kernels import fuse_model
    from perflab.workloads.models import transformer

    torch.manual_seed(0)
    eager = transformer(VOCAB, SEQ, D_MODEL, HEADS, LAYERS).to(DEVICE)
    fused = copy.deepcopy(eager)
    fuse_model(fused)
    compiled: Any = torch.compile(copy.deepcopy(eager))  # Inductor's own fusion
    compiled_fused: Any = torch.compile(copy.deepcopy(fused))  # Inductor around the ops
    return {"eager": eager, "fused": fused, "compile": compiled, "fused+compile": compiled_fused}


def bench_step(dtype_name: str, rep_ms: int) -> list[list[str]]:
    models = transformer_variants()
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), device=DEVICE)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), device=DEVICE)
    bf16 = DTYPES[dtype_name] == torch.bfloat16
    autocast = (
        (lambda: torch.autocast(DEVICE, dtype=torch.bfloat16)) if bf16 else (lambda: nullcontext())
    )
    forward, train = {}, {}
    for variant, model in models.items():
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def fwd(model: torch.nn.Module = model) -> None:
            with torch.no_grad(), autocast():
                model(tokens)

        def step(model: torch.nn.Module = model, opt: torch.optim.Optimizer = opt) -> None:
            with autocast():
                loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        forward[variant] = measure(fwd, rep_ms)
        train[variant] = measure(step, rep_ms)
    return [
        row("transformer forward", dtype_name, forward, ""),
        row("transformer train step", dtype_name, train, ""),
    ]


def row(what: str, dtype: str, times: dict[str, Any], note: str) -> list[str]:
    eager = times["eager"][0]
    cells = [
        f"{name} {t[0]:.3f} [{t[1]:.3f}, {t[2]:.3f}] ({eager / t[0]:.2f}x)"
        for name, t in times.items()
    ]
    return [what, dtype, *cells, note]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16")
    parser.add_argument("--rep-ms", type=int, default=200, help="do_bench's time per case")
    parser.add_argument("--no-step", action="store_true", help="only the ops alone")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(
            "benchmarks/kernels.py needs a CUDA GPU (torch.cuda.is_available() is False "
            "here): on a CPU perflab's Triton kernels run only in Triton's interpreter, "
            "whose timings mean nothing"
        )
        return 2
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("benchmarks/kernels.py: unset TRITON_INTERPRET: it times the compiled kernels")
        return 2
    from perflab.kernels import interpreted, load

    load("cuda")
    assert interpreted() is False
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        parser.error(f"--dtypes {','.join(unknown)}: allowed: {', '.join(DTYPES)}")
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"triton {__import__('triton').__version__}; ms: median [p20, p80] (eager/variant)"
    )
    for dtype in dtypes:
        rows = bench_ops(dtype, args.rep_ms)
        if not args.no_step:
            rows += bench_step(dtype, args.rep_ms)
        for r in rows:
            print(" | ".join(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
