"""Whole trials on a tiny model on the CPU, in this process (a failing model in a trial
process): records, phases, probe, failures."""

from __future__ import annotations

import dataclasses

import pytest
from tiny import TINY

from perflab.errors import ConfigError
from perflab.formats.records import load_record
from perflab.formats.trial_parts import Invocation, TrialTelemetry
from perflab.measure.knobs import CompileCounts
from perflab.measure.steps import INFER_PHASES, TRAIN_PHASES
from perflab.measure.trial import run_trial
from perflab.process.isolation import run_isolated
from perflab.process.trial_request import RUN_TRIAL, TrialRequest
from perflab.report.console import trial_summary

pytestmark = pytest.mark.usefixtures("frozen_heap")


def _run(tmp_path, cfg, name="000.json"):
    path = tmp_path / name
    status = run_trial(
        TrialRequest(cfg, {"batch_size": cfg.batch_size}, str(path), Invocation(cwd=str(tmp_path)))
    )
    return status, load_record(path)


def test_train_trial_writes_a_complete_record(tmp_path, make_config):
    status, record = _run(tmp_path, make_config(*TINY))
    assert status == record.status == "ok"
    samples = record.samples
    assert samples is not None and samples.steps_per_sample == 1
    assert len(samples.step_ns) >= 5 and len(samples.warmup_sample_ns) >= 2
    assert samples.first_call_ns > 0 and samples.stop_reason in ("min_reached", "max_s")
    assert list(samples.phases_ns) == list(TRAIN_PHASES)
    for i, total in enumerate(samples.step_ns):  # on CPU the phases tile the step exactly
        assert sum(p[i] for p in samples.phases_ns.values()) == total
    memory = record.memory
    assert memory.kind == "process_rss" and memory.peak_bytes and memory.peak_bytes > 0
    # one instrumented step after the timed block: RSS at the end of every phase
    assert memory.phases is not None
    phases = [row.phase for row in memory.phases]
    assert phases == ["data", "h2d", "forward", "backward", "optimizer"]
    assert all(row.rss_bytes and row.rss_bytes > 0 for row in memory.phases)
    assert record.telemetry == TrialTelemetry(available=False, reason="no GPU telemetry on cpu")
    assert record.probe is not None and record.probe.grad_norm is not None
    assert record.probe.output_shape == [4, 10]
    assert all(e.ok is not False for e in record.evidence.values()), record.evidence
    assert {"threads", "amp", "channels_last", "compile", "data_loader"} <= set(record.evidence)
    assert record.environment["torch"] and record.conditions["threads"] == 1
    assert len(record.load_start) == 3


def test_infer_trial_times_the_forward_only(tmp_path, make_config):
    _, record = _run(tmp_path, make_config(*TINY, "mode=infer", "data=memory"))
    assert record.status == "ok" and list(record.samples.phases_ns) == list(INFER_PHASES)
    assert record.probe.grad_norm is None


def test_probe_is_identical_across_runs_and_independent_of_training(tmp_path, make_config):
    cfg = make_config(*TINY)
    _, first = _run(tmp_path, cfg, "a.json")
    longer = dataclasses.replace(cfg, trial=dataclasses.replace(cfg.trial, min_steps=30))
    _, second = _run(tmp_path, longer, "b.json")
    assert first.probe == second.probe


def test_amp_changes_the_probe_dtype_and_evidence(tmp_path, make_config):
    _, record = _run(tmp_path, make_config(*TINY, "amp=true"))
    assert record.evidence["amp"].observed == ["bfloat16"]
    assert record.probe.output_dtype == "bfloat16"


def test_loader_workers_really_run(tmp_path, make_config):
    _, record = _run(tmp_path, make_config(*TINY, "num_workers=1"))
    assert record.evidence["data_loader"].observed["num_workers"] == 1
    assert record.evidence["data_loader"].ok is True


def test_channels_last_reaches_the_convolutions(tmp_path, make_config):
    tiny_convnet = [o for o in TINY if not o.startswith("model")]
    cfg = make_config(
        *tiny_convnet,
        "model=convnet",
        "model.width=4",
        "model.stages=1",
        "model.image_size=8",
        "channels_last=true",
    )
    _, record = _run(tmp_path, cfg)
    assert record.evidence["channels_last"].ok is True


def test_a_failing_model_becomes_a_failed_record(tmp_path, make_config):
    cfg = make_config(*TINY, "model.target.num_classes=99999")  # labels beyond the outputs
    cfg.model.num_classes = 3
    # In a trial process, not this one: on CUDA an out-of-range label is a device-side
    # assert, which poisons the CUDA context of the process for every later test (it did
    # on the H100, tests/fixtures/h100/README.md).
    path = tmp_path / "000.json"
    request = TrialRequest(cfg, {}, str(path), Invocation(cwd=str(tmp_path)))
    outcome = run_isolated(RUN_TRIAL, request, timeout_s=300)
    record = load_record(path)
    assert (outcome.kind, outcome.value) == ("ok", "failed")
    assert record.status == "failed" and record.samples is None
    assert record.error is not None and record.error.type in ("IndexError", "RuntimeError")
    assert "Traceback" in record.error.traceback


def test_impossible_setting_raises_before_anything_is_written(tmp_path, make_config, monkeypatch):
    monkeypatch.setattr("perflab.measure.resolve.torch.cuda.is_available", lambda: False)  # no GPU
    with pytest.raises(ConfigError, match="device=cuda: no CUDA"):
        _run(tmp_path, make_config(*TINY, "device=cuda"))
    assert not (tmp_path / "000.json").exists()


def test_compiled_variant_shows_graphs_and_no_compilation_in_the_window(tmp_path, make_config):
    _, record = _run(tmp_path, make_config(*TINY, "compile=true"))
    evidence = record.evidence["compile"]
    assert record.status == "ok", record.invalid_reason
    assert evidence.ok is True and evidence.observed["graphs"] >= 1
    assert evidence.observed["compiled_in_timed_window"] == 0
    assert record.settings["compile_mode"] == "default"


def test_compilation_inside_the_timed_window_invalidates_the_trial(
    tmp_path, make_config, monkeypatch
):
    # Dynamo's counters are read just before and just after the timed block; make the
    # second reading show one more compiled frame, as a recompilation would.
    readings = iter(range(100))

    def counters() -> CompileCounts:
        n = next(readings)
        return CompileCounts(graphs=1, frames_compiled=n, graph_breaks=0, recompiles=n)

    monkeypatch.setattr("perflab.measure.trial.knobs.compile_counters", counters)
    _, record = _run(tmp_path, make_config(*TINY))
    assert record.status == "invalid"
    assert "inside the timed window" in record.invalid_reason


def test_each_trial_gets_its_own_heap_layout(tmp_path, make_config):
    cfg = make_config(*TINY)
    pads = {_run(tmp_path, cfg, f"{i}.json")[1].environment["layout_pad_bytes"] for i in range(3)}
    assert len(pads) >= 2  # 4096 possible sizes: three equal draws would be a bug


def test_later_rounds_skip_the_probe_and_evidence_pass_unless_asked(tmp_path, make_config):
    cfg = make_config(*TINY)
    path = tmp_path / "r001.json"
    run_trial(TrialRequest(cfg, {}, str(path), Invocation(), round=1))
    later = load_record(path)
    assert later.status == "ok" and later.probe is None and "amp" not in later.evidence
    every = make_config(*TINY, "trial.checks_every_round=true")
    run_trial(TrialRequest(every, {}, str(path), Invocation(), round=1))
    assert load_record(path).probe is not None


def test_a_fixed_length_trial_runs_exactly_its_steps(tmp_path, make_config):
    from perflab.process.trial_request import TrialLength

    cfg = make_config(*TINY, "trial.min_s=0.2")  # device=cpu: one step per sample
    path = tmp_path / "r001.json"
    request = TrialRequest(
        cfg, {}, str(path), Invocation(cwd=str(tmp_path)), round=1, length=TrialLength(1, 37, 0)
    )
    assert run_trial(request) == "ok"
    samples = load_record(path).samples
    assert samples is not None and samples.timed_steps == 37 and len(samples.step_ns) == 37
    assert (samples.length, samples.length_from_round) == ("fixed", 0)
    assert samples.stop_reason == "fixed_steps"


def test_the_warm_up_lasts_until_steady_and_says_why_it_stopped(tmp_path, make_config):
    _, record = _run(tmp_path, make_config(*TINY, "trial.warmup_max_s=3"))
    s = record.samples
    assert s is not None and s.warmup_stop in ("steady", "cap") and 0 < s.warmup_s <= 3.2
    # the rule needs two windows of at least 3 samples before it can call anything steady
    assert len(s.warmup_sample_ns) >= 6 and set(s.warmup_sample_steps) == {1}
    _, off = _run(tmp_path, make_config(*TINY, "trial.steady_tolerance=0"), "001.json")
    assert off.samples is not None and off.samples.warmup_stop == "minimum"
    assert len(off.samples.warmup_sample_ns) == 2  # trial.warmup_steps=2, no time floor


def test_the_window_judged_steady_opens_the_timed_block(tmp_path, make_config):
    # device=cpu; trial.min_steps=5 and no time floor: the steady window (at least 50 ms
    # of these short steps) gives its 4 latest samples, and the block runs the fifth
    _, record = _run(tmp_path, make_config(*TINY, "trial.warmup_max_s=3"))
    s = record.samples
    assert s is not None
    if s.warmup_stop != "steady":
        pytest.skip(f"the warm-up stopped at {s.warmup_stop!r} on this machine")
    assert s.warmup_kept == 4 and s.timed_steps >= 5
    assert s.step_ns[:4] == s.warmup_sample_ns[-4:]
    for i, total in enumerate(s.step_ns):  # the kept steps were marked phase by phase too
        assert sum(p[i] for p in s.phases_ns.values()) == total
    # their time moved from the warm-up's seconds to the block's
    assert s.timed_s >= sum(s.step_ns[:4]) / 1e9 and record.cost_s.timed == s.timed_s
    assert record.cost_s.warmup == s.warmup_s
    # the single run's console says so, the warm-up's steps less the kept ones
    warm_steps = sum(s.warmup_sample_steps) - 4
    text = trial_summary(record, tmp_path / "000.json")
    assert f"{warm_steps} steps (steady), then 4 it judged steady, which open the timed" in text

    _, off = _run(tmp_path, make_config(*TINY, "trial.keep_steady_window=false"), "001.json")
    assert off.samples is not None and off.samples.warmup_kept == 0
