"""The checks a trial runs after its timed block, where they cannot bias it: the numerics
probe (outputs, loss and gradient norm on a fixed batch, compared between variants by
perflab.analysis.numerics), the evidence pass (did the knobs reach the layers?) and the
memory of each phase of the step."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch

from perflab.config.schema import PerflabConfig
from perflab.formats.records import Probe, TrialRecord
from perflab.formats.trial_parts import PhaseReading
from perflab.measure import knobs, memory
from perflab.measure.resolve import Resolved
from perflab.measure.steps import (
    Prepared,
    Step,
    UserStep,
    call_model,
    phases_of,
    step_output,
    to_device,
)
from perflab.workloads.outputs import output_tensor, own_loss

PROBE_SAMPLE_SIZE = 4096


def numerics_probe(
    cfg: PerflabConfig,
    resolved: Resolved,
    prep: Prepared,
    snapshot: dict[str, torch.Tensor],
    step: Step | None = None,
) -> Probe:
    """Outputs, loss (and gradient norm in train mode) on the fixed probe batch, with the
    initial seeded weights restored, under every knob of the variant. A user's step
    (UserStep) runs once on it instead, and what it returns is the output."""
    prep.model.load_state_dict(snapshot)  # copies in place: compiled graphs stay valid
    x, y = prep.workload.probe
    x, y = prep.input_fn(x), to_device(y, prep.device, False)
    if isinstance(step, UserStep):
        return _user_step_probe(cfg, prep, step, (x, y))
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
    return _probe(cfg, output_tensor(out, cfg.model.output), loss, grad_norm)


def _user_step_probe(
    cfg: PerflabConfig, prep: Prepared, step: UserStep, batch: tuple[Any, Any]
) -> Probe:
    """The user's whole step on the probe batch (its optimizer steps too: the probe
    comes after the timed block); its output is compared, and the loss it carries (a
    ``loss`` field or key), else the output's mean. No gradient norm: a step zeroes its
    gradients where it likes."""
    if prep.optimizer is not None:
        prep.optimizer.zero_grad(set_to_none=True)
    out = step.run(batch)
    picked = step_output(out, cfg)
    carried = own_loss(out)
    loss = (carried if carried is not None else picked).detach().float().mean()
    return _probe(cfg, picked, loss, None)


def _probe(
    cfg: PerflabConfig, picked: torch.Tensor, loss: torch.Tensor, grad_norm: float | None
) -> Probe:
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
    cfg: PerflabConfig,
    resolved: Resolved,
    prep: Prepared,
    record: TrialRecord,
    step: Step | None = None,
) -> None:
    """Run the eager model once with layer hooks to see what the knobs did to its layers.

    Hooks on a compiled model would force a recompilation, so the pass uses the eager
    module under the same autocast and memory format; compile has its own evidence. A
    user's step (UserStep) runs whole instead, with the hooks, compiled code run eagerly
    (torch.compiler.set_stance("force_eager"), where torch has it): what the layers saw
    is what the user's step did with ctx.autocast() and the model.
    """
    x = prep.input_fn(prep.workload.probe[0])
    if isinstance(step, UserStep):
        batch = (x, to_device(prep.workload.probe[1], prep.device, False))
        with _eager(), knobs.observe_layers(prep.model) as seen:
            step.run(batch)
    else:
        with torch.no_grad(), knobs.observe_layers(prep.model) as seen, knobs.autocast(resolved):
            call_model(prep.model, x)
    amp = knobs.amp_evidence(resolved, seen)
    channels_last = knobs.channels_last_evidence(cfg.channels_last, seen)
    if isinstance(step, UserStep):
        for found in (amp, channels_last):
            found.detail += f" inside step={cfg.step}"
        if amp.ok is False and resolved.amp_dtype:
            amp.detail += " (run its forward under ctx.autocast())"
    record.evidence.update(amp=amp, channels_last=channels_last)


def _eager() -> contextlib.AbstractContextManager[Any]:
    """Compiled code run as eager code, so that layer hooks see it, without compiling."""
    set_stance = getattr(torch.compiler, "set_stance", None)  # torch >= 2.6
    return set_stance("force_eager") if set_stance else contextlib.nullcontext()


def memory_by_phase(
    cfg: PerflabConfig, resolved: Resolved, step: Step, prep: Prepared
) -> list[PhaseReading]:
    """One more step, after the timed block, reading memory at the end of every phase."""
    marks = memory.PhaseMemory(phases_of(cfg, step), resolved.device)
    step(prep.workload.batches, marks)
    return marks.rows
