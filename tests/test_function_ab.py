"""Two implementations of one function (model=function, model.fn=A,B): the config, the
module around the function, trials on its outputs, the settings check's refusals, and the
ready-made study with a known cost ratio read to the right verdict
(experiments/function_ratio.yaml). On the CPU; the functions are tests/user_steps.py's and
perflab.workloads.spin's ground truth."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from console_scripts import command
from hydra import compose, initialize_config_module

from perflab.analysis.numerics import compare_probes
from perflab.config.compose import to_config
from perflab.config.plan import Job, build_plan
from perflab.errors import ConfigError
from perflab.formats.records import load_record
from perflab.formats.trial_parts import Invocation
from perflab.measure.preflight import check_settings
from perflab.measure.trial import run_trial
from perflab.process.trial_request import TrialRequest
from perflab.workloads.function import Function, build
from perflab.workloads.spin import double_fast, double_slow

FUNCTIONS = "tests.user_steps"
# one function of two [4, 8, 8] inputs, whole trials well under a second
PAIR = (
    "device=cpu",
    "model=function",
    f"model.inputs={FUNCTIONS}.pairs",
    "batch_size=4",
    "trial.warmup_steps=2",
    "trial.warmup_s=0",
    "trial.min_steps=5",
    "trial.min_s=0",
    "trial.max_s=2",
)


pytestmark = pytest.mark.usefixtures("frozen_heap")


def _run(tmp_path, cfg, name):
    path = tmp_path / name
    status = run_trial(
        TrialRequest(cfg, {"batch_size": cfg.batch_size}, str(path), Invocation(cwd=str(tmp_path)))
    )
    return status, load_record(path)


def _check(tmp_path, cfg):
    return check_settings(TrialRequest(cfg, {}, str(tmp_path / "r.json"), Invocation()))


# --- the config ---------------------------------------------------------------------------


def test_model_function_times_the_function_in_infer_mode_unless_told(make_config):
    cfg = make_config("model=function", "model.fn=torch.tanh")
    assert cfg.mode == "infer" and cfg.model.fn == "torch.tanh" and cfg.model.inputs is None
    assert cfg.model.target.kind == "none"
    assert make_config("model=function", "model.fn=torch.tanh", "mode=train").mode == "train"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["model=function"],
            "model.fn=???: required; allowed: a dotted path to your function, e.g. "
            "model.fn=mypkg.ops.attention",
        ),
        (["model=function", "model.fn=tanh"], "model.fn=tanh: not a function path"),
        (
            ["model=function", "model.fn=torch.tanh", "model.inputs=x"],
            "model.inputs=x: not a function path",
        ),
        (
            [*PAIR, "model.fn=torch.tanh", "num_workers=1"],
            "num_workers=1: has no effect; allowed: 0 with model.inputs",
        ),
    ],
)
def test_a_function_config_that_cannot_run_names_field_value_and_allowed(overrides, message):
    # composed as the CLI composes it: a missing value is named by to_config
    with initialize_config_module(config_module="perflab.conf", version_base=None):
        given = [o for o in overrides if o != "device=cpu"]
        composed = compose(config_name="perflab", overrides=["device=cpu", *given])
    with pytest.raises(ConfigError) as refused:
        to_config(composed)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_the_first_function_listed_is_the_baseline():
    jobs = [Job(i, [f"model.fn={f}"], {"model.fn": f}) for i, f in enumerate(("a.ref", "a.ours"))]
    [(variant, base)] = build_plan(jobs, {}, sentinel=True).comparisons()
    assert (variant.label, base.label) == ("model.fn=a.ours", "model.fn=a.ref")


# --- the module around the function ---------------------------------------------------------


def test_the_module_calls_the_function_with_its_inputs_and_keyword_arguments():
    module = build(f"{FUNCTIONS}.matmul").eval()
    a, b = torch.randn(2, 3, 3), torch.randn(2, 3, 3)
    assert torch.equal(module(a, b), a @ b)
    scaled = Function(lambda x, k: x * k, "scale", {"k": 3.0}).eval()
    assert torch.equal(scaled(torch.ones(2)), torch.full((2,), 3.0))


def test_in_train_mode_the_gradient_flows_through_the_function_and_outputs_are_unchanged():
    module = build("torch.tanh").train()
    x = torch.randn(4, 5)
    out = module(x)
    assert torch.equal(out, torch.tanh(x))  # x * 1.0 is x, bit for bit
    out.mean().backward()
    assert module.scale.grad is not None and float(module.scale.grad) != 0.0


def test_the_ground_truth_pair_computes_the_same_numbers():
    x = torch.randn(64)
    assert torch.equal(double_fast(x, wait_us=1), double_slow(x, wait_us=1))


# --- trials ---------------------------------------------------------------------------------


def test_two_implementations_agree_and_a_wrong_one_does_not(tmp_path, make_config):
    probes = {}
    for name in ("matmul", "matmul_einsum", "matmul_wrong"):
        status, record = _run(tmp_path, make_config(*PAIR, f"model.fn={FUNCTIONS}.{name}"), name)
        assert status == "ok", record.error
        assert list(record.samples.phases_ns) == ["data", "h2d", "forward"]
        assert record.settings["function"] == f"{FUNCTIONS}.{name}"
        assert record.evidence["model.fn"].observed == f"{FUNCTIONS}.{name}"
        assert record.probe is not None and record.probe.output_shape == [4, 8, 8]
        probes[name] = record.probe
    assert compare_probes(probes["matmul"], probes["matmul_einsum"]).ok is True
    assert compare_probes(probes["matmul"], probes["matmul_wrong"]).ok is False


def test_a_function_in_train_mode_times_forward_and_backward(tmp_path, make_config):
    cfg = make_config(*PAIR, f"model.fn={FUNCTIONS}.matmul", "mode=train")
    status, record = _run(tmp_path, cfg, "train")
    assert status == "ok", record.error
    assert list(record.samples.phases_ns) == ["data", "h2d", "forward", "backward", "optimizer"]
    assert record.probe.grad_norm is not None and record.probe.grad_norm > 0


def test_without_make_inputs_the_function_gets_perflabs_synthetic_inputs(tmp_path, make_config):
    cfg = make_config("model=function", "model.fn=torch.tanh", "data=memory", *PAIR[3:4])
    status, record = _run(tmp_path, cfg, "synthetic")
    assert status == "ok" and record.probe.output_shape == [4, 64]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            [f"model.fn={FUNCTIONS}.matmul", f"model.inputs={FUNCTIONS}.not_inputs"],
            f"model.inputs={FUNCTIONS}.not_inputs: it returned a str; allowed: make_inputs(",
        ),
        ([f"model.fn={FUNCTIONS}.SEEN"], f"model.fn={FUNCTIONS}.SEEN: names a dict; allowed:"),
        ([f"model.fn={FUNCTIONS}.nosuch"], f"model.fn={FUNCTIONS}.nosuch: "),
        (
            [f"model.fn={FUNCTIONS}.matmul", f"model.inputs={FUNCTIONS}.matmul"],
            "allowed: fn(batch_size)",
        ),
    ],
)
def test_a_function_or_inputs_that_cannot_run_is_refused_before_measuring(
    tmp_path, make_config, overrides, message
):
    with pytest.raises(ConfigError) as refused:
        _check(tmp_path, make_config(*PAIR, *overrides))
    assert message in str(refused.value) and "\n" not in str(refused.value)


# --- the ready-made study: a known cost ratio --------------------------------------------------


@pytest.mark.heavy
@pytest.mark.slow
def test_a_function_pair_with_a_known_cost_ratio_reads_the_right_verdict(tmp_path):
    """experiments/function_ratio.yaml: x * 2 after two 1000 us spins (the baseline,
    listed first) against x + x after one. The true speedup is (2000 + c) / (1000 + c)
    with c the step's own constant overhead, so between 1.95 (c = 50 us, more than a step
    of data=memory costs here) and 2.0; the interval must reach into that range, and say
    FASTER. ~10 s here."""
    result = subprocess.run(
        [
            *command("perflab"),
            "-m",
            "+experiment=function_ratio",
            "device=cpu",
            "preset=quick",
            "schedule.min_rounds=6",
            "schedule.max_rounds=6",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "perflab: note: model.fn=perflab.workloads.spin.double_slow is the baseline" in (
        result.stdout
    )
    [summary_path] = tmp_path.glob("multirun/*/*/summary.json")
    summary = json.loads(summary_path.read_text())
    [c] = summary["comparisons"]
    assert c["variant"] == "model.fn=perflab.workloads.spin.double_fast"
    assert c["baseline"] == "model.fn=perflab.workloads.spin.double_slow"
    assert c["verdict"] == "FASTER"
    assert c["ci_low"] <= 2.0 and c["ci_high"] >= 1.95, c
    report = (summary_path.parent / "report.md").read_text()
    # the same numbers from both implementations, and what each forward called
    assert "**FASTER**; numerics OK (max rel err 0.0e+00)" in report
    assert "model.fn: yes" in report
    record = load_record(summary_path.parent / "1" / "trials" / "r000.json")
    assert record.evidence["model.fn"].observed == "perflab.workloads.spin.double_fast"
