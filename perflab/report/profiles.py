"""The report's profiler sections: per-variant profiles with their diagnosis, and per
comparison where the difference comes from (perflab.profile.diagnosis over profile.json files)."""

from __future__ import annotations

from perflab.formats.profile_json import Profile
from perflab.profile.diagnosis import Breakdown, delta_breakdown, diagnose
from perflab.report.markdown_text import BR, code, esc, table
from perflab.report.markdown_text import num as _num
from perflab.report.tables import Report

# A profiled step costs 1.2-2x an unprofiled one on small CPU models here (the profiler's
# own host work; docs/design.md, "Profiling"). A profiled step beyond twice the timed
# median ran in another regime (the profiler's overhead dominating a short step, a cold
# process): its times describe that, not the timed step.
PROFILED_OFF_LIMIT = 2.0
# Where the profiles' change per step disagrees with the timed difference by more than the
# timed difference itself (and by more than this share of the baseline's step), their
# family attribution explains something else: it is not shown as the explanation.
ATTRIBUTION_SLACK = 0.05


def _timed_s(report: Report, name: str) -> float | None:
    """The variant's timed median step, in seconds."""
    variant = report.summary.variant(name)
    return variant.measured.step_ns.p50 / 1e9 if variant.measured else None


def _off_timed(report: Report, name: str, profile: Profile) -> float | None:
    """How many times the timed median a profiled step took, when beyond
    PROFILED_OFF_LIMIT; None otherwise."""
    timed = _timed_s(report, name)
    profiled = profile.overhead.profiled_step_s
    if not timed or profiled / timed <= PROFILED_OFF_LIMIT:
        return None
    return float(profiled / timed)


def profiles_section(report: Report, traces: dict[str, str]) -> list[str]:
    """Per variant, from its separate untimed profiling trial: where the time goes by
    kernel family and the top operators."""
    have = [
        (v, report.profiles.get(v.name))
        for v in report.experiment.plan.variants
        if report.profiles.get(v.name)
    ]
    if not have:
        return []
    lines = [
        "## Profiles (separate, untimed trials)",
        "",
        "Each variant ran once more under torch.profiler, in its own process, after "
        "the timed rounds; nothing here enters the statistics.",
        "",
    ]
    for v, p in have:
        assert p is not None
        o = p.overhead
        trace = (
            f"[trace]({traces[v.name]}) (Chrome/Perfetto, gzip)"
            if v.name in traces
            else esc(p.trace_file.trace_note or "no trace")
        )
        lines += [
            f"### {esc(v.label)}",
            "",
            f"{p.time_basis}; a profiled step took {o.profiled_step_s * 1e3:.2f} ms "
            f"against {o.unprofiled_step_s * 1e3:.2f} ms unprofiled "
            f"({_num(o.ratio, '.2f')}x profiler overhead); {trace}",
            "",
        ]
        off = _off_timed(report, v.name, p)
        if off is not None:
            timed_ms = (_timed_s(report, v.name) or 0.0) * 1e3
            lines += [
                f"> **Off its timed step**: a profiled step took {off:.1f}x the timed "
                f"median ({o.profiled_step_s * 1e3:.2f} ms against {timed_ms:.2f} ms), "
                f"beyond the profiler's usual overhead (up to {PROFILED_OFF_LIMIT:g}x): the "
                "times below describe the profiled run, not the timed steps.",
                "",
            ]
        total = sum(p.families_us.values()) or 1.0
        rows = [[esc(f), f"{us / 1e3:.2f}", f"{us / total:.0%}"] for f, us in p.families_us.items()]
        lines += table(["kernel family", "ms (profiled window)", "share"], rows) + [""]
        # the input shapes under the operator's name: a column of their own made the
        # table run off the page
        rows = [
            [
                _two_lines(op.name[:60], op.input_shapes[:50]),
                esc(op.family),
                str(op.calls),
                f"{(op.self_device_us if p.cuda else op.self_cpu_us) / 1e3:.2f}",
            ]
            for op in p.top_ops[:8]
        ]
        heading = "device ms" if p.cuda else "self ms"
        lines += table(["top operator (input shapes)", "family", "calls", heading], rows)
        lines += _kernel_lines(p) + _host_lines(p)
        lines += ["", *_diagnosis_lines(report, v.name, p), ""]
    return lines


def _kernel_lines(profile: Profile) -> list[str]:
    """CUDA: the costliest kernels, each with the operator that launched it."""
    kernels = profile.top_kernels or []
    if not kernels:
        return []
    # the operator that launched a kernel under its name: a 70-character kernel name and
    # a 40-character operator name side by side are wider than the page
    rows = [
        [
            _two_lines(k.name[:70], f"launched by {k.launched_by[:40]}"),
            esc(k.family),
            str(k.count),
            f"{k.device_us / 1e3:.2f}",
        ]
        for k in kernels[:8]
    ]
    return ["", *table(["top kernel (launched by)", "family", "count", "device ms"], rows)]


def _two_lines(first: str, second: str) -> str:
    """A cell of two lines, the second left out when empty."""
    return esc(first) + (f"{BR}{esc(second)}" if second else "")


def _host_lines(profile: Profile) -> list[str]:
    """Host-side record_function ranges: CPU wall time around work, not work."""
    ranges = [r for r in profile.host_annotations or [] if not r.name.startswith("perflab/")]
    if not ranges:
        return []
    rows = [[esc(r.name[:60]), str(r.count), f"{r.cpu_us / 1e3:.2f}"] for r in ranges[:5]]
    return [
        "",
        "Host-side ranges (record_function; CPU wall time, inclusive, not device work):",
        "",
        *table(["range", "count", "CPU ms"], rows),
    ]


def why_section(report: Report) -> list[str]:
    """Per comparison with both profiles: which kernel families gained or lost time."""
    steps: dict[str, float] = {
        v.name: v.measured.step_ns.p50 for v in report.summary.variants if v.measured
    }
    lines = []
    for variant, base in report.experiment.plan.comparisons():
        vp, bp = report.profiles.get(variant.name), report.profiles.get(base.name)
        if not vp or not bp or variant.name not in steps or base.name not in steps:
            continue
        if vp.profiled_steps is None or bp.profiled_steps is None:
            continue  # profiles written before perflab recorded their step count
        measured = (steps[base.name] - steps[variant.name]) / 1e6
        d = delta_breakdown(bp, vp, measured)
        head = (
            f"- {esc(variant.label)} vs {esc(base.label)}: timed steps "
            f"{'saved' if measured >= 0 else 'lost'} {abs(measured):.2f} ms"
        )
        why_not = _not_an_explanation(report, (variant.name, vp), (base.name, bp), d)
        if why_not:
            lines.append(f"{head}; {why_not}")
            continue
        parts = ", ".join(
            f"{esc(f)} {ms:+.2f}" for f, ms in d.families_ms.items() if abs(ms) >= 0.005
        )
        lines.append(
            f"- {esc(variant.label)} vs {esc(base.label)}: timed steps "
            f"{'saved' if measured >= 0 else 'lost'} {abs(measured):.2f} ms; profiled "
            f"change by family (ms per step, - = less time): {parts or 'none'}; "
            f"unexplained by the profiles: {d.unexplained_ms:+.2f} ms"
        )
    if not lines:
        return []
    return [
        "## Where the difference comes from",
        "",
        "From the separate profiling trials (per step: on CUDA the device time of every "
        "kernel, copy and fill, each counted once; on CPU the operators' self time, by "
        "family), set against the timed difference of median steps. The unexplained part "
        "is what the families do not hold: device idle time (on CPU, time outside "
        "operators) and the profiler's own overhead.",
        "",
        *lines,
        "",
    ]


def _not_an_explanation(
    report: Report,
    variant: tuple[str, Profile],
    base: tuple[str, Profile],
    d: Breakdown,
) -> str:
    """Why the profiles' family attribution does not explain this comparison's timed
    difference ("" when it may): a profiled step far off its timed median, or a profiled
    change that disagrees with the timed one by more than the timed difference itself.
    On a short step the profiler's overhead can move the families by ten times the
    timed difference (10 ms against 0.55 ms once), which no reader should take for its
    cause."""
    off = [
        f"{report.experiment.plan.by_name(name).label} ran {ratio:.1f}x its timed median"
        for name, profile in (variant, base)
        if (ratio := _off_timed(report, name, profile)) is not None
    ]
    measured, profiled = d.measured_saving_ms, d.profiled_saving_ms
    base_step_ms = (_timed_s(report, base[0]) or 0.0) * 1e3
    disagree = abs(profiled - measured) > max(abs(measured), ATTRIBUTION_SLACK * base_step_ms)
    if not off and not disagree:
        return ""
    reasons = list(off)
    if disagree:
        reasons.append(
            f"the profiles' change per step, {profiled:+.2f} ms saved, is not the timed one"
        )
    return (
        f"no family attribution shown ({'; '.join(reasons)}): something other than the "
        "timed difference dominates these profiles, on a short step usually the profiler's "
        "own overhead; profile a longer step (a larger batch) to see where it comes from"
    )


def _diagnosis_lines(report: Report, name: str, profile: Profile) -> list[str]:
    measured = report.summary.variant(name).measured
    if measured is None:
        return []
    d = diagnose(measured, profile)
    s = d.signals
    idle = "n/a" if s.idle_share is None else f"{s.idle_share:.0%}"
    idle_name = "GPU idle" if s.device == "cuda" else "outside operators"
    lines = [
        f"Diagnosis: **{d.bottleneck}**: {d.because} (data wait "
        f"{s.data_wait_share:.0%} of the median step; {idle_name} {idle} of the "
        f"profiled steps; copies and conversions {s.memory_movement_share:.0%} and "
        f"elementwise/normalisation {s.elementwise_share:.0%} of profiled time); "
        f"slowest phase: {d.slowest_phase or '-'}; top operations: "
        f"{esc(', '.join(d.top_operations)) or '-'}."
    ]
    if d.hypotheses:
        lines += ["", "Hypotheses to test next (not facts):", ""]
        lines += [
            f"- {esc(h.split(': perflab')[0])}: {code('perflab' + h.split(': perflab')[1])}"
            if ": perflab" in h
            else f"- {esc(h)}"
            for h in d.hypotheses
        ]
    return lines
