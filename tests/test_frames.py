"""The frames a notebook reads (perflab.report.load; issue 28, item 5): the swept knobs as
columns, one row per trial, one row per profiled family, NaN for a missing number, health
as flags; and the CSV exports keep every column they had. Device: none (fixed records of
tests/sweeps.py and the H100 fixtures' records and traces are read, nothing runs)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
from sweeps import make_sweep

from perflab.analysis.trials import trial_cost
from perflab.formats.profile_json import OpRow, Overhead, TraceFile, write_profile
from perflab.formats.records import load_record, write_record
from perflab.formats.sweepdir import profile_record
from perflab.formats.trial_parts import TrialTelemetry, TrialWorker
from perflab.profile.capture import profile_of
from perflab.report import load, write_report
from perflab.report.frames import HEALTH_KINDS, health_kind
from perflab.report.tables import Report

H100 = Path(__file__).resolve().parent / "fixtures" / "h100"
H100_SWEEPS = (
    "amp_gpu_warmup0.5s",
    "amp_gpu_warmup3s",
    "compile_modes_quick",
    "main_command_quick",
)

# the columns each CSV export had before the knobs' and the health flags' columns came
COMPARISON_COLUMNS = [
    "variant",
    "baseline",
    "treatment",
    "baseline_treatment",
    "cell",
    "speedup",
    "ci_low",
    "ci_high",
    "ci_level",
    "verdict",
    "interval",
    "delta",
    "rounds",
    "p_value",
    "p_adjusted",
    "rounds_to_decide",
    "distribution_sensitive",
    "note",
    "knob_in_effect",
    "first_call_s",
    "baseline_first_call_s",
    "break_even_steps",
]
VARIANT_COLUMNS = [
    "variant",
    "name",
    "trials",
    "ok",
    "failed",
    "p50_ms",
    "p90_ms",
    "p95_ms",
    "p99_ms",
    "bounded_percentiles",
    "throughput",
    "data_ms",
    "forward_ms",
    "peak_memory_mib",
    "first_call_s",
    "warmup_s",
    "warmup_stops",
    "timed_steps",
    "health",
]


def h100(name: str, root: Path) -> Report:
    shutil.copytree(H100 / name, root, dirs_exist_ok=True)
    return load(root)


def _in_order(columns: list[str], wanted: list[str]) -> bool:
    return [c for c in columns if c in wanted] == wanted


def _edit(root: Path, job: str, rounds: range, **values: object) -> None:
    """Set fields of the records of ``job``'s ``rounds``."""
    for r in rounds:
        path = root / job / "trials" / f"r{r:03d}.json"
        record = load_record(path)
        for key, value in values.items():
            setattr(record, key, value)
        write_record(path, record)


# --- (a) the swept knobs as columns -------------------------------------------------------


def test_each_swept_knob_is_a_column_beside_the_label(tmp_path):
    report = h100("main_command_quick", tmp_path)
    c, v = report.comparisons, report.variants
    assert list(c.columns[:5]) == ["variant", "batch_size", "amp", "baseline", "baseline_amp"]
    assert list(c["batch_size"]) == [32, 64] and list(c["amp"]) == ["true", "true"]
    assert list(c["baseline_amp"]) == ["off", "off"]
    assert list(v.columns[:3]) == ["variant", "batch_size", "amp"]
    assert list(v["batch_size"]) == [32, 32, 64, 64, 32]  # the A/A copy: its baseline's
    assert list(v["amp"]) == ["true", "off", "true", "off", "off"]
    # a notebook picks comparisons by knob
    assert c.loc[c["batch_size"] == 64, "verdict"].tolist() == ["INCONCLUSIVE"]


def test_a_sweep_of_one_knob_has_its_column(tmp_path):
    make_sweep(tmp_path)
    report = load(tmp_path)
    assert list(report.comparisons["amp"]) == ["bf16"]
    assert list(report.variants["amp"]) == ["off", "bf16", "off"]


def test_the_csv_exports_keep_their_columns_and_values(tmp_path):
    make_sweep(tmp_path)
    report = load(tmp_path)
    write_report(report)
    comparisons = pd.read_csv(tmp_path / "comparisons.csv")
    variants = pd.read_csv(tmp_path / "variants.csv")
    numerics = pd.read_csv(tmp_path / "numerics.csv")
    assert _in_order(list(comparisons.columns), COMPARISON_COLUMNS)
    assert _in_order(list(variants.columns), VARIANT_COLUMNS)
    assert list(numerics.columns) == [
        *("variant", "baseline", "max_abs_err", "max_rel_err", "cosine", "loss_diff"),
        *("dtype", "tolerance", "ok"),
    ]
    assert comparisons.loc[0, "speedup"] == pytest.approx(report.comparisons.loc[0, "speedup"])
    assert comparisons.loc[0, "knob_in_effect"] == "amp: yes" and bool(numerics.loc[0, "ok"])


# --- (b) one row per trial ------------------------------------------------------------------


def test_the_trials_frame_has_a_row_per_record_with_its_steps_and_cost(tmp_path):
    make_sweep(tmp_path, fail_round=2)
    report = load(tmp_path)
    trials = report.trials_frame()
    assert len(trials) == 3 * 8  # two variants and the A/A copy, 8 rounds each
    assert list(trials.columns[:3]) == ["variant", "name", "round"]
    ok = trials[trials["status"] == "ok"]
    record = report.trials["0"][3]
    row = ok[(ok["name"] == "0") & (ok["round"] == 3)].iloc[0]
    assert row["variant"] == "amp=off" and row["steps"] == 40
    assert row["cost_ms"] == pytest.approx(trial_cost(record, "latency") / 1e6)
    assert row["min_ms"] <= row["p50_ms"] <= row["max_ms"] and row["mean_ms"] > 0
    assert row["started_at"] == record.started_at
    assert ok["reason"].isna().all()
    [failed] = trials[trials["status"] != "ok"].itertuples()
    assert (failed.name, failed.round) == ("1", 2)
    assert failed.reason == report.summary.variant("1").failed["2"]
    assert math.isnan(failed.p50_ms) and math.isnan(failed.cost_ms)


def test_the_trials_frame_names_the_warm_worker_of_a_trial(tmp_path):
    make_sweep(tmp_path)
    worker = TrialWorker(isolation="worker", id=1, trial=0, generation=2, pid=7)
    _edit(tmp_path, "1", range(6, 8), worker=worker, session=1)
    trials = load(tmp_path).trials_frame()
    warm = trials[trials["worker_id"].notna()]
    assert list(zip(warm["name"], warm["round"], strict=True)) == [("1", 6), ("1", 7)]
    assert set(warm["worker_generation"]) == {2.0} and set(warm["worker_id"]) == {1.0}
    assert set(warm["session"]) == {1.0} and trials["session"].isna().sum() == 22


def test_the_h100_trials_frame_holds_every_record(tmp_path):
    report = h100("compile_modes_quick", tmp_path)
    trials = report.trials_frame()
    assert len(trials) == sum(len(by_round) for by_round in report.trials.values())
    assert (trials["status"] == "ok").all() and trials["p50_ms"].notna().all()
    # latency: a trial's cost is its median step
    assert (trials["cost_ms"] - trials["p50_ms"]).abs().max() < 1e-9


# --- (c) one row per profiled family ----------------------------------------------------


def _cpu_profile(sweep: Path, job: str, gemm_ms: float) -> None:
    """A CPU profile of 1 step: ``gemm_ms`` of matmul and 0.5 ms of elementwise work."""
    rows = [
        OpRow(
            name="aten::mm",
            family="gemm",
            calls=1,
            self_cpu_us=gemm_ms * 1e3,
            self_device_us=0.0,
            self_cpu_memory_bytes=0,
            input_shapes="[[4, 4]]",
        ),
        OpRow(
            name="aten::add",
            family="elementwise",
            calls=2,
            self_cpu_us=500.0,
            self_device_us=0.0,
            self_cpu_memory_bytes=0,
            input_shapes="[[4]]",
        ),
    ]
    profile = profile_of(
        variant={},
        device="cpu",
        rows=rows,
        trace_file=TraceFile(trace=None, trace_bytes=0),
        overhead=Overhead(unprofiled_step_s=1e-3, profiled_step_s=2e-3, ratio=2.0),
        profiled_steps=1,
    )
    write_profile(profile_record(sweep / job), profile)


def test_the_families_frame_has_a_row_per_variant_and_family(tmp_path):
    make_sweep(tmp_path)
    _cpu_profile(tmp_path, "0", gemm_ms=1.5)
    _cpu_profile(tmp_path, "1", gemm_ms=0.5)
    families = load(tmp_path).families_frame()
    assert list(families.columns) == ["variant", "name", "device", "family", "us", "share"]
    assert set(families["name"]) == {"0", "1"}  # the A/A copy was not profiled
    gemm = families[families["family"] == "gemm"].set_index("name")
    assert gemm.loc["0", "us"] == pytest.approx(1500) and gemm.loc["1", "us"] == pytest.approx(500)
    assert gemm.loc["0", "share"] == pytest.approx(0.75) and (families["device"] == "cpu").all()
    assert families.groupby("name")["share"].sum().tolist() == pytest.approx([1.0, 1.0])


def test_the_families_frame_of_h100_profiles_holds_device_time(tmp_path):
    from test_report_width import with_profiles

    report = load(with_profiles("compile_modes_quick", tmp_path / "sweep"))
    families = report.families_frame()
    assert (families["device"] == "cuda").all() and len(set(families["name"])) >= 3
    for name, rows in families.groupby("name"):
        profile = report.profiles[str(name)]
        assert profile is not None
        assert list(rows["family"]) == list(profile.families_us)  # the profile's order
        assert rows["us"].sum() == pytest.approx(sum(profile.families_us.values()))
        assert rows["share"].sum() == pytest.approx(1.0)


def test_a_sweep_without_profiles_has_an_empty_families_frame(tmp_path):
    make_sweep(tmp_path)
    families = load(tmp_path).families_frame()
    assert families.empty and "share" in families.columns


# --- (d) NaN, never None ---------------------------------------------------------------------

NUMBERS = {
    "comparisons": ["speedup", "ci_low", "ci_high", "ci_level", "rounds", "p_value"]
    + ["p_adjusted", "rounds_to_decide", "first_call_s", "break_even_steps"],
    "variants": ["p50_ms", "p99_ms", "throughput", "data_ms", "peak_memory_mib", "warmup_s"],
}


def _float_columns(frame: pd.DataFrame, columns: list[str]) -> None:
    for column in columns:
        assert pd.api.types.is_float_dtype(frame[column]), (column, frame[column].dtype)
        assert not any(value is None for value in frame[column]), column


def test_a_number_that_does_not_exist_is_nan(tmp_path):
    """Two rounds: no estimate (NO DATA); the variant fails every trial: nothing measured."""
    make_sweep(tmp_path, rounds=2)
    _edit(tmp_path, "1", range(2), status="failed", samples=None)
    report = load(tmp_path)
    assert report.comparisons.loc[0, "verdict"] == "NO DATA"
    _float_columns(report.comparisons, NUMBERS["comparisons"])
    _float_columns(report.variants, NUMBERS["variants"])
    assert report.variants.set_index("name")["p50_ms"].isna().tolist() == [False, True, False]
    trials = report.trials_frame()
    numbers = ["session", "worker_generation", "worker_id", "steps", "p50_ms", "cost_ms"]
    _float_columns(trials, numbers)
    assert trials.loc[trials["name"] == "1", "p50_ms"].isna().all()


def test_the_report_shows_no_none_where_there_is_no_estimate(tmp_path):
    make_sweep(tmp_path, rounds=2)
    text = write_report(load(tmp_path)).read_text()
    assert "NO DATA" in text and "None" not in text and "nan" not in text


# --- (e) health as flags ----------------------------------------------------------------


def test_health_is_a_bool_per_kind_of_flag(tmp_path):
    report = h100("amp_gpu_warmup0.5s", tmp_path)
    v = report.variants.set_index("name")
    kinds = [f"health_{kind}" for kind in [*HEALTH_KINDS, "other"]]
    assert all(v[k].dtype == bool for k in ["healthy", *kinds])
    # amp=true: noisy steps and a GPU slowdown (sw_power_cap); the others: no flag
    assert v.loc["0", "health_noisy"] and v.loc["0", "health_throttled"]
    assert not v.loc["0", "healthy"] and v.loc["0", "health"]  # the text is kept
    assert v.loc["1", "healthy"] and not v.loc["1", kinds].any()
    c = report.comparisons
    assert c["healthy"].dtype == bool and not c.loc[0, "healthy"]


@pytest.mark.parametrize("name", H100_SWEEPS)
def test_every_flag_of_the_h100_sweeps_is_of_a_known_kind(tmp_path, name):
    report = h100(name, tmp_path)
    flags = [f for v in report.summary.variants for f in v.health]
    assert all(health_kind(f) != "other" for f in flags), flags
    assert not report.variants["health_other"].any()


def test_a_variant_without_an_ok_trial_is_not_healthy(tmp_path):
    make_sweep(tmp_path)
    _edit(tmp_path, "1", range(8), status="failed", samples=None)
    v = load(tmp_path).variants.set_index("name")
    assert v.loc["1", "health"] == "" and not v.loc["1", "healthy"]
    assert v.loc["0", "healthy"] and v.loc["sentinel", "healthy"]


def test_the_telemetry_flags_are_throttled():
    from perflab.analysis.health import telemetry_flags

    slow = TrialTelemetry(
        available=True, clock_ratio_median=0.5, throttle_share={"sw_power_cap": 0.5}
    )
    flags = telemetry_flags([slow, slow])
    assert len(flags) == 2 and {health_kind(f) for f in flags} == {"throttled"}
