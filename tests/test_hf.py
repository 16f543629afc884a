"""model=hf: Hugging Face models built from their config class (random weights) or from a
local directory, fed token batches that fit them, with the attention implementation,
activation checkpointing and the cache as knobs whose evidence is observed.

Nothing here reaches the network: in-process builds run with every IP connection
refused (the ``no_network`` fixture), the ``perflab`` subprocesses with HF_HUB_OFFLINE=1
and a sitecustomize that refuses them too. Without transformers every test that builds
a model skips, saying why; the config tests and the one-line refusal naming the extra
run anyway. Every config and command names device=cpu.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import console_scripts
import pytest
import torch

from perflab.config.schema import HFConfig, PerflabConfig, TokenInputSpec
from perflab.errors import ConfigError
from perflab.measure.resolve import resolve
from perflab.workloads.data import IGNORED, TokenDataset

EXTRA_LINE = (
    "model=hf: transformers is not installed; allowed: the hf extra: "
    "pip install 'perflab[hf]' (transformers>=4.45)"
)
# a model small enough that a build and a step take milliseconds
SMALL = ("model=hf", "batch_size=4", "model.seq_len=16")


@pytest.fixture
def transformers() -> Any:
    return pytest.importorskip("transformers", reason="model=hf needs pip install 'perflab[hf]'")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any IP connection attempted while the test runs fails it."""
    connect = socket.socket.connect

    def refuse(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise AssertionError(f"network access to {address!r}")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def built(make_config: Any, *overrides: str) -> tuple[PerflabConfig, Any]:
    """The config and its workload, built as a trial builds it (knobs applied)."""
    from perflab.measure.steps import prepare

    cfg = make_config(*SMALL, *overrides)
    return cfg, prepare(cfg, resolve(cfg))


# --- the config: no transformers needed --------------------------------------------------


def test_the_defaults_are_a_tiny_gpt2_language_model(make_config):
    model = make_config("model=hf").model
    assert isinstance(model, HFConfig) and isinstance(model.input, TokenInputSpec)
    assert (model.arch, model.task, model.path, model.attn) == ("gpt2", "causal_lm", None, "eager")
    assert (model.gradient_checkpointing, model.use_cache) == (False, False)
    # the inputs: 64 token ids from perflab's tiny vocabulary, one label per token
    assert (model.input.shape, model.input.dtype, model.input.high) == ([64], "int64", 1024)
    assert (model.target.kind, model.target.num_classes, model.target.shape) == (
        "classes",
        1024,
        [64],
    )


@pytest.mark.parametrize(
    ("overrides", "shape", "classes", "mask_id"),
    [
        (("model.task=masked_lm", "model.arch=bert"), [32], 1024, 1023),
        (("model.task=masked_lm", "+model.config.mask_token_id=5"), [32], 1024, 5),
        (("model.task=masked_lm", "model.input.mask_id=7"), [32], 1024, 7),
        (("model.task=sequence_classification", "model.num_labels=3"), [], 3, None),
        (("model.vocab_size=500",), [32], 500, None),
    ],
)
def test_each_task_derives_its_inputs_and_target(make_config, overrides, shape, classes, mask_id):
    model = make_config("model=hf", "model.seq_len=32", *overrides).model
    assert (model.input.high, model.input.task) == (model.vocab_size or 1024, model.task)
    assert (model.target.shape, model.target.num_classes) == (shape, classes)
    assert model.input.mask_id == mask_id


@pytest.mark.parametrize(
    ("overrides", "field", "problem"),
    [
        (("model.task=translation",), "model.task", "unknown value"),
        (("model.attn=fast",), "model.attn", "unknown value"),
        (("+model.config.vocab_size=5",), "model.config.vocab_size", "set through model.config"),
        (("model.task=sequence_classification", "model.num_labels=1"), "model.num_labels", ""),
        (("model.heads=3",), "model.heads", "does not divide the model width"),
        (("model.path=no/such/dir",), "model.path", "no such directory"),
        (("model.task=masked_lm", "model.input.mask_id=1024"), "model.input.mask_id", "outside"),
        # the inputs and the target follow from the task and the sizes, not by hand
        (("model.input.shape=[3]",), "model.input.shape", "does not match the model"),
        (("model.input.task=masked_lm",), "model.input.task", "does not match the model"),
        (("model.target.kind=none",), "model.target", "does not match the model"),
        (
            ("mode=infer", "model.gradient_checkpointing=true"),
            "model.gradient_checkpointing",
            "has no effect without a backward pass",
        ),
        (
            ("model.gradient_checkpointing=true", "model.use_cache=true"),
            "model.use_cache",
            "has no effect",
        ),
    ],
)
def test_what_cannot_work_is_refused_in_one_line(make_config, overrides, field, problem):
    with pytest.raises(ConfigError) as caught:
        make_config("model=hf", *overrides)
    assert caught.value.field == field
    assert problem in str(caught.value) and "\n" not in str(caught.value)


def test_a_directory_without_a_config_json_is_refused(make_config, tmp_path):
    with pytest.raises(ConfigError, match=r"no config\.json there; allowed: a local directory"):
        make_config("model=hf", f"model.path={tmp_path}")
    (tmp_path / "config.json").write_text('{"vocab_size": 10}')
    with pytest.raises(ConfigError, match="names no model_type"):
        make_config("model=hf", f"model.path={tmp_path}")


def test_the_attention_knobs_have_known_baselines():
    from perflab.config.plan import BUILTIN_TREATMENTS

    assert BUILTIN_TREATMENTS["model.attn"] == "eager"
    assert BUILTIN_TREATMENTS["model.gradient_checkpointing"] is False
    assert BUILTIN_TREATMENTS["model.use_cache"] is False


def test_without_transformers_one_line_names_the_extra(make_config, monkeypatch):
    from perflab.workloads import hf

    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails
    with pytest.raises(ConfigError) as caught:
        hf.require_transformers()
    assert str(caught.value) == EXTRA_LINE
    # the settings check and every trial resolve the config first: the same line
    with pytest.raises(ConfigError, match=r"^model=hf: transformers is not installed; "):
        resolve(make_config("model=hf"))


# --- the inputs -----------------------------------------------------------------------


@pytest.mark.parametrize("task", ["causal_lm", "masked_lm", "sequence_classification"])
def test_token_samples_fit_the_task_and_repeat_with_the_seed(make_config, task):
    model = make_config("model=hf", "model.arch=bert", f"model.task={task}").model
    data = TokenDataset(model.input, model.target, num_samples=8, seed=3)
    (x, y), (again, _) = data[5], data[5]
    assert torch.equal(x["input_ids"], again["input_ids"]) and torch.equal(y, x["labels"])
    assert not torch.equal(x["input_ids"], data[6][0]["input_ids"])
    ids, labels = x["input_ids"], x["labels"]
    assert ids.dtype == torch.int64 and ids.shape == (64,)
    assert 0 <= int(ids.min()) and int(ids.max()) < 1024
    assert torch.equal(x["attention_mask"], torch.ones(64, dtype=torch.int64))
    if task == "causal_lm":
        assert torch.equal(labels, ids)  # the model shifts them
    elif task == "masked_lm":
        masked = labels != IGNORED
        assert int(masked.sum()) == round(0.15 * 64)
        assert bool((ids[masked] == model.input.mask_id).all())
        assert bool((labels[masked] < 1024).all())
    else:
        assert labels.shape == () and 0 <= int(labels) < model.num_labels


# --- building: transformers needed, no network ------------------------------------------


@pytest.mark.parametrize(
    ("arch", "task", "model_class"),
    [
        ("gpt2", "causal_lm", "GPT2LMHeadModel"),
        ("gpt2", "sequence_classification", "GPT2ForSequenceClassification"),
        ("bert", "causal_lm", "BertLMHeadModel"),
        ("bert", "masked_lm", "BertForMaskedLM"),
        ("bert", "sequence_classification", "BertForSequenceClassification"),
        ("llama", "causal_lm", "LlamaForCausalLM"),
        ("mistral", "causal_lm", "MistralForCausalLM"),  # grouped-query attention
    ],
)
def test_each_task_builds_from_the_config_class_and_computes_its_own_loss(
    make_config, transformers, no_network, arch, task, model_class
):
    cfg, prep = built(make_config, f"model.arch={arch}", f"model.task={task}")
    model = prep.model
    assert type(model).__name__ == model_class
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    assert model.config.vocab_size == cfg.model.input.high == 1024
    assert model.perflab_hf.weights == "random"
    assert next(model.parameters()).dtype == torch.float32
    x, y = prep.workload.probe
    assert sorted(x) == ["attention_mask", "input_ids", "labels"]
    assert x["input_ids"].shape == (4, 16)
    out = model(**x)
    assert out.loss.shape == () and bool(torch.isfinite(out.loss))
    # model.loss=auto: the model's own loss, computed from the labels in the batch
    assert torch.equal(prep.workload.loss_fn(out, y).detach(), out.loss.detach())


def test_the_same_seed_builds_the_same_random_weights(make_config, transformers, no_network):
    _, first = built(make_config)
    _, second = built(make_config)
    _, other = built(make_config, "seed=1")
    w = "transformer.h.0.attn.c_attn.weight"
    assert torch.equal(first.model.state_dict()[w], second.model.state_dict()[w])
    assert not torch.equal(first.model.state_dict()[w], other.model.state_dict()[w])


@pytest.mark.parametrize(
    ("overrides", "field", "problem"),
    [
        (("model.arch=nosuch",), "model.arch", "unknown architecture"),
        (("model.arch=t5",), "model.arch", "an encoder-decoder model"),
        (("model.task=masked_lm",), "model.task", "no masked_lm head for gpt2"),
        (("model.attn=flash_attention_2",), "model.attn", "not available on cpu"),
        (("model.attn=flex_attention",), "model.attn", "no backward pass on cpu"),
        # sizes the model cannot take, named as such (not as an attention problem)
        (("+model.config.n_head=3",), "model.arch", "allowed: sizes and model.config"),
    ],
)
def test_what_this_transformers_cannot_build_is_refused_before_building(
    make_config, transformers, no_network, overrides, field, problem
):
    with pytest.raises(ConfigError) as caught:
        resolve(make_config(*SMALL, *overrides))
    assert caught.value.field == field and problem in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_local_config_json_builds_its_architecture_with_random_weights(
    make_config, transformers, no_network, tmp_path
):
    transformers.GPT2Config(n_layer=3, n_embd=32, n_head=4, vocab_size=300).save_pretrained(
        tmp_path
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
    cfg, prep = built(make_config, "model.arch=bert", f"model.path={tmp_path}")
    assert cfg.model.arch == "gpt2"  # config.json's model_type
    assert cfg.model.input.high == 300  # its vocabulary
    config = prep.model.config
    assert (config.n_layer, config.n_embd, config.vocab_size) == (3, 32, 300)
    assert prep.model.perflab_hf.weights == "random"
    out = prep.model(**prep.workload.probe[0])
    assert bool(torch.isfinite(out.loss))


def test_a_local_directory_with_weights_loads_them(make_config, transformers, no_network, tmp_path):
    torch.manual_seed(123)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=300)
    saved = transformers.GPT2LMHeadModel(config)
    saved.save_pretrained(tmp_path)
    cfg, prep = built(make_config, f"model.path={tmp_path}", "seed=7")
    assert prep.model.perflab_hf.weights == str(tmp_path)
    assert prep.model.perflab_hf.missing == []
    loaded, expected = prep.model.state_dict(), saved.state_dict()
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], expected[k]) for k in expected)
    # another head on the same weights: the body loaded, the head at random and named
    _, head = built(make_config, f"model.path={tmp_path}", "model.task=sequence_classification")
    assert head.model.perflab_hf.missing == ["score.weight"]
    body = "transformer.h.1.mlp.c_fc.weight"
    assert torch.equal(head.model.state_dict()[body], expected[body])


def test_sizes_beyond_a_local_configs_positions_are_refused(
    make_config, transformers, no_network, tmp_path
):
    transformers.GPT2Config(n_positions=8, n_embd=32, n_head=2).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=r"^model\.seq_len=16: longer than the model's"):
        resolve(make_config(*SMALL, f"model.path={tmp_path}"))


# --- the knobs' evidence ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "attn", "calls"),
    [
        ((), "eager", {"softmax": 2, "sdpa": 0}),
        (("model.attn=sdpa",), "sdpa", {"softmax": 0, "sdpa": 2}),
        (("model.arch=bert", "model.task=masked_lm", "model.attn=sdpa"), "sdpa", {"sdpa": 2}),
    ],
)
def test_the_attention_implementation_in_effect_is_observed(
    make_config, transformers, no_network, overrides, attn, calls
):
    from perflab.measure.hf_knobs import evidence_of

    cfg, prep = built(make_config, *overrides)
    found = evidence_of(cfg, resolve(cfg), prep)
    assert found["model.attn"].ok is True, found["model.attn"]
    assert found["model.attn"].observed["config"] == attn
    seen = found["model.attn"].observed["calls"]
    assert {k: seen[k] for k in calls} == calls
    assert found["model.gradient_checkpointing"].ok is True
    assert found["model.gradient_checkpointing"].observed["recomputed_module_calls"] == 0
    assert all(p.grad is None for p in prep.model.parameters())  # the pass leaves none


def test_checkpointing_is_seen_recomputing_in_the_backward_pass(
    make_config, transformers, no_network
):
    from perflab.measure.hf_knobs import evidence_of

    cfg, prep = built(make_config, "model.arch=llama", "model.gradient_checkpointing=true")
    found = evidence_of(cfg, resolve(cfg), prep)["model.gradient_checkpointing"]
    assert found.ok is True and found.observed["enabled"] is True
    assert found.observed["recomputed_module_calls"] > 0


@pytest.mark.parametrize(
    ("overrides", "returned", "ok"),
    [
        (("mode=infer", "model.use_cache=true"), True, True),
        (("mode=infer",), False, True),
        # an encoder builds no cache: the knob is not in effect, and the evidence says so
        (("mode=infer", "model.arch=bert", "model.task=masked_lm", "model.use_cache=true"), 0, 0),
    ],
)
def test_the_cache_is_seen_in_the_output(
    make_config, transformers, no_network, overrides, returned, ok
):
    from perflab.measure.hf_knobs import evidence_of

    cfg, prep = built(make_config, *overrides)
    found = evidence_of(cfg, resolve(cfg), prep)["model.use_cache"]
    assert (found.observed, found.ok) == (bool(returned), bool(ok))


def test_the_evidence_says_no_when_calls_contradict_the_config():
    from perflab.measure.hf_knobs import (
        AttentionCalls,
        attention_evidence,
        cache_evidence,
        checkpointing_evidence,
    )

    # sdpa asked, but the forward ran the eager path's softmax (a silent fallback)
    assert attention_evidence("sdpa", "sdpa", AttentionCalls(softmax=2)).ok is False
    assert attention_evidence("eager", "eager", AttentionCalls(softmax=2, sdpa=1)).ok is False
    assert attention_evidence("sdpa", "eager", AttentionCalls(sdpa=2)).ok is False
    assert attention_evidence("flash_attention_2", "flash_attention_2", AttentionCalls(flash=2)).ok
    assert checkpointing_evidence(True, True, 0).ok is False  # nothing recomputed
    assert checkpointing_evidence(False, False, 0).ok is True
    assert cache_evidence(False, True).ok is False


# --- the command, end to end -------------------------------------------------------------

# refuses any IP connection in every Python process that perflab starts
NO_NETWORK = """\
import socket

_connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex


def _refuse(real):
    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise OSError(f"tests/test_hf.py: no network ({address!r})")
        return real(self, address)

    return connect


socket.socket.connect = _refuse(_connect)
socket.socket.connect_ex = _refuse(_connect_ex)
"""
# makes import transformers fail, as on a machine without the extra
NO_TRANSFORMERS = """\
import sys


class _NoTransformers:
    def find_spec(self, name, path=None, target=None):
        if name == "transformers" or name.startswith("transformers."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


sys.meta_path.insert(0, _NoTransformers())
"""
# a run of a tiny model with short trials; a sweep of three rounds
RUN = (
    "device=cpu",
    "preset=quick",
    "model=hf",
    "model.seq_len=16",
    "batch_size=4",
    "data.num_samples=64",
    "trial.warmup_steps=2",
    "trial.warmup_s=0",
    "trial.min_steps=10",
    "trial.min_s=0",
)
ROUNDS = ("schedule.min_rounds=3", "schedule.max_rounds=3")


def perflab(cwd: Path, *args: str, site: str = NO_NETWORK) -> subprocess.CompletedProcess[str]:
    """``perflab ARGS`` offline: HF_HUB_OFFLINE=1 and ``site`` run in every process."""
    (cwd / "site").mkdir(exist_ok=True)
    (cwd / "site" / "sitecustomize.py").write_text(site)
    path = os.pathsep.join([str(cwd / "site"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [*console_scripts.command("perflab"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.heavy
@pytest.mark.slow
def test_an_attention_sweep_runs_as_written(transformers, tmp_path):
    result = perflab(tmp_path, "-m", "model.arch=gpt2", "model.attn=eager,sdpa", *RUN, *ROUNDS)
    assert result.returncode == 0, result.stderr + result.stdout
    [summary_file] = tmp_path.glob("multirun/*/*/summary.json")
    root = summary_file.parent
    [comparison] = json.loads(summary_file.read_text())["comparisons"]
    assert comparison["variant"] == "model.attn=sdpa"
    assert comparison["baseline"] == "model.attn=eager"
    assert comparison["verdict"] in result.stdout
    for job, attn, call in (("0", "eager", "softmax"), ("1", "sdpa", "sdpa")):
        record = json.loads((root / job / "trials" / "r000.json").read_text())
        assert record["status"] == "ok"
        found = record["evidence"]["model.attn"]
        assert found["ok"] is True and found["observed"]["config"] == attn
        assert found["observed"]["calls"][call] > 0
        assert record["evidence"]["model"]["observed"]["class"] == "GPT2LMHeadModel"
        assert record["environment"]["transformers"] == transformers.__version__
        assert (root / job / "profile" / "profile.json").is_file()
    report = (root / "report.md").read_text()
    assert "| model.attn=sdpa vs model.attn=eager |" in report  # the comparison
    checks = next(x for x in report.splitlines() if x.startswith("| model.attn=sdpa |"))
    assert "| model.attn: yes |" in checks  # its checks, the first row of the variant


@pytest.mark.slow
def test_a_bert_classifier_runs_through_a_loader_with_workers(transformers, tmp_path):
    args = ("model.arch=bert", "model.task=sequence_classification", "model.num_labels=4")
    loader = ("data=synthetic", "num_workers=1", "trial.max_s=3")
    result = perflab(tmp_path, *args, *loader, *RUN)
    assert result.returncode == 0, result.stderr + result.stdout
    [path] = tmp_path.glob("outputs/*/*/trials/000.json")
    record = json.loads(path.read_text())
    assert record["status"] == "ok" and record["evidence"]["data_loader"]["ok"] is True
    assert record["evidence"]["model"]["observed"]["class"] == "BertForSequenceClassification"
    assert record["evidence"]["model.attn"]["ok"] is True
    probe = record["probe"]
    assert probe["output_shape"] == [4, 4] and probe["loss"] > 0  # logits: batch x labels


@pytest.mark.slow
@pytest.mark.parametrize("multirun", [False, True])
def test_without_transformers_the_command_names_the_extra(tmp_path, multirun):
    sweep = ("-m", "model.attn=eager,sdpa", *ROUNDS) if multirun else ()
    result = perflab(tmp_path, *sweep, *RUN, site=NO_TRANSFORMERS)
    assert result.returncode == 2, result.stderr + result.stdout
    assert result.stderr.splitlines() == [f"perflab: error: {EXTRA_LINE}"], result.stderr
    assert not list(tmp_path.rglob("r000.json")) and not list(tmp_path.rglob("000.json"))
