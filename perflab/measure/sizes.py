"""Sizes that cannot fit on this machine, refused before anything is built.

num_workers=1000 set off the kernel's OOM killer on the shared machine twice, and
batch_size=10**12 grew a trial's memory at ~23 MB/s until something gave. Sizes are
checked against this machine (in the trial process: perflab.measure.resolve) before anything is
built. The estimate is a lower bound: the data a trial must hold, never the model's
weights or activations. An estimate above the free memory, or workers far beyond the
cores, is refused always; an estimate above half the free memory, or more workers than
cores, is unwise: refused unless allow_unwise=true, which runs it with a warning.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import torch

from perflab.config.schema import PerflabConfig, TokenInputSpec
from perflab.errors import ConfigError

MIB = 2**20

# Private memory of one DataLoader worker: Private_Clean + Private_Dirty in
# /proc/PID/smaps_rollup (pages no other process shares), read 12 s into a 12 s trial of
# the default convnet with 1, 2 and 4 workers and of the mlp with 2 (device=cpu, Python
# 3.11, torch 2.13, this project's 2-core machine, 2026-11-23): 155,600 to 157,000 kB,
# 152 MiB, in every worker. A trial process starts its workers with the forkserver
# method it inherits from perflab's trial processes, so each worker imports torch afresh
# and its cost hardly depends on the model: num_workers=1000 asks for ~150 GiB.
WORKER_BYTES = 152 * MIB
# batches each worker keeps ready: DataLoader's prefetch_factor, 2 unless set, and
# perflab's loader (perflab.workloads.data.build_loader) does not set it
PREFETCH_BATCHES = 2
# batches a trial holds at the least: the numerics probe's, kept for the whole trial,
# and the one the step runs on
BATCHES_HELD = 2
# the synthetic loader's sampler holds a shuffled order of every sample: a torch.randperm
# (8 bytes a sample) turned into a list of Python ints (40); 48.2 bytes measured at 10**7
SAMPLER_BYTES_PER_SAMPLE = 48
# bytes of one input element; a class id is an int64 (torch.randint's dtype); the
# regression and none targets are one float32 per sample
ELEMENT_BYTES = {"float32": 4, "int64": 8}
CLASS_ID_BYTES = 8
SCALAR_TARGET_BYTES = 4
# Workers beyond the usable cores add no loading throughput to a CPU-bound dataset, only
# memory and contention with the step. allow_unwise=true allows up to this many per core
# (a dataset of your own that waits on I/O may gain from a few more), never more.
MAX_WORKERS_PER_CORE = 4
# above this share of the free memory an estimate is unwise: the model's weights and
# activations come on top of the data it counts
UNWISE_MEMORY_SHARE = 0.5
# the smallest value of each size the estimates name (perflab.config.rules's minimums)
SIZE_MINIMUMS = {"batch_size": 1, "num_workers": 0, "data.num_samples": 1}


@dataclass(frozen=True)
class Machine:
    """What the size limits are checked against, read where the trial runs."""

    # CPUs this process may run on
    cores: int
    # bytes the host can give without swapping; None where /proc/meminfo is missing
    host_available: int | None
    # bytes free on the CUDA device (torch.cuda.mem_get_info); None on cpu
    device_free: int | None


@dataclass(frozen=True)
class Estimate:
    """Bytes the trial's data needs at the least in one memory. It grows linearly with
    each size: ``slopes`` holds the bytes one more unit of a field adds."""

    memory: str
    need: int
    slopes: dict[str, int]
    # what the estimate counts, in words
    counted: str


@dataclass(frozen=True)
class Limit:
    """A limit the config breaks on this machine; a hard one is refused even with
    allow_unwise=true, a soft one only without it."""

    field: str
    value: Any
    problem: str
    allowed: str
    hard: bool


def usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


# MemAvailable: what the kernel can give without swapping (page cache it may drop included)
MEMINFO = "/proc/meminfo"


def _meminfo_available() -> int | None:
    try:
        with open(MEMINFO) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


# A container's memory limit binds before the host's MemAvailable does: its limit and
# usage, cgroup v2 then v1 (v1 writes a number near 2**63 for "no limit").
CGROUP_MEMORY_FILES = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)


def _cgroup_headroom() -> int | None:
    for limit_file, usage_file in CGROUP_MEMORY_FILES:
        try:
            with open(limit_file) as f:
                limit = f.read().strip()
            with open(usage_file) as f:
                usage = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 2**60:
            return max(int(limit) - usage, 0)
    return None


def host_available_bytes() -> int | None:
    """MemAvailable, or the headroom under this process's cgroup memory limit if lower."""
    figures = [b for b in (_meminfo_available(), _cgroup_headroom()) if b is not None]
    return min(figures) if figures else None


def device_free_bytes(device: str) -> int | None:
    """Free bytes on the CUDA device; None on cpu, and where CUDA cannot say (a torch
    built without it, a driver that fails to start): the trial then fails at its first
    use of the device, with a record."""
    if device != "cuda":
        return None
    try:
        return int(torch.cuda.mem_get_info()[0])
    except (AssertionError, RuntimeError):  # what torch raises for each of the two
        return None


def machine_now(device: str) -> Machine:
    return Machine(usable_cores(), host_available_bytes(), device_free_bytes(device))


def sample_bytes(cfg: PerflabConfig) -> int:
    """Bytes of one sample's input and target, as model.input and model.target say."""
    model = cfg.model
    inputs = math.prod(model.input.shape) * ELEMENT_BYTES[model.input.dtype]
    if isinstance(model.input, TokenInputSpec):
        # model=hf's dict: input_ids, an attention_mask as large, and the labels, which
        # are the target too (perflab.workloads.data.TokenDataset)
        inputs = 2 * inputs + math.prod(model.target.shape) * CLASS_ID_BYTES
    if model.target.kind == "classes":
        return inputs + math.prod(model.target.shape) * CLASS_ID_BYTES
    return inputs + SCALAR_TARGET_BYTES


def _size(n: float) -> str:
    """Bytes in binary units, as free(1) and the records' memory figures count them."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def host_estimate(cfg: PerflabConfig) -> Estimate:
    """The batches held at once (two, and each worker's prefetched ones), each worker's
    own memory, and the synthetic loader's sampler."""
    per_sample = sample_bytes(cfg)
    batch = cfg.batch_size * per_sample
    workers = cfg.num_workers if cfg.data.source == "loader" else 0
    held = BATCHES_HELD + PREFETCH_BATCHES * workers
    need = held * batch + workers * WORKER_BYTES
    slopes = {"batch_size": held * per_sample}
    counted = [f"{held} batches held at once, each {cfg.batch_size} x {per_sample} bytes"]
    if workers:
        slopes["num_workers"] = WORKER_BYTES + PREFETCH_BATCHES * batch
        counted.append(f"{workers} DataLoader workers x {_size(WORKER_BYTES)} and their batches")
    if cfg.data.source == "loader" and cfg.data.dataset is None:
        # a dataset of your own has its own length, unknown before it is built
        need += cfg.data.num_samples * SAMPLER_BYTES_PER_SAMPLE
        slopes["data.num_samples"] = SAMPLER_BYTES_PER_SAMPLE
        counted.append(f"the sampler's order of {cfg.data.num_samples} samples")
    return Estimate("host memory", need, slopes, ", ".join(counted))


def device_estimate(cfg: PerflabConfig) -> Estimate:
    """The batch the step runs on, moved to the device."""
    per_sample = sample_bytes(cfg)
    counted = f"one batch of {cfg.batch_size} x {per_sample} bytes"
    return Estimate("CUDA memory", cfg.batch_size * per_sample, {"batch_size": per_sample}, counted)


def _value(cfg: PerflabConfig, field_name: str) -> int:
    node: Any = cfg
    for part in field_name.split("."):  # data.num_samples
        node = getattr(node, part)
    return int(node)


def _largest(cfg: PerflabConfig, estimate: Estimate, field_name: str, budget: float) -> int:
    """The largest value of the field whose estimate fits ``budget`` bytes, the other
    sizes as they are."""
    slope = estimate.slopes[field_name]
    rest = estimate.need - slope * _value(cfg, field_name)
    return int((budget - rest) // slope)


def _at_most(largest: int, field_name: str) -> str:
    return f"at most {largest}" if largest >= SIZE_MINIMUMS[field_name] else "no value"


def memory_limit(cfg: PerflabConfig, estimate: Estimate, free: int) -> Limit | None:
    """The limit ``estimate`` breaks in ``free`` bytes, if any, named after the size that
    contributes most; the sample's shape when not even batch_size=1 fits."""
    if estimate.need <= UNWISE_MEMORY_SHARE * free:
        return None
    name = max(estimate.slopes, key=lambda k: estimate.slopes[k] * _value(cfg, k))
    hard = estimate.need > free
    fits = _largest(cfg, estimate, name, free)
    wise = _largest(cfg, estimate, name, UNWISE_MEMORY_SHARE * free)
    needs = f"needs at least {_size(estimate.need)} of {estimate.memory} ({estimate.counted})"
    budget = f"more than the {_size(free)} free" if hard else f"over half the {_size(free)} free"
    problem = f"{needs}, {budget}" + ("" if hard else "; the model's memory comes on top")
    if name == "batch_size" and (fits if hard else wise) < 1:
        shape = list(cfg.model.input.shape)
        allowed = "a smaller sample (not even batch_size=1 fits)"
        return Limit("model.input.shape", shape, problem, allowed, hard)
    if hard:
        allowed = (
            f"{_at_most(fits, name)} here now, other sizes as they are "
            f"({_at_most(wise, name)} without allow_unwise=true)"
        )
    else:
        allowed = f"{_at_most(wise, name)}, or {_at_most(fits, name)} with allow_unwise=true"
    return Limit(name, _value(cfg, name), problem, allowed, hard)


def worker_limit(cfg: PerflabConfig, cores: int) -> Limit | None:
    """More DataLoader workers than cores is unwise; far more is refused."""
    workers, most = cfg.num_workers, MAX_WORKERS_PER_CORE * cores
    if workers <= cores:
        return None
    hard = workers > most
    problem = (
        f"far more workers than the {cores} usable cores ({workers} x "
        f"{_size(WORKER_BYTES)} = {_size(workers * WORKER_BYTES)} of host memory)"
        if hard
        else f"more workers than the {cores} usable cores: they compete with the step"
    )
    allowed = (
        f"at most {cores} ({max(cores - 1, 1)} leaves a core to the step), or up to "
        f"{most} ({MAX_WORKERS_PER_CORE} per core) with allow_unwise=true"
    )
    return Limit("num_workers", workers, problem, allowed, hard)


def size_limits(cfg: PerflabConfig, machine: Machine) -> list[Limit]:
    """Every size limit the config breaks on ``machine``, hard ones first."""
    found = [worker_limit(cfg, machine.cores)]
    if machine.host_available is not None:
        found.append(memory_limit(cfg, host_estimate(cfg), machine.host_available))
    if machine.device_free is not None:
        found.append(memory_limit(cfg, device_estimate(cfg), machine.device_free))
    return sorted((limit for limit in found if limit), key=lambda limit: not limit.hard)


def check_sizes(cfg: PerflabConfig, machine: Machine, warnings: list[str]) -> None:
    """Refuse a size that cannot fit on ``machine``, and an unwise one unless
    allow_unwise=true, which turns it into a warning."""
    for limit in size_limits(cfg, machine):
        if limit.hard or not cfg.allow_unwise:
            raise ConfigError(limit.field, limit.value, limit.allowed, limit.problem)
        warnings.append(f"{limit.field}={limit.value}: {limit.problem} (allow_unwise=true)")
