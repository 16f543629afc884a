"""Console text for a single trial. Only the CLI prints it."""

from __future__ import annotations

from pathlib import Path

from perflab.records import TrialRecord
from perflab.stats import summarize_trial


def fmt_ns(ns: float) -> str:
    """A duration with a unit that keeps 3 significant digits readable."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    return f"{n / 2**20:,.0f} MiB"


def trial_summary(record: TrialRecord, path: Path) -> str:
    s = record.settings
    model = record.choices.get("model") or s.get("model", "?")
    head = (
        f"perflab: {model} {s.get('mode', '?')} on {s.get('device', '?')} "
        f"({s.get('threads', '?')} thread(s)), batch {s.get('batch_size', '?')}, "
        f"amp={s.get('amp_dtype') or 'off'}, compile={s.get('compile_mode') or 'off'}"
    )
    lines = [head]
    if record.samples is not None:
        t = summarize_trial(record)
        lines += [
            f"  step time   p50 {fmt_ns(t.p50_ns)}   p90 {fmt_ns(t.p90_ns)}   "
            f"p99 {fmt_ns(t.p99_ns)}   ({t.steps} steps in {record.samples.timed_s:.2f} s)",
            f"  throughput  {t.throughput:,.0f} samples/s",
            f"  first call  {fmt_ns(t.first_call_ns)}   peak memory "
            f"{fmt_bytes(t.peak_memory_bytes)} ({record.memory.get('kind', '?')})",
        ]
        if t.phase_median_ns:
            phases = ", ".join(f"{k} {fmt_ns(v)}" for k, v in t.phase_median_ns.items())
            lines.append(f"  phases (median): {phases}")
    failed_evidence = [k for k, e in record.evidence.items() if e.get("ok") is False]
    if failed_evidence:
        lines.append(f"  knobs NOT in effect: {', '.join(failed_evidence)}")
    for warning in record.warnings:
        lines.append(f"  warning: {warning}")
    if record.status != "ok":
        why = record.invalid_reason or (record.error.message if record.error else "")
        why = why.strip().splitlines()[0] if why.strip() else ""
        lines.append(f"  status: {record.status.upper()}: {why}")
    lines.append(f"  record: {path}")
    return "\n".join(lines)
