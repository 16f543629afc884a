"""Turn the validated config into concrete settings for this machine (needs torch).

Runs inside the trial process before anything is built: device ``auto`` becomes cpu or
cuda, ``amp=true`` becomes a dtype, and settings that are impossible here raise
:class:`ConfigError` (exit 2, nothing measured) while legal-but-unwise ones add a warning
that lands in the record and on the console.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

import torch

from perflab.config.schema import HFConfig, PerflabConfig
from perflab.errors import ConfigError
from perflab.measure.sizes import check_sizes, machine_now, usable_cores

AMP_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class Resolved:
    # "cpu" or "cuda"
    device: str
    # torch dtype name used by autocast ("bfloat16", "float16"), or None when amp is off
    amp_dtype: str | None
    # torch.compile mode, or None when compile is off
    compile_mode: str | None
    # settings that are legal but unwise, with what to do about them
    warnings: list[str] = field(default_factory=list)


def _cpu_has_fast_fp16() -> bool:
    # fp16 autocast on a CPU without AVX512-FP16 / AMX-FP16 is emulated: the default
    # convnet step took 1.93 s in fp16 against 91 ms in fp32 and 55 ms in bf16 on this
    # project's avx512_bf16 machine (docs/configuration.md).
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_fp16" in flags or "amx_fp16" in flags


def cuda_available(_: object = None) -> bool:
    """What device=auto means. perflab.config.schema.cuda_available asks it in a child of the
    fork server, so the launching process never imports torch."""
    return torch.cuda.is_available()


def _resolve_device(requested: str) -> str:
    has_cuda = torch.cuda.is_available()
    if requested == "cuda" and not has_cuda:
        raise ConfigError(
            "device", "cuda", "auto or cpu (torch.cuda.is_available() is False here)", "no CUDA"
        )
    if requested == "auto":
        return "cuda" if has_cuda else "cpu"
    return requested


def _resolve_amp(cfg: PerflabConfig, device: str, warnings: list[str]) -> str | None:
    if cfg.amp == "off":
        return None
    if cfg.amp == "true":
        if device == "cpu" or torch.cuda.is_bf16_supported():
            return "bfloat16"
        return "float16"
    if cfg.amp == "fp16" and device == "cpu" and not _cpu_has_fast_fp16():
        message = (
            "fp16 autocast on a CPU without AVX512-FP16/AMX-FP16 is emulated and runs many "
            "times slower than fp32 (21x on the default convnet); use amp=bf16 (or amp=true)"
        )
        if not cfg.allow_unwise:
            raise ConfigError(
                "amp",
                "fp16",
                "off, bf16, true on this cpu (allow_unwise=true runs it anyway)",
                "unwise on this cpu",
            )
        warnings.append(message)
    return AMP_DTYPES[cfg.amp]


def _check_fused(cfg: PerflabConfig, device: str, warnings: list[str]) -> None:
    if cfg.fused == "off":
        return
    # find_spec, not import: importing Triton takes a while and is not needed to know
    if importlib.util.find_spec("triton") is None:
        raise ConfigError(
            "fused",
            cfg.fused,
            "off, or triton once Triton is installed (pip install triton)",
            "Triton is not installed",
        )
    if device == "cpu":
        warnings.append(
            "fused=triton on cpu runs Triton's interpreter: correct, but its timing is not "
            "representative"
        )


def _check_hf(cfg: PerflabConfig, device: str) -> None:
    """model=hf: transformers installed (else one line naming the extra), and a model
    that can be built here with the attention implementation asked for."""
    if isinstance(cfg.model, HFConfig):
        from perflab.workloads import hf  # imports transformers, which nothing else needs

        hf.check(cfg.model, device, cfg.mode)


def _note_device_defaults(cfg: PerflabConfig, device: str, warnings: list[str]) -> None:
    """Say which defaults the fields the user did not set took, when they are not the
    cpu ones perflab always had, and when they do not match the device the trial got."""
    composed = "cuda" if cfg.cuda_defaults else "cpu"
    if composed != device:  # device=auto composed on another machine (a submit host)
        warnings.append(
            f"the config took the {composed} defaults where perflab started, but this trial "
            f"runs on {device}: set device={device} to get the {device} defaults "
            "(docs/configuration.md, Defaults by device)"
        )
    elif cfg.cuda_defaults:
        why = "device=auto found CUDA" if cfg.device == "auto" else "device=cuda"
        warnings.append(f"cuda defaults ({why}): {CUDA_DEFAULTS}")


# What the cuda defaults are and why, said once per run (conf/device/, docs/configuration.md)
CUDA_DEFAULTS = (
    "the fields you did not set take a GPU-bound workload, model=transformer (d_model 1024, "
    "16 heads, 4 layers, seq_len 256) with data=memory, so the step measures the GPU rather "
    "than the data loader; model=convnet data=synthetic are the cpu defaults, and "
    "+experiment=dataloader studies the loader (docs/configuration.md, Defaults by device)"
)


def _warn_unwise(cfg: PerflabConfig, device: str, warnings: list[str]) -> None:
    cores = usable_cores()
    if cfg.threads > cores:
        warnings.append(f"threads={cfg.threads} exceeds the {cores} usable cores")
    if cfg.pin_memory and cfg.data.source == "memory":
        warnings.append(
            "pin_memory=true has no effect with data=memory (no DataLoader runs); add "
            "data=synthetic to pin the loader's batches"
        )
    if device == "cpu":
        if cfg.pin_memory and cfg.data.source == "loader":
            warnings.append("pin_memory=true has no effect without an accelerator")
        if cfg.cudnn_benchmark:
            warnings.append("cudnn_benchmark=true has no effect on cpu")
        if cfg.compile == "reduce-overhead":
            warnings.append(
                "compile=reduce-overhead adds CUDA graphs only on cuda; on cpu it "
                "behaves like compile=default"
            )


def resolve(cfg: PerflabConfig) -> Resolved:
    device = _resolve_device(cfg.device)
    warnings: list[str] = []
    _note_device_defaults(cfg, device, warnings)
    amp_dtype = _resolve_amp(cfg, device, warnings)
    _check_fused(cfg, device, warnings)
    _check_hf(cfg, device)
    check_sizes(cfg, machine_now(device), warnings)
    _warn_unwise(cfg, device, warnings)
    compile_mode = None if cfg.compile == "off" else cfg.compile
    return Resolved(device, amp_dtype, compile_mode, warnings)
