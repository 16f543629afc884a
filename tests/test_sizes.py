"""Sizes that cannot fit are refused before anything runs (perflab.measure.resolve, "sizes that
cannot fit"): the rules on fake machines, deterministic; then the real commands, a single
run and a sweep, on this one."""

from __future__ import annotations

import re
from pathlib import Path

import console_scripts
import pytest

from perflab.errors import ConfigError
from perflab.measure import resolve as resolve_mod
from perflab.measure import sizes
from perflab.measure.preflight import check_settings
from perflab.measure.sizes import (
    WORKER_BYTES,
    Machine,
    device_estimate,
    host_estimate,
    sample_bytes,
    size_limits,
)
from perflab.process.trial_request import TrialRequest

GIB = 2**30
# a small machine: 2 cores, 8 GiB free, no GPU
SMALL = Machine(cores=2, host_available=8 * GIB, device_free=None)


def refusal(cfg, machine: Machine = SMALL) -> ConfigError:
    """The ConfigError the config gets on ``machine``."""
    with pytest.raises(ConfigError) as caught:
        sizes.check_sizes(cfg, machine, [])
    return caught.value


def allowed_at_most(error: ConfigError) -> int:
    return int(re.search(r"allowed: at most (\d+)", str(error)).group(1))


# --- the estimate -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # 3 x 32 x 32 float32 and an int64 class id
        (["model=convnet"], 3 * 32 * 32 * 4 + 8),
        (["model=mlp"], 256 * 4 + 8),
        # 64 int64 tokens and 64 int64 next-token ids (the cpu sizes)
        (["model=transformer"], 64 * 8 + 64 * 8),
        # one float32 and one float32 target
        (["model=spin"], 4 + 4),
        (["model=mlp", "model.target.kind=regression"], 256 * 4 + 4),
    ],
)
def test_sample_bytes_follow_the_input_and_target(make_config, overrides, expected):
    assert sample_bytes(make_config(*overrides)) == expected


def test_host_estimate_counts_batches_workers_and_the_sampler(make_config):
    cfg = make_config("model=mlp", "batch_size=10", "num_workers=2", "data.num_samples=100")
    # the probe's batch, the step's, and 2 prefetched by each of the 2 workers
    batches = (2 + 2 * 2) * 10 * (256 * 4 + 8)
    assert host_estimate(cfg).need == batches + 2 * WORKER_BYTES + 100 * 48
    memory = make_config("model=mlp", "batch_size=10", "data=memory")
    assert host_estimate(memory).need == 2 * 10 * (256 * 4 + 8)  # no loader: no sampler
    own = make_config("model=mlp", "batch_size=10", "data.dataset=tests.tiny.nosuch")
    assert "data.num_samples" not in host_estimate(own).slopes  # its own length, unknown
    assert device_estimate(cfg).need == 10 * (256 * 4 + 8)  # the step's batch


# --- the limits on fake machines ----------------------------------------------------------


def test_a_batch_that_cannot_fit_is_refused_with_the_estimate_and_the_largest_that_fits(
    make_config,
):
    cfg = make_config("batch_size=1000000000000")
    error = refusal(cfg)
    assert error.field == "batch_size"
    assert str(error).startswith(
        "batch_size=1000000000000: needs at least 21.8 PiB of host memory (2 batches held at "
        "once, each 1000000000000 x 12296 bytes, the sampler's order of 2048 samples), more "
        "than the 8.0 GiB free; allowed: at most "
    )
    largest = allowed_at_most(error)
    fits = make_config(f"batch_size={largest}", "allow_unwise=true")
    assert host_estimate(fits).need <= 8 * GIB
    assert host_estimate(make_config(f"batch_size={largest + 1}")).need > 8 * GIB
    # allow_unwise lifts the soft limits only
    assert refusal(make_config("batch_size=1000000000000", "allow_unwise=true")).field == (
        "batch_size"
    )


def test_over_half_the_free_memory_is_unwise(make_config):
    # ~5.5 GiB of batches on a machine with 8 GiB free: fits, but not with a model on top
    cfg = make_config("batch_size=240000")
    error = refusal(cfg)
    assert "over half the 8.0 GiB free; the model's memory comes on top" in str(error)
    assert re.search(r"allowed: at most \d+, or at most \d+ with allow_unwise=true", str(error))
    warnings: list[str] = []
    sizes.check_sizes(make_config("batch_size=240000", "allow_unwise=true"), SMALL, warnings)
    assert len(warnings) == 1 and warnings[0].startswith("batch_size=240000: needs at least")


def test_workers_beyond_the_cores_are_unwise_and_far_beyond_refused(make_config):
    assert size_limits(make_config("num_workers=2"), SMALL) == []
    unwise = refusal(make_config("num_workers=3"))
    assert str(unwise) == (
        "num_workers=3: more workers than the 2 usable cores: they compete with the step; "
        "allowed: at most 2 (1 leaves a core to the step), or up to 8 (4 per core) with "
        "allow_unwise=true"
    )
    warnings: list[str] = []
    sizes.check_sizes(make_config("num_workers=8", "allow_unwise=true"), SMALL, warnings)
    assert warnings == [
        "num_workers=8: more workers than the 2 usable cores: they compete with the step "
        "(allow_unwise=true)"
    ]
    for unwise_too in ("false", "true"):
        error = refusal(make_config("num_workers=1000", f"allow_unwise={unwise_too}"))
        assert str(error).startswith(
            "num_workers=1000: far more workers than the 2 usable cores (1000 x 152.0 MiB = "
            "148.4 GiB of host memory); allowed: at most 2"
        )


def test_workers_whose_memory_cannot_fit_are_refused_on_a_machine_with_many_cores(
    make_config,
):
    many_cores = Machine(cores=64, host_available=4 * GIB, device_free=None)
    error = refusal(make_config("num_workers=30", "allow_unwise=true"), many_cores)
    assert error.field == "num_workers"
    assert "30 DataLoader workers x 152.0 MiB and their batches" in str(error)
    assert "more than the 4.0 GiB free" in str(error)
    largest = allowed_at_most(error)
    assert largest * WORKER_BYTES <= 4 * GIB < (largest + 1) * WORKER_BYTES


def test_a_batch_that_cannot_fit_on_the_gpu_is_refused(make_config):
    gpu = Machine(cores=16, host_available=128 * GIB, device_free=1 * GIB)
    error = refusal(make_config("batch_size=100000", "allow_unwise=true"), gpu)
    assert str(error).startswith(
        "batch_size=100000: needs at least 1.1 GiB of CUDA memory (one batch of 100000 x 12296 "
        "bytes), more than the 1.0 GiB free; allowed: at most 87324 here now"
    )


def test_a_sample_too_large_for_any_batch_names_the_shape(make_config):
    error = refusal(make_config("model.input.shape=[100000,100000]"))
    assert error.field == "model.input.shape"
    assert str(error).startswith("model.input.shape=[100000, 100000]: needs at least 2.3 TiB")
    assert str(error).endswith("allowed: a smaller sample (not even batch_size=1 fits)")


def test_a_sampler_too_large_names_data_num_samples(make_config):
    error = refusal(make_config("data.num_samples=1000000000000"))
    assert error.field == "data.num_samples"
    assert "the sampler's order of 1000000000000 samples" in str(error)


# --- what the machine says ---------------------------------------------------------------


def test_host_memory_is_memavailable_or_a_lower_cgroup_limit(monkeypatch, tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   20000000 kB\n")
    monkeypatch.setattr(sizes, "MEMINFO", str(meminfo))
    monkeypatch.setattr(sizes, "CGROUP_MEMORY_FILES", ())
    assert sizes.host_available_bytes() == 20000000 * 1024
    limit, usage = tmp_path / "memory.max", tmp_path / "memory.current"
    monkeypatch.setattr(sizes, "CGROUP_MEMORY_FILES", ((str(limit), str(usage)),))
    limit.write_text("max\n")  # cgroup v2 without a limit
    usage.write_text(f"{GIB}\n")
    assert sizes.host_available_bytes() == 20000000 * 1024
    limit.write_text(f"{4 * GIB}\n")
    assert sizes.host_available_bytes() == 3 * GIB
    monkeypatch.setattr(sizes, "MEMINFO", str(tmp_path / "missing"))
    monkeypatch.setattr(sizes, "CGROUP_MEMORY_FILES", ())
    assert sizes.host_available_bytes() is None  # no /proc: no memory limits


def test_the_gpus_free_memory_is_read_on_cuda_only(monkeypatch):
    monkeypatch.setattr(sizes.torch.cuda, "mem_get_info", lambda: (5 * GIB, 80 * GIB))
    assert sizes.machine_now("cuda").device_free == 5 * GIB
    assert sizes.machine_now("cpu").device_free is None

    def no_cuda() -> tuple[int, int]:
        raise AssertionError("Torch not compiled with CUDA enabled")  # as torch does

    monkeypatch.setattr(sizes.torch.cuda, "mem_get_info", no_cuda)
    assert sizes.device_free_bytes("cuda") is None  # the trial fails on its own


def test_this_machine_is_read_without_a_gpu_on_cpu():
    machine = sizes.machine_now("cpu")
    assert machine.cores >= 1 and machine.device_free is None
    assert machine.host_available is not None and machine.host_available > 0


# --- where the check runs -------------------------------------------------------------------


def test_resolve_and_the_sweeps_pre_check_refuse_sizes_that_cannot_fit(make_config, monkeypatch):
    monkeypatch.setattr(resolve_mod, "machine_now", lambda device: SMALL)
    cfg = make_config("batch_size=1000000000000")
    with pytest.raises(ConfigError, match=r"^batch_size=1000000000000: needs at least"):
        resolve_mod.resolve(cfg)
    with pytest.raises(ConfigError, match=r"^batch_size=1000000000000: needs at least"):
        check_settings(TrialRequest(cfg, {}, ""))


# --- the real commands on this machine -------------------------------------------------------

# Should the refusal ever break, the trial these commands start is killed within seconds,
# before its memory matters (a batch of 10**12 samples grew at ~23 MB/s)
NOTHING_RUNS = ("trial.min_s=0", "trial.max_s=1", "trial.timeout_s=20", "profile=off")


def one_error_line(result, prefix: str) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"perflab: error: {prefix}"), result.stderr
    return lines[0]


@pytest.mark.slow
def test_a_single_run_with_a_batch_that_cannot_fit_exits_2(tmp_path: Path):
    result = console_scripts.run(
        "perflab", "device=cpu", "batch_size=1000000000000", *NOTHING_RUNS, cwd=tmp_path
    )
    line = one_error_line(result, "batch_size=1000000000000: needs at least ")
    assert "of host memory" in line and "allowed: at most " in line
    assert not list(tmp_path.glob("outputs/*/*/trials/*"))


@pytest.mark.slow
def test_a_sweep_with_one_variant_that_cannot_fit_measures_nothing(tmp_path: Path):
    huge = 4 * 1000 * 1000 * 1000 * 1000
    result = console_scripts.run(
        "perflab",
        "-m",
        "device=cpu",
        "model=mlp",
        f"batch_size=8,{huge}",
        *NOTHING_RUNS,
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        cwd=tmp_path,
    )
    one_error_line(result, f"batch_size={huge}: needs at least ")
    assert not list((tmp_path / "sweep").glob("*/trials/*"))


@pytest.mark.slow
def test_workers_far_beyond_the_cores_are_refused_even_with_allow_unwise(tmp_path: Path):
    # one more than allow_unwise allows here, not 1000: harmless should the refusal break
    workers = sizes.MAX_WORKERS_PER_CORE * sizes.usable_cores() + 1
    result = console_scripts.run(
        "perflab",
        "device=cpu",
        f"num_workers={workers}",
        "allow_unwise=true",
        *NOTHING_RUNS,
        cwd=tmp_path,
    )
    line = one_error_line(result, f"num_workers={workers}: far more workers than the ")
    assert f"({workers} x 152.0 MiB = " in line and "allowed: at most " in line
