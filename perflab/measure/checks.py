"""The checks a trial runs after its timed block, where they cannot bias it: the numerics
probe (outputs, loss and gradient norm on a fixed batch, compared between variants by
perflab.analysis.numerics), the evidence pass (did the knobs reach the layers?) and the
memory of each phase of the step."""

from __future__ import annotations

import math
from typing import Any

import torch

from perflab.config.schema import PerflabConfig
from perflab.measure import knobs, memory
from perflab.measure.resolve import Resolved
from perflab.measure.steps import (
    INFER_PHASES,
    TRAIN_PHASES,
    Prepared,
    call_model,
    make_step,
    to_device,
)
from perflab.records import Probe, TrialRecord
from perflab.workloads.outputs import output_tensor

PROBE_SAMPLE_SIZE = 4096


def numerics_probe(
    cfg: PerflabConfig, resolved: Resolved, prep: Prepared, snapshot: dict[str, torch.Tensor]
) -> Probe:
    """Outputs, loss (and gradient norm in train mode) on the fixed probe batch, with the
    initial seeded weights restored, under every knob of the variant."""
    prep.model.load_state_dict(snapshot)  # copies in place: compiled graphs stay valid
    x, y = prep.workload.probe
    x, y = prep.input_fn(x), to_device(y, prep.device, False)
    autocast = knobs.autocast(resolved)
    grad_norm = None
    if cfg.mode == "train":
        assert prep.optimizer is not None
        prep.optimizer.zero_grad(set_to_none=True)
        with autocast:
            out = call_model(prep.runner, x)
            loss = prep.workload.loss_fn(out, y)
        loss.backward()
        grads = [p.grad.detach().double() for p in prep.model.parameters() if p.grad is not None]
        grad_norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
        prep.optimizer.zero_grad(set_to_none=True)
    else:
        with torch.inference_mode(), autocast:
            out = call_model(prep.runner, x)
            loss = prep.workload.loss_fn(out, y)
    picked = output_tensor(out, cfg.model.output)
    flat = picked.detach().reshape(-1)
    stride = max(1, flat.numel() // PROBE_SAMPLE_SIZE)
    return Probe(
        batch_size=cfg.batch_size,
        loss=float(loss.detach().float()),
        output_shape=list(picked.shape),
        output_dtype=str(flat.dtype).removeprefix("torch."),
        output_norm=float(flat.double().norm()),
        output_sample=[float(v) for v in flat[::stride][:PROBE_SAMPLE_SIZE].float().cpu()],
        grad_norm=grad_norm,
    )


def evidence_pass(
    cfg: PerflabConfig, resolved: Resolved, prep: Prepared, record: TrialRecord
) -> None:
    """Run the eager model once with layer hooks to see what the knobs did to its layers.

    Hooks on a compiled model would force a recompilation, so the pass uses the eager
    module under the same autocast and memory format; compile has its own evidence.
    """
    x = prep.input_fn(prep.workload.probe[0])
    with torch.no_grad(), knobs.observe_layers(prep.model) as seen, knobs.autocast(resolved):
        call_model(prep.model, x)
    record.evidence["amp"] = knobs.amp_evidence(resolved, seen)
    record.evidence["channels_last"] = knobs.channels_last_evidence(cfg.channels_last, seen)


def memory_by_phase(cfg: PerflabConfig, resolved: Resolved, prep: Prepared) -> list[dict[str, Any]]:
    """One more step, after the timed block, reading memory at the end of every phase."""
    phases = TRAIN_PHASES if cfg.mode == "train" else INFER_PHASES
    marks = memory.PhaseMemory(phases, resolved.device)
    make_step(cfg, resolved, prep)(prep.workload.batches, marks)
    return marks.rows
