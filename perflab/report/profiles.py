"""The report's profiler sections: per-variant profiles with their diagnosis, and per
comparison where the difference comes from (perflab.profile.diagnosis over profile.json files)."""

from __future__ import annotations

from typing import Any

from perflab.report.markdown_text import code, esc, table
from perflab.report.markdown_text import num as _num
from perflab.report.tables import Report


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
        o = p["overhead"]
        trace = (
            f"[trace]({traces[v.name]}) (Chrome/Perfetto, gzip)"
            if v.name in traces
            else esc(p.get("trace_note", "no trace"))
        )
        lines += [
            f"### {esc(v.label)}",
            "",
            f"{p['time_basis']}; a profiled step took {o['profiled_step_s'] * 1e3:.2f} ms "
            f"against {o['unprofiled_step_s'] * 1e3:.2f} ms unprofiled "
            f"({_num(o['ratio'], '.2f')}x profiler overhead); {trace}",
            "",
        ]
        total = sum(p["families_us"].values()) or 1.0
        rows = [
            [esc(f), f"{us / 1e3:.2f}", f"{us / total:.0%}"] for f, us in p["families_us"].items()
        ]
        lines += table(["kernel family", "ms (profiled window)", "share"], rows) + [""]
        key = "self_device_us" if p["device"] == "cuda" else "self_cpu_us"
        rows = [
            [
                esc(op["name"][:60]),
                esc(op["family"]),
                str(op["calls"]),
                f"{op[key] / 1e3:.2f}",
                esc(op["input_shapes"][:50]),
            ]
            for op in p["top_ops"][:8]
        ]
        heading = "device ms" if p["device"] == "cuda" else "self ms"
        lines += table(["top operator", "family", "calls", heading, "input shapes"], rows)
        lines += _kernel_lines(p) + _host_lines(p)
        lines += ["", *_diagnosis_lines(report, v.name, p), ""]
    return lines


def _kernel_lines(profile: dict[str, Any]) -> list[str]:
    """CUDA: the costliest kernels, each with the operator that launched it."""
    kernels = profile.get("top_kernels") or []
    if not kernels:
        return []
    rows = [
        [
            esc(k["name"][:70]),
            esc(k["family"]),
            esc(k["launched_by"][:40]),
            str(k["count"]),
            f"{k['device_us'] / 1e3:.2f}",
        ]
        for k in kernels[:8]
    ]
    return ["", *table(["top kernel", "family", "launched by", "count", "device ms"], rows)]


def _host_lines(profile: dict[str, Any]) -> list[str]:
    """Host-side record_function ranges: CPU wall time around work, not work."""
    ranges = [
        r for r in profile.get("host_annotations") or [] if not r["name"].startswith("perflab/")
    ]
    if not ranges:
        return []
    rows = [[esc(r["name"][:60]), str(r["count"]), f"{r['cpu_us'] / 1e3:.2f}"] for r in ranges[:5]]
    return [
        "",
        "Host-side ranges (record_function; CPU wall time, inclusive, not device work):",
        "",
        *table(["range", "count", "CPU ms"], rows),
    ]


def why_section(report: Report) -> list[str]:
    """Per comparison with both profiles: which kernel families gained or lost time."""
    from perflab.profile.diagnosis import delta_breakdown

    steps: dict[str, float] = {
        v.name: v.measured.step_ns.p50 for v in report.summary.variants if v.measured
    }
    lines = []
    for variant, base in report.experiment.plan.comparisons():
        vp, bp = report.profiles.get(variant.name), report.profiles.get(base.name)
        if not vp or not bp or variant.name not in steps or base.name not in steps:
            continue
        if "profiled_steps" not in vp or "profiled_steps" not in bp:
            continue  # profiles written before perflab recorded their step count
        measured = (steps[base.name] - steps[variant.name]) / 1e6
        d = delta_breakdown(bp, vp, measured)
        parts = ", ".join(
            f"{esc(f)} {ms:+.2f}" for f, ms in d["families_ms"].items() if abs(ms) >= 0.005
        )
        lines.append(
            f"- {esc(variant.label)} vs {esc(base.label)}: timed steps "
            f"{'saved' if measured >= 0 else 'lost'} {abs(measured):.2f} ms; profiled "
            f"change by family (ms per step, - = less time): {parts or 'none'}; "
            f"unexplained by the profiles: {d['unexplained_ms']:+.2f} ms"
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


def _diagnosis_lines(report: Report, name: str, profile: dict[str, Any]) -> list[str]:
    from perflab.profile.diagnosis import diagnose

    measured = report.summary.variant(name).measured
    if measured is None:
        return []
    d = diagnose(measured, profile)
    idle = "n/a" if d["idle_share"] is None else f"{d['idle_share']:.0%}"
    idle_name = "GPU idle" if d["device"] == "cuda" else "outside operators"
    lines = [
        f"Diagnosis: **{d['bottleneck']}**: {d['because']} (data wait "
        f"{d['data_wait_share']:.0%} of the median step; {idle_name} {idle} of the "
        f"profiled steps; copies and conversions {d['memory_movement_share']:.0%} and "
        f"elementwise/normalisation {d['elementwise_share']:.0%} of profiled time); "
        f"slowest phase: {d['slowest_phase'] or '-'}; top operations: "
        f"{esc(', '.join(d['top_operations'])) or '-'}."
    ]
    if d["hypotheses"]:
        lines += ["", "Hypotheses to test next (not facts):", ""]
        lines += [
            f"- {esc(h.split(': perflab')[0])}: {code('perflab' + h.split(': perflab')[1])}"
            if ": perflab" in h
            else f"- {esc(h)}"
            for h in d["hypotheses"]
        ]
    return lines
