"""A step of the user's own (step=pkg.mod.make_step, perflab.StepContext): its phases and
timing, what it can express (gradient accumulation, clipping, a scheduler, two optimizers),
the knobs' evidence inside it, its numerics, the settings check's refusals, and a sweep of
two steps. Trials run on the CPU, in this process unless they run the console scripts;
the steps are tests/user_steps.py's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from console_scripts import command
from tiny import TINY

import tests.user_steps as user_steps
from perflab.analysis.numerics import compare_probes
from perflab.config.plan import Job, build_plan, first_listed_baselines
from perflab.errors import ConfigError
from perflab.formats.records import load_record
from perflab.formats.trial_parts import Invocation
from perflab.measure.preflight import check_settings
from perflab.measure.steps import Marks, StepMarksError
from perflab.measure.timing import split_marks
from perflab.measure.trial import run_trial
from perflab.process.trial_request import TrialRequest

STEPS = "tests.user_steps"


pytestmark = pytest.mark.usefixtures("frozen_heap")


@pytest.fixture(autouse=True)
def _fresh_seen():
    user_steps.SEEN.clear()


def _run(tmp_path, cfg, name="000.json"):
    path = tmp_path / name
    status = run_trial(
        TrialRequest(cfg, {"batch_size": cfg.batch_size}, str(path), Invocation(cwd=str(tmp_path)))
    )
    return status, load_record(path)


def _step(make_config, name, *more):
    return make_config(*TINY, f"step={STEPS}.{name}", *more)


def _tiles(samples):
    """On a CPU the phases tile each step exactly."""
    return all(
        sum(p[i] for p in samples.phases_ns.values()) == total
        for i, total in enumerate(samples.step_ns)
    )


# --- timing: marks and phases --------------------------------------------------------------


def test_a_phase_marked_twice_in_a_step_is_one_phase_with_its_times_added():
    # marks of two steps: open, data, h2d, forward, backward, forward, backward, rest
    phases = ("data", "h2d", "forward", "backward", "forward", "backward", "rest")
    marks = [0, 1, 3, 10, 30, 45, 70, 71]
    block = [m + 1000 for m in marks]
    times = split_marks(marks + block, marks + block, phases, gapped=True)
    assert times.step_ns == [71, 71]
    assert times.phases_ns == {
        "data": [1, 1],
        "h2d": [2, 2],
        "forward": [7 + 15, 7 + 15],
        "backward": [20 + 25, 20 + 25],
        "rest": [1, 1],
    }


def test_marks_learn_the_phases_in_the_first_call_and_hold_every_later_one_to_them():
    seen = []
    marks = Marks("pkg.make")
    for _ in range(2):
        marks.begin(lambda: seen.append(1))
        marks("forward")
        marks("backward")
        marks.end()
    assert marks.names == ["forward", "backward"] and len(seen) == 6
    marks.begin(lambda: None)
    marks("forward")
    with pytest.raises(StepMarksError, match=r"its first call marked the phases \['forward', "):
        marks("optimizer")
    marks.begin(lambda: None)
    marks("forward")
    with pytest.raises(StepMarksError, match="a later one 1 mark"):
        marks.end()


@pytest.mark.parametrize("name", ["data", "h2d", "rest", "step", "p50", "two words", "", 3])
def test_a_phase_name_perflab_cannot_record_is_a_config_error(name):
    marks = Marks("pkg.make")
    marks.begin(lambda: None)
    with pytest.raises(ConfigError) as refused:
        marks(name)
    assert str(refused.value).startswith("step=pkg.make: the step called ctx.mark(")


# --- whole trials --------------------------------------------------------------------------


def test_a_users_step_runs_between_perflabs_marks_with_its_own_phases(tmp_path, make_config):
    status, record = _run(tmp_path, _step(make_config, "plain"))
    assert status == "ok", record.error
    samples = record.samples
    assert list(samples.phases_ns) == ["data", "h2d", "forward", "backward", "optimizer", "rest"]
    assert _tiles(samples) and len(samples.step_ns) >= 5
    assert [r.phase for r in record.memory.phases or []] == list(samples.phases_ns)
    assert record.settings["step"] == f"{STEPS}.plain"
    assert record.evidence["step"].ok is True
    assert record.evidence["step"].observed == f"{STEPS}.plain.<locals>.step"
    # the numerics probe is what the step returned: the model's logits
    assert record.probe is not None and record.probe.output_shape == [4, 10]
    assert record.probe.grad_norm is None


def test_the_users_step_sees_the_model_and_batch_perflabs_step_sees(tmp_path, make_config):
    """Same seed, same weights, same probe batch: perflab's step and the same step written
    by the user give the same outputs, so a sweep of step= compares like with like."""
    _, ours = _run(tmp_path, make_config(*TINY), "perflab.json")
    _, theirs = _run(tmp_path, _step(make_config, "plain"), "user.json")
    assert ours.probe is not None and theirs.probe is not None
    assert theirs.probe.output_sample == ours.probe.output_sample
    assert compare_probes(ours.probe, theirs.probe).ok is True


def test_a_step_that_marks_nothing_is_timed_whole(tmp_path, make_config):
    _, record = _run(tmp_path, _step(make_config, "unmarked"))
    assert record.status == "ok" and list(record.samples.phases_ns) == ["data", "h2d", "step"]
    assert _tiles(record.samples)


def test_gradient_accumulation_and_clipping(tmp_path, make_config):
    _, record = _run(tmp_path, _step(make_config, "accumulate_and_clip"))
    assert record.status == "ok", record.error
    # forward and backward of each of the 2 micro-batches: one phase each, times added
    phases = ["data", "h2d", "forward", "backward", "clip", "optimizer", "rest"]
    assert list(record.samples.phases_ns) == phases and _tiles(record.samples)
    seen = user_steps.SEEN["accumulate_and_clip"]
    assert len(seen) >= len(record.samples.step_ns)
    # clipped every step: the norm before was above the bound, after it at the bound
    for before, after in seen:
        assert before > user_steps.MAX_GRAD_NORM
        assert after == pytest.approx(user_steps.MAX_GRAD_NORM, rel=1e-4)
    # the whole batch's outputs, from the micro-batches
    assert record.probe.output_shape == [4, 10]


def test_a_learning_rate_scheduler(tmp_path, make_config):
    _, record = _run(tmp_path, _step(make_config, "scheduled"))
    assert record.status == "ok" and list(record.samples.phases_ns) == [
        "data",
        "h2d",
        "update",
        "rest",
    ]
    rates = user_steps.SEEN["scheduled"]
    assert len(rates) >= 5
    # halved at every step, from lr=0.01, across warm-up, timed block and checks
    assert rates[:3] == pytest.approx([0.005, 0.0025, 0.00125])
    assert all(b == pytest.approx(a / 2) for a, b in zip(rates, rates[1:], strict=False))


def test_two_optimizers_of_the_users_own(tmp_path, make_config):
    _, record = _run(tmp_path, _step(make_config, "two_optimizers"))
    assert record.status == "ok", record.error
    assert list(record.samples.phases_ns)[2:] == ["forward", "backward", "sgd", "adam", "rest"]
    # TINY's MLP: one hidden layer (weight, bias) for SGD, the output layer's for Adam
    assert user_steps.SEEN["two_optimizers"] == [(2, 2)]
    steps = user_steps.SEEN["two_optimizers_steps"]
    assert steps == list(range(1, len(steps) + 1))


def test_amp_evidence_is_read_inside_the_users_step(tmp_path, make_config):
    _, used = _run(tmp_path, _step(make_config, "infer", "mode=infer", "amp=bf16"), "a.json")
    assert used.evidence["amp"].ok is True and used.probe.output_dtype == "bfloat16"
    _, ignored = _run(
        tmp_path, _step(make_config, "no_autocast", "mode=infer", "amp=bf16"), "b.json"
    )
    amp = ignored.evidence["amp"]
    assert amp.ok is False and amp.observed == ["float32"]
    assert amp.detail.endswith(
        f"inside step={STEPS}.no_autocast (run its forward under ctx.autocast())"
    )


@pytest.mark.slow
def test_compile_evidence_says_whether_the_users_step_called_compiled_code(tmp_path, make_config):
    _, compiled = _run(tmp_path, _step(make_config, "infer", "mode=infer", "compile=true"), "a")
    assert compiled.status == "ok" and compiled.evidence["compile"].ok is True
    # the evidence pass ran the compiled step eagerly (force_eager): its layers were seen
    assert compiled.evidence["amp"].observed == ["float32"]
    _, eager = _run(tmp_path, _step(make_config, "eager_model", "mode=infer", "compile=true"), "b")
    assert eager.status == "ok" and eager.evidence["compile"].ok is False
    assert (
        "calls no compiled code (call ctx.runner, not ctx.model)"
        in eager.evidence["compile"].detail
    )


def test_a_step_that_marks_other_phases_later_fails_its_trial_saying_why(tmp_path, make_config):
    status, record = _run(tmp_path, _step(make_config, "marks_differently", "mode=infer"))
    assert status == "failed" and record.error is not None
    assert record.error.message == (
        f"step={STEPS}.marks_differently: its first call marked the phases ['forward'], a "
        "later one 'again' as mark 2; allowed: the same phases, in the same order, in every "
        "call"
    )


# --- the settings check --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("returns_none", "it returned NoneType, no tensor; allowed: a step that returns its"),
        ("marks_data", "the step called ctx.mark('data'); allowed: phase names of letters"),
        ("not_a_factory", "it returned int; allowed: a factory make_step(ctx) that returns"),
        ("SEEN", "allowed: fn(ctx)"),  # not a factory of one argument
    ],
)
def test_an_unusable_step_is_refused_in_one_line_before_measuring(
    tmp_path, make_config, name, message
):
    cfg = _step(make_config, name)
    with pytest.raises(ConfigError) as refused:
        check_settings(
            TrialRequest(cfg, {}, str(tmp_path / "r.json"), Invocation(cwd=str(tmp_path)))
        )
    text = str(refused.value)
    assert text.startswith(f"step={STEPS}.{name}: ") and message in text and "\n" not in text


def test_a_usable_step_passes_the_settings_check(tmp_path, make_config):
    cfg = _step(make_config, "accumulate_and_clip")
    assert check_settings(TrialRequest(cfg, {}, str(tmp_path / "r.json"), Invocation())) == []


def test_a_step_path_is_refused_by_the_config_itself(make_config):
    with pytest.raises(ConfigError, match=r"^step=nodots: not a factory path; allowed: null"):
        make_config(*TINY, "step=nodots")


# --- step as a sweep axis -------------------------------------------------------------------


def test_the_first_step_listed_is_the_baseline_unless_declared():
    jobs = [
        Job(i, [f"step={s}", f"batch_size={b}"], {"step": s, "batch_size": b})
        for i, (s, b) in enumerate(
            [("pkg.ref", 16), ("pkg.ref", 32), ("pkg.ours", 16), ("pkg.ours", 32)]
        )
    ]
    plan = build_plan(jobs, {}, sentinel=True)
    assert [(v.label, b.label) for v, b in plan.comparisons()] == [
        ("step=pkg.ours batch_size=16", "step=pkg.ref batch_size=16"),
        ("step=pkg.ours batch_size=32", "step=pkg.ref batch_size=32"),
    ]
    assert first_listed_baselines(plan, {}) == [
        "step=pkg.ref is the baseline (the first value listed; "
        "+schedule.treatments={step:VALUE} picks another)"
    ]
    declared = build_plan(jobs, {"step": "pkg.ours"}, sentinel=False)
    assert [b.label for _, b in declared.comparisons()] == [
        "step=pkg.ours batch_size=16",
        "step=pkg.ours batch_size=32",
    ]
    assert first_listed_baselines(declared, {"step": "pkg.ours"}) == []
    # perflab's own step (null) listed first is the baseline too
    own = [
        Job(i, [f"step={s}"], {"step": v})
        for i, (s, v) in enumerate([("null", None), ("x.y", "x.y")])
    ]
    assert [(v.label, b.label) for v, b in build_plan(own, {}, False).comparisons()] == [
        ("step=x.y", "step=None")
    ]


def _perflab(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command("perflab"), *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_a_step_with_gradient_accumulation_and_clipping_runs_as_the_docs_say(tmp_path):
    """docs/configuration.md, "Your own step": one run of a user's step on a model."""
    result = _perflab(tmp_path, *TINY, f"step={STEPS}.accumulate_and_clip")
    assert result.returncode == 0, result.stderr
    assert "phases (median): data " in result.stdout
    assert "forward " in result.stdout and "clip " in result.stdout and "rest " in result.stdout
    [path] = tmp_path.glob("outputs/**/trials/000.json")
    record = load_record(path)
    assert record.status == "ok" and record.settings["step"] == f"{STEPS}.accumulate_and_clip"


@pytest.mark.heavy
@pytest.mark.slow
def test_two_steps_swept_read_a_verdict_with_the_first_as_baseline(tmp_path):
    """perflab -m step=ref,slower: the same outputs (numerics OK), the slower one 3 ms
    later on a sub-millisecond step: SLOWER against the first listed."""
    steps = f"step={STEPS}.reference,{STEPS}.slower"
    result = _perflab(
        tmp_path,
        "-m",
        steps,
        *TINY,
        "mode=infer",
        "data=memory",
        "preset=quick",
        "trial.min_steps=20",
        "schedule.min_rounds=6",
        "schedule.max_rounds=6",
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert f"perflab: note: step={STEPS}.reference is the baseline" in result.stdout
    [summary_path] = tmp_path.glob("multirun/*/*/summary.json")
    summary = json.loads(summary_path.read_text())
    [c] = summary["comparisons"]
    assert (c["variant"], c["baseline"]) == (f"step={STEPS}.slower", f"step={STEPS}.reference")
    assert c["verdict"] == "SLOWER"
    report = (summary_path.parent / "report.md").read_text()
    assert "**SLOWER**; numerics OK" in report
    assert (summary_path.parent / "1" / "profile" / "profile.json").exists()
