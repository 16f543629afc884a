"""The evidence of your own knob (issue 26, item 7): schedule.evidence names a check,
``fn(model) -> observed`` or ``(observed, ok)``, or an attribute of the model, which the
trial's checks read after the timed block; the report's "knob in effect" column shows
it (yes / NO) instead of n/a. Unit tests in this process; one sweep of the `perflab`
command with device=cpu on examples/my_model.py (the attention study of
docs/your-model.md)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch
from console_scripts import command

from perflab.config.plan import Variant
from perflab.config.user_code import user_code
from perflab.errors import ConfigError
from perflab.formats.trial_parts import KnobEvidence
from perflab.measure import knobs
from perflab.report.rows import _treatment_check
from perflab.workloads import check_factories

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _example(name: str) -> ModuleType:
    """A module of examples/ (not a package), loaded from its file."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


my_model = _example("my_model")


@pytest.fixture
def examples_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/ on sys.path, as perflab finds it when run there (docs/your-model.md)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))


def _cfg(attn: str, **checks: str) -> SimpleNamespace:
    """What user_evidence reads of a config: the knobs' values and schedule.evidence."""
    return SimpleNamespace(
        model=SimpleNamespace(args={"attn": attn}),
        schedule=SimpleNamespace(evidence={k.replace("__", "."): v for k, v in checks.items()}),
    )


def _ran(attn: str) -> torch.nn.Module:
    model = my_model.build(attn=attn)
    model(torch.randn(2, 16, 32))  # the evidence is read after the timed steps ran
    return model


CHECK = "my_model.attention_used"


@pytest.mark.parametrize("attn, ok", [("eager", True), ("sdpa", True), ("flash", False)])
def test_a_check_reports_the_implementation_the_forward_ran(examples_importable, attn, ok):
    found = knobs.user_evidence(_cfg(attn, model__args__attn=CHECK), _ran(attn))
    entry = found["model.args.attn"]
    assert entry.requested == attn and entry.ok is ok
    assert entry.observed == ("eager" if attn == "flash" else attn)  # flash falls back


def test_a_check_may_judge_by_itself_or_name_an_attribute(tmp_path, monkeypatch):
    (tmp_path / "judge.py").write_text(
        "def fused(model):\n    return {'kernels': 3}, False\n"
        "def unsure(model):\n    return 'maybe', None\n"
        "def broken(model):\n    raise ValueError('no kernels here')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    model = _ran("sdpa")
    checks = {
        "model__args__attn": "model.attn_used",
        "model__args__a": "judge.fused",
        "model__args__b": "judge.unsure",
        "model__args__c": "judge.broken",
        "model__args__d": "model.no_such_attribute",
    }
    cfg = _cfg("sdpa", **checks)
    cfg.model.args.update(a=True, b=1, c=2, d=3)
    found = knobs.user_evidence(cfg, model)  # type: ignore[arg-type]
    assert found["model.args.attn"].ok is True
    assert found["model.args.attn"].detail.startswith("model.attn_used = sdpa")
    assert found["model.args.a"] == KnobEvidence(
        requested=True,
        observed={"kernels": 3},
        ok=False,
        detail="judge.fused(model)",
    )
    assert found["model.args.b"].ok is None and found["model.args.b"].observed == "maybe"
    assert found["model.args.c"].ok is None
    assert "raised ValueError: no kernels here" in found["model.args.c"].detail
    assert "the model has no attribute no_such_attribute" in found["model.args.d"].detail
    # perflab's own evidence of a key is kept: the user's check does not replace it
    taken = knobs.user_evidence(
        _cfg("sdpa", model__args__attn=CHECK), model, taken={"model.args.attn": {}}
    )
    assert taken == {}


def test_the_report_column_reads_yes_no_and_says_where_a_check_goes():
    def record(entries: dict) -> SimpleNamespace:
        # each entry's "ok" as a knob's evidence: the only part the column reads
        return SimpleNamespace(
            evidence={
                k: KnobEvidence(requested=None, observed=None, detail="", **e)
                for k, e in entries.items()
            }
        )

    variant = Variant("1", "x", "1", [], {}, {"model.args.attn": "sdpa"}, "0")
    column = _treatment_check(None, variant, record({"model.args.attn": {"ok": True}}))  # type: ignore[arg-type]
    assert column == "model.args.attn: yes"
    column = _treatment_check(None, variant, record({"model.args.attn": {"ok": False}}))  # type: ignore[arg-type]
    assert column == "model.args.attn: NO"
    column = _treatment_check(None, variant, record({}))  # type: ignore[arg-type]
    assert column == "model.args.attn: n/a (no check: +schedule.evidence)"
    # pin_memory: its own entry, else (a record from before) the data loader's
    pinned = Variant("1", "x", "1", [], {}, {"pin_memory": True}, "0")
    assert _treatment_check(None, pinned, record({"pin_memory": {"ok": None}})) == "pin_memory: n/a"  # type: ignore[arg-type]
    assert (
        _treatment_check(None, pinned, record({"data_loader": {"ok": True}})) == "pin_memory: yes"
    )  # type: ignore[arg-type]


def test_schedule_evidence_is_validated_imported_and_fingerprinted(
    make_config, examples_importable
):
    knob = ("+model.args.attn=sdpa",)
    cfg = make_config(
        "model=custom",
        "model._target_=my_model.build",
        *knob,
        f"+schedule.evidence={{model.args.attn:{CHECK}}}",
    )
    assert user_code(cfg)["schedule.evidence.model.args.attn"] == CHECK
    check_factories(cfg)  # imports the check, binds one argument (the model)
    attribute = make_config(
        "model=custom",
        "model._target_=m.build",
        *knob,
        "+schedule.evidence={model.args.attn:model.attn_used}",
    )
    assert "schedule.evidence.model.args.attn" not in user_code(attribute)  # nothing to import
    with pytest.raises(ConfigError) as refused:
        make_config(
            "model=custom", "model._target_=m.build", "+schedule.evidence={model.args.attn:x.y}"
        )
    assert "model.args.attn is not set in this config" in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        make_config(
            "model=custom",
            "model._target_=m.build",
            *knob,
            "+schedule.evidence={model.args.attn:check}",
        )
    assert str(refused.value).startswith("schedule.evidence={'model.args.attn': 'check'}: not a")
    with pytest.raises(ConfigError) as refused:
        check_factories(
            make_config(
                "model=custom",
                "model._target_=my_model.build",
                *knob,
                "+schedule.evidence={model.args.attn:my_model.nothing}",
            )
        )
    assert str(refused.value).startswith("schedule.evidence.model.args.attn=my_model.nothing")


@pytest.mark.slow
def test_an_attention_study_shows_which_knob_took_effect(tmp_path):
    """sdpa runs sdpa (yes); flash, which the model lacks, silently runs eager (NO)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")]),
    }
    args = [
        "-m",
        "device=cpu",
        "model=custom",
        "model._target_=my_model.build",
        "model.input.shape=[16,32]",
        "model.target.num_classes=4",
        "data.dataset=my_data.sequences",
        "batch_size=8",
        "+model.args.attn=eager,sdpa,flash",
        "+schedule.treatments={model.args.attn:eager}",
        "+schedule.evidence={model.args.attn:my_model.attention_used}",
        "schedule.min_rounds=3",
        "schedule.max_rounds=3",
        "schedule.trials_per_worker=1",
        "profile=off",
        "trial.warmup_steps=1",
        "trial.warmup_s=0",
        "trial.min_steps=3",
        "trial.min_s=0",
        "trial.max_s=1",
        "hydra.sweep.dir=sweep",
    ]
    result = subprocess.run(
        [*command("perflab"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert result.stdout.startswith(
        "perflab: 3 variant(s) + A/A sentinel of custom (my_model.build; data my_data.sequences), "
        "interleaved rounds"
    )
    assert "knob not in effect: model.args.attn" in result.stdout  # the flash variant's health
    report = (tmp_path / "sweep" / "report.md").read_text()
    rows = [line for line in report.splitlines() if line.startswith("| model.args.attn=")]
    sdpa = next(r for r in rows if r.startswith("| model.args.attn=sdpa |"))
    flash = next(r for r in rows if r.startswith("| model.args.attn=flash |"))
    assert "| model.args.attn: yes |" in sdpa and "| model.args.attn: NO |" in flash
