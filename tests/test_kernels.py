"""perflab's fused Triton kernels (fused=triton), on CPU in Triton's interpreter: numerics
against eager PyTorch, the custom ops, fuse_model, compile, profiler, a whole trial."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from sweeps import make_sweep
from tiny import TINY
from torch import nn

from perflab.errors import ConfigError
from perflab.formats.records import load_record, write_record
from perflab.formats.trial_parts import Invocation, KnobEvidence
from perflab.kernels import CALLS, TOLERANCES, FusedLinearGELU, fuse_model, ops
from perflab.measure.resolve import resolve
from perflab.measure.trial import run_trial
from perflab.process.trial_request import TrialRequest
from perflab.report import load, write_report
from perflab.report.markdown import INTERPRETER_LABEL
from perflab.workloads.models import convnet, mlp, transformer

DTYPES = list(TOLERANCES)


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, **TOLERANCES[expected.dtype])


def assert_sum_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Parameter gradients are sums over rows: atol scales with the largest sum
    (perflab/kernels/ops.py, TOLERANCES)."""
    rtol = TOLERANCES[expected.dtype]["rtol"]
    atol = rtol * float(expected.abs().max())
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)


def leaves(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_() for t in tensors]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bias_gelu_forward_and_backward_match_eager(dtype):
    torch.manual_seed(0)
    x, b = torch.randn(4, 64, dtype=dtype) * 2, torch.randn(64, dtype=dtype)
    grad = torch.randn(4, 64, dtype=dtype)
    fx, fb = leaves(x, b)
    ex, eb = leaves(x, b)
    fused, eager = ops.bias_gelu(fx, fb), F.gelu(ex + eb)
    fused.backward(grad)
    eager.backward(grad)
    assert fused.dtype == dtype and fb.grad is not None and fb.grad.dtype == dtype
    assert_close(fused, eager)
    assert_close(fx.grad, ex.grad)
    assert_sum_close(fb.grad, eb.grad)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layer_norm_forward_and_backward_match_eager(dtype):
    torch.manual_seed(0)
    x = torch.randn(3, 5, 32, dtype=dtype) * 3 + 1
    w, b = torch.randn(32, dtype=dtype), torch.randn(32, dtype=dtype)
    grad = torch.randn(3, 5, 32, dtype=dtype)
    fx, fw, fb = leaves(x, w, b)
    ex, ew, eb = leaves(x, w, b)
    fused, mean, rstd = ops.layer_norm(fx, fw, fb, 1e-5)
    eager = F.layer_norm(ex, (32,), ew, eb, 1e-5)
    fused.backward(grad)
    eager.backward(grad)
    assert fused.dtype == dtype and mean.dtype == rstd.dtype == torch.float32
    assert_close(fused, eager)
    assert_close(fx.grad, ex.grad)
    assert_sum_close(fw.grad, ew.grad)
    assert_sum_close(fb.grad, eb.grad)


def test_mixed_dtypes_of_autocast_compute_in_fp32_and_keep_the_inputs_dtypes():
    # under autocast the matmul hands a bf16 activation to an fp32 bias
    x, b = leaves(torch.randn(4, 64, dtype=torch.bfloat16), torch.randn(64))
    out = ops.bias_gelu(x, b)
    out.float().sum().backward()
    assert out.dtype == x.grad.dtype == torch.bfloat16 and b.grad.dtype == torch.float32
    assert_close(out, F.gelu(x.detach().float() + b.detach()).bfloat16())


def test_a_parameter_that_does_not_fit_is_refused():
    with pytest.raises(ValueError, match="does not match the last dimension"):
        ops.bias_gelu(torch.randn(4, 64), torch.randn(63))


@pytest.mark.parametrize(
    ("op", "args"),
    [
        (ops.bias_gelu, lambda: leaves(torch.randn(4, 64), torch.randn(64))),
        (ops.bias_gelu_backward, lambda: [torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)]),
        (
            ops.layer_norm,
            lambda: [*leaves(torch.randn(3, 5, 32), torch.randn(32), torch.randn(32)), 1e-5],
        ),
    ],
    ids=["bias_gelu", "bias_gelu_backward", "layer_norm"],
)
def test_opcheck(op, args):
    # schema, autograd registration, fake tensor and AOT dispatch (what compile needs)
    torch.library.opcheck(op, args())


def test_triton_reads_triton_interpret_when_the_kernels_are_decorated():
    # A fresh process without the variable: the kernels get compiled mode, and setting
    # the variable afterwards changes nothing (perflab/kernels/_triton.py says why).
    script = textwrap.dedent(
        """
        import os
        import perflab.kernels._triton as k
        from perflab.kernels import ops
        before = k.interpreted()
        os.environ["TRITON_INTERPRET"] = "1"
        try:
            ops.load("cpu")
            loaded = "loaded"
        except RuntimeError as exc:
            loaded = str(exc)
        print(before, k.interpreted(), loaded)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("False False perflab's Triton kernels were imported without")
    assert ops.interpreted() is True  # this process loaded them through ops.load("cpu")


def test_the_kernels_compile_for_cuda_without_a_gpu(tmp_path):
    # Triton's compiler and ptxas run without a GPU: the native path at least compiles
    # (it rejects what the interpreter forgives, such as non-constexpr globals).
    script = textwrap.dedent(
        """
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        import perflab.kernels._triton as k
        assert not k.interpreted()
        ptrs = lambda names, t: {n: "*" + t for n in names}
        cases = [
            (k.perflab_bias_gelu_fwd_kernel, ptrs(["x_ptr", "out_ptr"], "bf16")
             | {"b_ptr": "*fp32", "n_elements": "i32", "n_cols": "i32"}, 1024),
            (k.perflab_bias_gelu_bwd_kernel, ptrs(["g_ptr", "x_ptr", "b_ptr", "out_ptr"], "fp16")
             | {"n_elements": "i32", "n_cols": "i32"}, 1024),
            (k.perflab_layer_norm_fwd_kernel,
             ptrs(["x_ptr", "w_ptr", "b_ptr", "out_ptr", "mean_ptr", "rstd_ptr"], "fp32")
             | {"n_cols": "i32", "eps": "fp32"}, 256),
        ]
        for fn, signature, block in cases:
            source = ASTSource(
                fn=fn,
                signature={**signature, "BLOCK": "constexpr"},
                constexprs={(fn.arg_names.index("BLOCK"),): block},
            )
            print(triton.compile(source, target=GPUTarget("cuda", 90, 32)).metadata.name)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [
        "perflab_bias_gelu_fwd_kernel",
        "perflab_bias_gelu_bwd_kernel",
        "perflab_layer_norm_fwd_kernel",
    ]


def test_fuse_model_on_the_mlp_shares_weights_and_matches_outputs_and_gradients():
    torch.manual_seed(0)
    model = mlp(in_features=16, hidden=32, depth=2, num_classes=10)
    reference = copy.deepcopy(model)
    params = {name: id(p) for name, p in model.named_parameters()}
    keys = list(model.state_dict())
    assert fuse_model(model) == ["0+1: Linear+GELU", "2+3: Linear+GELU"]
    assert isinstance(model[0], FusedLinearGELU) and isinstance(model[1], nn.Identity)
    assert {name: id(p) for name, p in model.named_parameters()} == params
    assert list(model.state_dict()) == keys
    _same_outputs_and_gradients(model, reference, torch.randn(4, 16))


def test_fuse_model_on_the_transformer_fuses_its_ffn_and_layer_norms():
    torch.manual_seed(0)
    model = transformer(vocab_size=50, seq_len=8, d_model=32, heads=2, layers=2)
    reference = copy.deepcopy(model)
    keys = list(model.state_dict())
    assert fuse_model(model) == [
        "blocks.0.ln1: LayerNorm",
        "blocks.0.ln2: LayerNorm",
        "blocks.0.ffn.0+1: Linear+GELU",
        "blocks.1.ln1: LayerNorm",
        "blocks.1.ln2: LayerNorm",
        "blocks.1.ffn.0+1: Linear+GELU",
        "ln: LayerNorm",
    ]
    assert list(model.state_dict()) == keys
    calls = CALLS.copy()
    _same_outputs_and_gradients(model, reference, torch.randint(0, 50, (2, 8)))
    assert CALLS["layer_norm"] - calls["layer_norm"] == 5
    assert CALLS["bias_gelu_backward"] - calls["bias_gelu_backward"] == 2


def _same_outputs_and_gradients(model: nn.Module, reference: nn.Module, x: torch.Tensor) -> None:
    out, expected = model(x), reference(x)
    assert_close(out, expected)
    out.square().mean().backward()
    expected.square().mean().backward()
    grads = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        assert_sum_close(p.grad, grads[name].grad)


def test_the_convnet_has_nothing_to_fuse():
    assert fuse_model(convnet(width=4, stages=1, blocks=1, image_size=8, num_classes=10)) == []


def test_compiled_fused_mlp_traces_the_custom_op():
    torch.manual_seed(0)
    model = mlp(in_features=16, hidden=32, depth=1, num_classes=10)
    reference = copy.deepcopy(model)
    fuse_model(model)
    x = torch.randn(4, 16)
    calls = CALLS["bias_gelu"]
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)  # a graph break would fail here
    assert_close(compiled(x), reference(x))
    assert CALLS["bias_gelu"] == calls + 1  # the compiled graph calls the real op


def test_the_profiler_names_the_custom_op():
    model = mlp(in_features=16, hidden=32, depth=1, num_classes=10)
    fuse_model(model)
    with torch.profiler.profile() as prof:
        model(torch.randn(4, 16)).sum().backward()
    table = prof.key_averages().table(row_limit=-1)
    assert "perflab::bias_gelu" in table and "perflab::bias_gelu_backward" in table


def test_fused_without_triton_is_a_config_error_and_on_cpu_a_warning(make_config, monkeypatch):
    def warnings(fused: str) -> list[str]:
        return resolve(make_config("device=cpu", f"fused={fused}")).warnings

    assert any("Triton's interpreter" in w for w in warnings("triton"))
    assert not any("Triton" in w for w in warnings("off"))
    real = __import__("importlib.util").util.find_spec
    monkeypatch.setattr(
        "perflab.measure.resolve.importlib.util.find_spec",
        lambda name, *a: None if name == "triton" else real(name, *a),
    )
    with pytest.raises(ConfigError, match=r"fused=triton: .*pip install triton"):
        resolve(make_config("device=cpu", "fused=true"))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["train", "infer"])
def test_a_fused_trial_proves_the_kernels_ran_and_flags_its_timing(tmp_path, make_config, mode):
    cfg = make_config(*TINY, "fused=triton", f"mode={mode}")
    path = tmp_path / "000.json"
    status = run_trial(TrialRequest(cfg, {}, str(path), Invocation(cwd=str(tmp_path))))
    record = load_record(path)
    fused = record.evidence["fused"]
    assert status == "ok", record.error
    assert fused.ok is True and fused.observed == ["0+1: Linear+GELU"]
    assert fused.op_calls is not None and fused.op_calls["perflab::bias_gelu"] > 0
    assert ("perflab::bias_gelu_backward" in fused.op_calls) == (mode == "train")
    assert fused.interpreted is True and fused.timing_representative is False
    assert "timing not representative" in fused.detail
    assert any("Triton's interpreter" in w for w in record.warnings)
    assert record.probe is not None and (record.probe.grad_norm is not None) == (mode == "train")


def test_the_fused_experiment_runs_the_mlp(make_config):
    assert make_config("+experiment=fused").model._target_.endswith(".mlp")


def test_the_report_labels_interpreted_variants(tmp_path):
    # the label comes from the records' evidence, whatever was swept
    plan = make_sweep(tmp_path)
    treated = next(v for v in plan.variants if v.name == "1")
    for path in sorted((tmp_path / treated.dir / "trials").glob("*.json")):
        record = load_record(path)
        record.evidence["fused"] = KnobEvidence(
            requested="triton", observed=[], ok=True, detail="", timing_representative=False
        )
        write_record(path, record)
    lines = write_report(load(tmp_path)).read_text().splitlines()
    labelled = [line for line in lines if INTERPRETER_LABEL in line]
    assert len(labelled) == 2, labelled  # the headline and the variant's health flags
    assert labelled[0].startswith(f"- {treated.label} vs amp=off")
    assert labelled[1] == f"- {treated.label}: {INTERPRETER_LABEL}"
    assert lines[lines.index(labelled[1]) - 2] == "Health flags:"


@pytest.mark.parametrize("shape", [(37, 48), (0, 16), (1, 1000)], ids=str)
def test_layer_norm_backward_kernel_covers_partial_programs_odd_widths_and_no_rows(shape):
    # rows split over programs with a shorter last one, a width that is not a power of
    # two, no rows at all, one row: each against eager's gradients
    torch.manual_seed(0)
    x = torch.randn(*shape) * 2 + 0.5
    w, b = torch.randn(shape[-1]), torch.randn(shape[-1])
    grad = torch.randn(*shape)
    fx, fw, fb = leaves(x, w, b)
    ex, ew, eb = leaves(x, w, b)
    calls = CALLS["layer_norm_backward"]
    ops.layer_norm(fx, fw, fb, 1e-5)[0].backward(grad)
    F.layer_norm(ex, (shape[-1],), ew, eb, 1e-5).backward(grad)
    assert CALLS["layer_norm_backward"] == calls + 1  # the Triton backward ran
    assert_close(fx.grad, ex.grad)
    assert_sum_close(fw.grad, ew.grad)
    assert_sum_close(fb.grad, eb.grad)


def test_layer_norm_backward_opcheck():
    x, w = torch.randn(3, 5, 32), torch.randn(32)
    _, mean, rstd = ops.layer_norm(x, w, torch.randn(32), 1e-5)
    torch.library.opcheck(ops.layer_norm_backward, [torch.randn(3, 5, 32), x, w, mean, rstd])


def test_the_layer_norm_backward_kernel_compiles_for_cuda_without_a_gpu(tmp_path):
    script = textwrap.dedent(
        """
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        import perflab.kernels._triton as k
        fn = k.perflab_layer_norm_bwd_kernel
        signature = {n: "*bf16" for n in ["g_ptr", "x_ptr", "w_ptr", "dx_ptr"]}
        signature |= {n: "*fp32" for n in ["mean_ptr", "rstd_ptr", "dw_ptr", "db_ptr"]}
        signature |= {"n_rows": "i32", "n_cols": "i32", "rows_per_program": "i32"}
        source = ASTSource(
            fn=fn,
            signature={**signature, "BLOCK": "constexpr"},
            constexprs={(fn.arg_names.index("BLOCK"),): 1024},
        )
        print(triton.compile(source, target=GPUTarget("cuda", 90, 32)).metadata.name)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["perflab_layer_norm_bwd_kernel"]
