"""Your data (issue 26, item 4) and the console's name for your code (item 6): datasets
whose items are dicts, tuples of inputs or tokenized dicts holding their labels reach
the model as ``model(**x)`` / ``model(*x)``; data.collate names a collate function;
num_workers and pin_memory apply, and pin_memory's evidence says what it did on a CPU
(nothing). Unit tests in this process; end-to-end runs of the `perflab` command with
device=cpu on examples/my_data.py and examples/my_model.py, the files
docs/your-model.md runs."""

from __future__ import annotations

import collections
import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from console_scripts import command

from perflab.config.schema import ModelConfig, TargetSpec
from perflab.config.user_code import user_code, workload_name, workloads_named
from perflab.errors import ConfigError
from perflab.experiment import codeprint
from perflab.formats.records import load_record
from perflab.measure import knobs
from perflab.measure.steps import call_model
from perflab.workloads import check_factories
from perflab.workloads.data import Pairs, as_pair, probe_batch
from perflab.workloads.outputs import make_loss

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _items(kind: str, n: int = 4) -> list[object]:
    x, e, y = torch.randn(n, 5), torch.randn(n, 2), torch.arange(n) % 3
    if kind == "dict":
        return [({"features": x[i], "extra": e[i]}, y[i]) for i in range(n)]
    if kind == "tuple":
        return [((x[i], e[i]), y[i]) for i in range(n)]
    if kind == "tokenized":  # a tokenized Hugging Face item: the labels inside
        return [{"input_ids": x[i], "labels": y[i]} for i in range(n)]
    return [(x[i], y[i]) for i in range(n)]


def test_every_item_form_becomes_an_input_and_a_target():
    x, y = Pairs()(_items("tensor"))
    assert x.shape == (4, 5) and y.tolist() == [0, 1, 2, 0]
    x, y = Pairs()(_items("dict"))
    assert set(x) == {"features", "extra"} and x["extra"].shape == (4, 2)
    x, y = Pairs()(_items("tuple"))
    assert [t.shape for t in x] == [(4, 5), (4, 2)] and y.shape == (4,)
    # a dict alone: the model's keyword arguments, labels included, and the target too
    x, y = Pairs()(_items("tokenized"))
    assert set(x) == {"input_ids", "labels"} and y is x["labels"]
    # transformers' BatchEncoding is a mapping, not a dict: made one, so the step calls
    # model(**x) rather than model(x)
    x, y = as_pair(collections.UserDict({"input_ids": torch.zeros(2, 3)}))
    assert type(x) is dict and y is None
    x, _ = as_pair((collections.UserDict({"a": torch.zeros(1)}), torch.zeros(1)))
    assert type(x) is dict


def test_the_step_calls_the_model_with_keyword_or_positional_inputs():
    seen = []

    def model(*args, **kwargs):
        seen.append((len(args), sorted(kwargs)))

    for kind in ("dict", "tuple", "tensor"):
        call_model(model, Pairs()(_items(kind))[0])
    assert seen == [(0, ["extra", "features"]), (2, []), (1, [])]


def test_an_item_that_is_no_pair_nor_dict_is_refused_naming_the_forms():
    with pytest.raises(ConfigError) as refused:
        Pairs()([(torch.zeros(2), torch.zeros(2), torch.zeros(1))] * 2)
    assert str(refused.value).startswith("data.dataset=")
    assert "a batch is a list of 3" in str(refused.value)


def test_the_collate_function_makes_the_batch_and_the_probe():
    def pad(items):
        longest = max(len(i["ids"]) for i in items)
        ids = torch.zeros(len(items), longest, dtype=torch.long)
        for row, item in enumerate(items):
            ids[row, : len(item["ids"])] = item["ids"]
        return {"ids": ids, "labels": ids.clone()}

    dataset = [{"ids": torch.arange(n + 1)} for n in range(5)]  # lengths 1..5
    x, y = probe_batch(dataset, 3, pad)  # type: ignore[arg-type]
    assert x["ids"].shape == (3, 3) and torch.equal(y, x["ids"])


def test_a_batch_without_a_target_needs_the_models_own_loss():
    model = ModelConfig(_target_="x.y", target=TargetSpec(num_classes=3))
    loss = make_loss(model)
    with pytest.raises(ConfigError) as refused:
        loss({"logits": torch.randn(4, 3)}, None)
    assert "the batch carries no target" in str(refused.value)
    # the model's own loss (a Hugging Face model given labels), or no target needed
    own = torch.tensor(1.5, requires_grad=True)
    assert loss({"logits": torch.randn(4, 3), "loss": own}, None) is not None
    none = ModelConfig(_target_="x.y", target=TargetSpec(kind="none"))
    assert make_loss(none)(torch.ones(4, 3), None).item() == 1.0


def test_pin_memory_without_an_accelerator_is_evidence_of_nothing_not_a_yes():
    cfg = SimpleNamespace(data=SimpleNamespace(source="loader"), num_workers=0, pin_memory=True)
    found = knobs.loader_evidence(cfg, Pairs()(_items("dict")), "cpu")  # type: ignore[arg-type]
    assert found["pin_memory"].ok is None
    assert "nothing to pin on cpu" in found["pin_memory"].detail
    assert found["data_loader"].ok is True  # no workers asked, none running
    assert "pin_memory has no effect on cpu" in found["data_loader"].detail
    assert knobs.first_tensor(({"a": [None, torch.ones(1)]}, None)) is not None
    assert knobs.first_tensor(({"a": "text"}, None)) is None


def test_the_collate_is_checked_imported_and_fingerprinted(make_config, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))  # as perflab finds it, run there
    cfg = make_config("data.collate=my_data.pad")
    assert user_code(cfg)["data.collate"] == "my_data.pad"
    check_factories(cfg)  # imports, and binds one argument (the items)
    composed = {"model": {"_target_": "m.build"}, "data": {"collate": "mine.pad"}}
    assert codeprint.factories(composed) == ["m.build", "mine.pad"]
    (tmp_path / "two_args.py").write_text("def pad(items, extra):\n    return items\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as refused:
        check_factories(make_config("data.collate=two_args.pad"))
    assert str(refused.value).startswith("data.collate=two_args.pad: missing a required")
    assert "allowed: fn(items)" in str(refused.value)
    with pytest.raises(ConfigError, match="data.collate=no_such_module.pad"):
        check_factories(make_config("data.collate=no_such_module.pad"))


def test_a_collate_that_is_not_a_function_path_is_refused(make_config):
    with pytest.raises(ConfigError) as refused:
        make_config("data.collate=pad")
    assert str(refused.value).startswith("data.collate=pad: not a function path")


def test_the_console_names_the_users_code():
    custom = {
        "model": {"_target_": "mypkg.build"},
        "data": {"dataset": "mypkg.pairs", "collate": "mypkg.pad"},
    }
    assert (
        workload_name("custom", custom)
        == "custom (mypkg.build; data mypkg.pairs, collate mypkg.pad)"
    )
    hf = {"model": {"_target_": "perflab.workloads.hf.build", "arch": "bert", "task": "masked_lm"}}
    assert workload_name("hf", hf) == "hf (bert masked_lm)"
    hf["model"]["path"] = "ckpt/bert"
    assert workload_name("hf", hf) == "hf (bert masked_lm from ckpt/bert)"
    builtin = {"model": {"_target_": "perflab.workloads.models.mlp"}, "data": {}}
    assert workload_name("mlp", builtin) == "mlp"
    assert workloads_named(
        [({"model": "mlp"}, builtin), ({"model": "mlp"}, builtin), ({"model": "custom"}, custom)]
    ) == ("mlp | custom (mypkg.build; data mypkg.pairs, collate mypkg.pad)")


# --- end to end -------------------------------------------------------------------------

TWO_INPUTS = (
    "device=cpu",
    "model=custom",
    "model._target_=my_data.image_and_extra",
    "model.input.shape=[3,16,16]",
    "model.target.num_classes=4",
    "batch_size=8",
    "num_workers=2",
    "trial.warmup_steps=1",
    "trial.warmup_s=0",
    "trial.min_steps=3",
    "trial.min_s=0",
    "trial.max_s=2",
)


def _perflab(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``perflab ARGS`` in ``cwd``, with examples/ importable as the docs run it."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [*command("perflab"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "dataset, pin", [("my_data.keyword_inputs", "true"), ("my_data.positional_inputs", "false")]
)
def test_two_inputs_from_dicts_or_tuples_with_workers(tmp_path, dataset, pin):
    result = _perflab(tmp_path, *TWO_INPUTS, f"data.dataset={dataset}", f"pin_memory={pin}")
    assert result.returncode == 0, result.stderr + result.stdout
    header = result.stdout.splitlines()[0]
    assert header.startswith(f"perflab: custom (my_data.image_and_extra; data {dataset}) train")
    [path] = tmp_path.glob("outputs/**/trials/000.json")
    record = load_record(path)
    assert record.status == "ok" and record.probe is not None
    assert record.probe.output_shape == [8, 4]
    loader = record.evidence["data_loader"]
    assert loader.observed["num_workers"] == 2 and loader.ok is True
    pinned = record.evidence["pin_memory"]
    assert pinned.requested is (pin == "true") and pinned.ok is None
    assert "nothing to pin on cpu" in pinned.detail


@pytest.mark.heavy
@pytest.mark.slow
def test_tokenized_dicts_with_their_labels_train_a_hugging_face_model_on_its_own_loss(tmp_path):
    pytest.importorskip("transformers", reason="model=hf needs transformers (perflab[hf])")
    result = _perflab(
        tmp_path,
        "device=cpu",
        "model=hf",
        "data.dataset=my_data.tokenized",
        "data.collate=my_data.pad",
        "+data.dataset_args.max_len=32",
        "num_workers=2",
        "batch_size=4",
        "trial.warmup_steps=1",
        "trial.warmup_s=0",
        "trial.min_steps=2",
        "trial.min_s=0",
        "trial.max_s=2",
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert result.stdout.startswith(
        "perflab: hf (gpt2 causal_lm; data my_data.tokenized, collate my_data.pad) train"
    )
    [path] = tmp_path.glob("outputs/**/trials/000.json")
    record = json.loads(path.read_text())
    assert record["status"] == "ok", record["error"]
    assert record["evidence"]["data_loader"]["observed"]["num_workers"] == 2
    # the padded batch of the probe: 4 items, padded to the longest, logits over 1024 ids
    shape = record["probe"]["output_shape"]
    assert shape[0] == 4 and shape[1] <= 32 and shape[2] == 1024
    # the model's own loss: cross-entropy over 1024 random ids starts near ln(1024)
    assert 5.5 < record["probe"]["loss"] < 8.0
