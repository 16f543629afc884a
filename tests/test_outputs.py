"""Any model output, your loss (perflab.workloads.outputs; issue 26, items 2 and 3): what
model.output picks, what model.loss computes, and the settings check that refuses a
choice that does not fit before anything is measured (perflab.measure.preflight).

Unit tests on tensors in this process (CPU); end-to-end runs of the `perflab` command
with device=cpu on tests/shaped_outputs.py's models."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import shaped_outputs
import torch
from console_scripts import command
from tiny import USER_MODEL

from perflab.config.schema import ModelConfig, TargetSpec
from perflab.errors import ConfigError
from perflab.formats.records import load_record
from perflab.workloads.outputs import fields_of, make_loss, output_tensor

X = torch.randn(4, 5)
Y = torch.tensor([0, 1, 2, 1])


def _model(**fields: object) -> ModelConfig:
    return ModelConfig(_target_="x.y", target=TargetSpec(num_classes=3), **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", ["tuple", "dict", "object"])
def test_auto_picks_the_logits_whatever_holds_them(shape):
    model = shaped_outputs.build(shape)
    out = model(X)
    expected = model.lin(X)
    if shape == "tuple":  # a tuple has no names: auto takes the first tensor
        assert torch.equal(output_tensor(out), torch.relu(expected))
        assert torch.equal(output_tensor(out, "1"), expected)
    else:
        assert torch.equal(output_tensor(out), expected)
        assert torch.equal(output_tensor(out, "hidden"), torch.relu(expected))


def test_a_missing_field_names_what_the_output_holds():
    out = shaped_outputs.build("dict")(X)
    assert fields_of(out) == ["hidden", "logits"]
    with pytest.raises(ConfigError, match=r"model.output=scores: the model's output has no "):
        output_tensor(out, "scores")
    with pytest.raises(ConfigError, match=r"holds no tensor"):
        output_tensor({"count": 3})


def test_auto_uses_the_models_own_loss_when_it_computed_one():
    out = shaped_outputs.build("own_loss")(X)
    loss = make_loss(_model())(out, Y)
    assert torch.equal(loss, out.loss)
    # target: perflab's loss for the target kind, on the logits, the model's own ignored
    ce = make_loss(_model(loss="target"))(out, Y)
    assert torch.allclose(ce, torch.nn.functional.cross_entropy(out.logits, Y))
    with pytest.raises(ConfigError, match=r"model.loss=model: the model's output carries no loss"):
        make_loss(_model(loss="model"))(shaped_outputs.build("dict")(X), Y)


def test_a_users_loss_gets_the_picked_tensor_and_must_return_a_scalar():
    out = shaped_outputs.build("dict")(X)
    mine = make_loss(_model(loss="tests.shaped_outputs.mean_square"), shaped_outputs.mean_square)
    assert torch.allclose(mine(out, Y), out["logits"].square().mean())
    per_sample = make_loss(_model(loss="x.per_sample"), shaped_outputs.per_sample_loss)
    with pytest.raises(ConfigError, match=r"model.loss=x.per_sample: the loss is \(4,\)"):
        per_sample(out, Y)


def test_an_output_the_target_cannot_pair_with_names_the_field_to_set():
    """A token model without model.target.shape: cross-entropy saw 4 x 6 predictions
    against 4 labels ("Expected input batch_size (24) to match target batch_size (4)")."""
    tokens = torch.randn(4, 6, 3)
    with pytest.raises(ConfigError) as refused:
        make_loss(_model())(tokens, Y)
    message = str(refused.value)
    assert message.startswith("model.target=")
    assert "cannot pair output (4, 6, 3) with target (4,)" in message
    assert "model.target.shape=[SEQ_LEN]" in message


USER = (*USER_MODEL, "model._target_=tests.shaped_outputs.build")


def _perflab(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command("perflab"), *USER, *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["dict", "own_loss"])
def test_a_model_returning_a_dict_or_its_own_loss_runs_without_a_wrapper(tmp_path, shape):
    result = _perflab(tmp_path, f"+model.args.shape={shape}")
    assert result.returncode == 0, result.stderr
    [path] = tmp_path.glob("outputs/**/trials/000.json")
    record = load_record(path)
    assert record.status == "ok" and record.probe is not None
    assert record.probe.output_shape == [4, 3]  # the logits


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, needle",
    [
        (("+model.args.shape=nothing",), "model.output=auto: the model's output holds no tensor"),
        (("+model.args.shape=dict", "model.output=scores"), "model.output=scores"),
        (
            ("+model.args.shape=dict", "model.loss=tests.shaped_outputs.per_sample_loss"),
            "model.loss=tests.shaped_outputs.per_sample_loss: the loss is (4,)",
        ),
        (("+model.args.shape=dict", "model.loss=model"), "model.loss=model: the model's output"),
    ],
)
def test_an_output_or_loss_that_does_not_fit_is_refused_before_measuring(tmp_path, args, needle):
    result = _perflab(tmp_path, *args)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("outputs/**/trials/*.json"))  # nothing measured


def test_a_swept_knob_of_the_users_own_without_a_baseline_is_refused_with_the_fix():
    """It once ran its whole budget (1 min 26 s) before saying "no comparisons"."""
    from perflab.config.plan import Job, build_plan

    jobs = [
        Job(i, [f"+model.args.attn={a}"], {"model.args.attn": a})
        for i, a in enumerate(("eager", "sdpa"))
    ]
    with pytest.raises(ConfigError) as refused:
        build_plan(jobs, {}, sentinel=True)
    assert "'+schedule.treatments={model.args.attn:eager}'" in str(refused.value)
    plan = build_plan(jobs, {"model.args.attn": "eager"}, sentinel=True)
    assert [(v.label, b.label) for v, b in plan.comparisons()] == [
        ("model.args.attn=sdpa", "model.args.attn=eager")
    ]
    # sizes swept alone are cells of a throughput table, as batch sizes are
    sizes = [Job(i, [f"model.hidden={h}"], {"model.hidden": h}) for i, h in enumerate((8, 16))]
    assert build_plan(sizes, {}, sentinel=False).comparisons() == []


def test_a_factory_whose_module_raises_on_import_names_the_real_cause(tmp_path, monkeypatch):
    """torchvision on a torch it was not built for: the line once read "Error loading
    'torchvision.models.resnet18':" and the cause, a RuntimeError, was nowhere on it."""
    from perflab.workloads import check_factories

    (tmp_path / "broken_vision.py").write_text(
        'raise RuntimeError("operator torchvision::nms does not exist")\n'
    )
    (tmp_path / "missing_dep.py").write_text("import no_such_dependency_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = ModelConfig(_target_="broken_vision.resnet18")
    with pytest.raises(ConfigError) as refused:
        check_factories(_config(cfg))
    assert "importing it raised RuntimeError: operator torchvision::nms does not exist" in str(
        refused.value
    )
    with pytest.raises(ConfigError, match="No module named 'no_such_dependency_here'"):
        check_factories(_config(ModelConfig(_target_="missing_dep.build")))


def _config(model: ModelConfig):
    """A config with only what check_factories reads: the model, no dataset."""
    from types import SimpleNamespace

    return SimpleNamespace(model=model, data=SimpleNamespace(dataset=None))


def test_channels_last_reaches_the_4d_tensors_of_any_batch():
    from perflab.measure.knobs import channels_last_batch, four_d_tensors

    image, ids = torch.randn(2, 3, 8, 8), torch.zeros(2, 5, dtype=torch.long)
    for batch in ((image, ids), [image, ids], {"pixels": image, "ids": ids}):
        converted = channels_last_batch(batch)
        [four_d] = four_d_tensors(converted)
        assert four_d.is_contiguous(memory_format=torch.channels_last)
    assert four_d_tensors({"ids": ids}) == []


@pytest.mark.slow
def test_channels_last_on_a_batch_without_a_4d_tensor_is_refused_before_measuring(tmp_path):
    """It once passed the config check and failed the trial with "'list' object has no
    attribute 'contiguous'"."""
    result = _perflab(
        tmp_path,
        "+model.args.shape=dict",
        "channels_last=true",
        "data.dataset=tests.shaped_outputs.pairs",
    )
    assert result.returncode == 2, result.stderr
    assert "channels_last=true: no tensor of this workload's batch is 4-D ([4, 5])" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
