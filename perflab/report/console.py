"""Console text for a single trial. Only the CLI prints it."""

from __future__ import annotations

from pathlib import Path

from perflab.analysis.stats import MIN_PAIRED_ROUNDS
from perflab.analysis.steady import last
from perflab.analysis.trials import summarize_trial
from perflab.config.user_code import workload_name
from perflab.formats.records import Samples, TrialRecord
from perflab.formats.summary import Comparison, Estimate, Isolation, Summary
from perflab.formats.trial_parts import TrialSettings
from perflab.report.time_section import PARTS, rounds


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
    s = TrialSettings.of(record.settings)  # {} in a record its trial could not write
    model = workload_name(record.choices.get("model") or s.model or "?", record.config)
    head = (
        f"perflab: {model} {s.mode or '?'} on {s.device or '?'} "
        f"({s.threads or '?'} thread(s)), batch {s.batch_size or '?'}, "
        f"amp={s.amp_dtype or 'off'}, compile={s.compile_mode or 'off'}"
    )
    lines = [head]
    if record.samples is not None:
        t = summarize_trial(record)
        lines += [
            f"  step time   p50 {fmt_ns(t.p50_ns)}   p90 {fmt_ns(t.p90_ns)}   "
            f"p99 {fmt_ns(t.p99_ns)}   ({t.steps} steps in {record.samples.timed_s:.2f} s)",
            f"  throughput  {t.throughput:,.0f} samples/s",
            f"  first call  {fmt_ns(t.first_call_ns)}   peak memory "
            f"{fmt_bytes(t.peak_memory_bytes)} ({record.memory.kind or '?'})",
            _warm_up_line(record.samples),
        ]
        if t.phase_median_ns:
            phases = ", ".join(f"{k} {fmt_ns(v)}" for k, v in t.phase_median_ns.items())
            lines.append(f"  phases (median): {phases}")
    failed_evidence = [k for k, e in record.evidence.items() if e.ok is False]
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


def _ratio(x: float) -> str:
    return f"{x:.3f}x" if x < 10 else f"{x:.1f}x"


def _ci(e: Estimate) -> str:
    return f"[{e.ci_low:.3f}, {e.ci_high:.3f}]"


def _comparison_row(c: Comparison) -> list[str]:
    e = c.estimate
    if e is None:
        why = f"fewer than {MIN_PAIRED_ROUNDS} paired rounds"
        return [c.variant, c.baseline, "-", "-", c.verdict, why]
    note = c.note or ""
    if e.verdict == "INCONCLUSIVE" and not note:
        more = e.rounds_to_decide
        note = f"~{more} rounds would likely decide" if more else "effect sits on the band edge"
    if e.interval != "t":
        why = {"trimmed": "outlier rounds", "carry-over model": "carry-over"}.get(e.interval, "")
        note = (note + "; " if note else "") + f"{e.interval} interval ({why})"
    if e.distribution_sensitive:
        note = (note + "; " if note else "") + "distribution-sensitive (robust CI disagrees)"
    return [c.variant, c.baseline, _ratio(e.speedup), _ci(e), e.verdict, note]


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def experiment_table(summary: Summary) -> str:
    """The console view of summary.json: one line per comparison, then the sentinel."""
    level = f"{summary.ci_level:.0%}"
    metric = {"latency": "median step time per trial", "throughput": "time per sample per trial"}[
        summary.metric
    ]
    lines = [
        f"perflab experiment: {summary.rounds} rounds, stopped: {summary.stop_reason} "
        f"({summary.elapsed_s:.0f} s); metric: {summary.metric} ({metric}); "
        f"speedup = baseline / variant; {level} CI; band +-{summary.delta:.1%}"
    ]
    if summary.label:
        lines.append(f"  label: {summary.label}")
    for warning in summary.unreliable:
        lines.append(f"  UNRELIABLE: {warning}")
    header = ["variant", "baseline", "speedup", f"{level} CI", "verdict", ""]
    rows = [_comparison_row(c) for c in summary.comparisons]
    if rows:
        lines += _table([header, *rows])
    else:
        lines.append("  no comparisons: no swept knob has a baseline in this sweep")
    if summary.scaling:
        lines.append(f"  throughput by batch size ({level} CI over trials):")
        rows = [
            [
                str(r.batch_size),
                r.variant,
                f"{r.throughput:,.0f}",
                f"[{r.ci_low:,.0f}, {r.ci_high:,.0f}]",
            ]
            for r in summary.scaling
        ]
        lines += _table([["batch_size", "variant", "samples/s", f"{level} CI"], *rows])
    s = summary.sentinel
    if s:
        lines.append(
            f"  A/A sentinel: {_ratio(s.estimate.speedup)} {_ci(s.estimate)} "
            f"{s.estimate.verdict}; noise floor +-{s.noise_floor:.1%} (information: the band "
            f"stays +-{summary.delta:.1%})"
        )
    if summary.isolation is not None and summary.isolation.trials:
        lines.append(f"  {_time_line(summary.isolation)}")
    for note in summary.health:
        lines.append(f"  health: {note}")
    for v in summary.variants:
        if v.failed:
            first = next(iter(v.failed.values()))
            lines.append(f"  FAILED trials in {v.label}: {len(v.failed)} ({first})")
        for flag in v.health:
            lines.append(f"  health, {v.label}: {flag}")
    return "\n".join(lines)


def _time_line(iso: Isolation) -> str:
    """Where a trial's time went, on average: what warm workers save shows as the build
    and first call of their later trials costing nothing."""
    how = (
        f"warm workers serving {rounds(iso.trials_per_worker)} each"
        if iso.mode == "worker"
        else "a fresh process each"
    )
    parts = ", ".join(
        f"{name} {iso.cost_s[key] / iso.trials:.3f} s"
        for key, name in PARTS.items()
        if key in iso.cost_s
    )
    return f"time per trial ({iso.trials} trials, {how}): {parts}"


def _warm_up_line(samples: Samples) -> str:
    """The warm-up's time and steps, less the window that opened the timed block."""
    kept_steps = sum(last(samples.warmup_sample_steps, samples.warmup_kept))
    line = (
        f"  warm-up     {samples.warmup_s:.2f} s, "
        f"{sum(samples.warmup_sample_steps) - kept_steps} steps ({samples.warmup_stop})"
    )
    if kept_steps:
        line += f", then {kept_steps} it judged steady, which open the timed block"
    return line
