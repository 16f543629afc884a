"""report.md: what a reviewer reads in a pull request, most important first.

GitHub-flavoured markdown with user values escaped and no absolute paths of the machine
that produced it, so the folder can be committed or attached as it is.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from perflab.analysis.stats import MIN_PAIRED_ROUNDS
from perflab.report.artifacts import ProfilerFiles, files_section
from perflab.report.markdown_text import code, esc, table, tables_within
from perflab.report.markdown_text import num as _num
from perflab.report.memory_section import resources_section
from perflab.report.profiles import profiles_section, why_section
from perflab.report.tables import Report, first_ok
from perflab.report.time_section import isolation_text, time_section


def _effect(speedup: float, verdict: str, delta: float) -> tuple[str, str]:
    """The headline's words for an estimate, agreeing with its verdict: "faster" only for
    FASTER, "slower" only for SLOWER; the ratio alone otherwise, the verdict then said in
    words. Returns (the ratio's words, what follows the verdict)."""
    if verdict == "FASTER":
        return f"{speedup:.2f}x faster", ""
    if verdict == "SLOWER":
        return f"{1 / speedup:.2f}x slower", ""
    if verdict == "EQUIVALENT":
        return f"{speedup:.2f}x", f" within +-{delta:.1%}"
    if verdict == "INCONCLUSIVE":
        return f"{speedup:.2f}x", ": neither faster nor slower could be shown"
    return f"{speedup:.2f}x", ""


# fused=triton on CPU: the kernels ran in Triton's interpreter (the trial's evidence says so)
INTERPRETER_LABEL = "timing not representative (Triton interpreter on CPU)"


def _timing_label(report: Report, name: str) -> str:
    record = first_ok(report.trials.get(name, {}))
    fused = (record.evidence.get("fused") or {}) if record else {}
    return INTERPRETER_LABEL if fused.get("timing_representative") is False else ""


def _numerics_check(n: dict[str, Any]) -> str:
    """The headline's word on a variant's numerics. Outputs of different shapes have no
    error to show (compare_probes gives the reason instead): the table's row may lack the
    column altogether, or hold NaN there when other rows have it."""
    if n.get("ok") is None:
        return "numerics not checked"
    err = n.get("max_rel_err")
    measured = isinstance(err, (int, float)) and math.isfinite(err)
    detail = f"max rel err {err:.1e}" if measured else esc(str(n.get("reason", "not compared")))
    return f"numerics OK ({detail})" if n["ok"] else f"**numerics CHANGED** ({detail})"


def headline(report: Report) -> list[str]:
    s, lines = report.summary, []
    level = f"{s.ci_level:.0%}"
    numerics = {r["variant"]: r for r in report.numerics.to_dict("records")}
    names = {v.label: v.name for v in report.experiment.plan.variants}
    for c in report.comparisons.to_dict("records"):
        what = f"{esc(c['treatment'])} vs {esc(c['baseline_treatment'])}"
        if c["cell"]:
            what += f" at {esc(c['cell'])}"
        if c["speedup"] is None or (isinstance(c["speedup"], float) and math.isnan(c["speedup"])):
            lines.append(f"- {what}: no paired rounds, no estimate")
            continue
        check = _numerics_check(numerics.get(c["variant"], {}))
        ratio, said = _effect(c["speedup"], c["verdict"], c["delta"])
        lines.append(
            f"- {what}: {ratio} [{c['ci_low']:.3f}, {c['ci_high']:.3f}] "
            f"({level} CI, {c['rounds']} rounds) — **{c['verdict']}**{said}; {check}"
        )
        if label := _timing_label(report, names.get(c["variant"], "")):
            lines[-1] += f"; **{label}**"
    return lines or ["- no comparisons: no swept knob has a baseline in this sweep"]


def _comparison(variant: Any, baseline: Any) -> str:
    """A comparison's cell: one label per line when they do not fit side by side."""
    return f"{esc(variant)} vs {esc(baseline)}"


def comparison_table(report: Report) -> list[str]:
    """Two tables: the verdicts with their intervals first, then each variant's checks
    (numerics, the knob's evidence, the first call and when it pays off). A comparison
    names its variant and baseline in one cell, which wraps between the labels: two long
    labels side by side would push the numbers off the page."""
    numerics = {r["variant"]: r for r in report.numerics.to_dict("records")}
    verdicts, checks = [], []
    for c in report.comparisons.to_dict("records"):
        n = numerics.get(c["variant"], {})
        verdicts.append(
            [
                _comparison(c["variant"], c["baseline"]),
                _num(c["speedup"], ".3f"),
                f"[{_num(c['ci_low'], '.3f')}, {_num(c['ci_high'], '.3f')}]",
                _verdict_text(c),
                f"{c['delta']:.1%}",
                str(c["rounds"]),
                _num(c["p_adjusted"], ".2g"),
            ]
        )
        checks.append(
            [
                esc(c["variant"]),
                "-" if n.get("ok") is None else ("OK" if n["ok"] else "CHANGED"),
                esc(c["knob_in_effect"]),
                _num(c["first_call_s"], ".2f"),
                _break_even_text(c["break_even_steps"]),
            ]
        )
    header = ["comparison", "speedup", "CI", "verdict", "band", "rounds", "p (adjusted)"]
    return [
        *table(header, verdicts),
        "",
        "Checks of each variant against its baseline:",
        "",
        *table(["variant", "numerics", "knob in effect", "first call s", "pays off after"], checks),
    ]


def _verdict_text(c: dict[str, Any]) -> str:
    """The verdict, with the interval that gave it when that is not the plain t one."""
    interval = c.get("interval")
    if isinstance(interval, str) and interval != "t":
        return f"{c['verdict']} ({interval})"
    return str(c["verdict"])


def _break_even_text(steps: Any) -> str:
    if steps is None or (isinstance(steps, float) and math.isnan(steps)):
        return "-"
    return f"~{steps:,.0f} steps"


# the percentiles' columns of the variants' frame; every other NAME_ms column is a phase
PERCENTILES = ("p50", "p90", "p95", "p99")


def _measured(v: dict[str, Any]) -> bool:
    return "p50_ms" in v and not pd.isna(v.get("p50_ms"))


def _phases(variants: list[dict[str, Any]]) -> list[str]:
    """The step phases any variant has a median for, in the frame's order: perflab's, or
    those a user's step marked (perflab.measure.steps.RESERVED_PHASES keeps them apart)."""
    return list(
        dict.fromkeys(
            k[:-3]
            for v in variants
            for k in v
            if k.endswith("_ms") and k[:-3] not in PERCENTILES and not pd.isna(v[k])
        )
    )


def variant_table(report: Report) -> list[str]:
    """The step times per variant; then, each in a table of its own, the median of each
    phase, the first call, warm-up and trial length; then the health flags, as a list
    (a flag is a sentence: in a cell it would make its row many lines tall)."""
    variants = report.variants.to_dict("records")
    phases = _phases(variants)
    times, phase_rows, trials, health = [], [], [], []
    for v in variants:
        label = esc(v["variant"])
        if not _measured(v):
            times.append([label, *["-"] * 6])
            phase_rows.append([label, *["-"] * len(phases)])
            trials.append([label, "-", "-", "-"])
            health.append(f"- {label}: {esc(v['health']) or str(v['failed']) + ' failed trial(s)'}")
            continue
        bounded = set(str(v["bounded_percentiles"]).split())
        tail = [_num(v[f"{p}_ms"], ".2f") + ("" if p in bounded else "*") for p in PERCENTILES]
        times.append([label, *tail, f"{v['throughput']:,.0f}", f"{v['peak_memory_mib']:,.0f}"])
        phase_rows.append([label, *(_num(v.get(f"{p}_ms"), ".2f") for p in phases)])
        trials.append(
            [
                label,
                f"{v['first_call_s']:.2f}",
                f"{v['warmup_s']:.2f} ({v['warmup_stops']})",
                str(v["timed_steps"]),
            ]
        )
        flags = "; ".join(h for h in (esc(v["health"]), _timing_label(report, v["name"])) if h)
        if flags:
            health.append(f"- {label}: {flags}")
    lines = table(
        ["variant", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "samples/s", "peak MiB"], times
    )
    if phases:
        lines += ["", "Median time of each phase of the step, ms:", ""]
        lines += tables_within(["variant", *map(esc, phases)], phase_rows)
    lines += ["", "First call, warm-up and the timed steps of a trial:", ""]
    lines += table(["variant", "first call s", "warm-up s (why it ended)", "timed steps"], trials)
    lines += ["", *(["Health flags:", "", *health] if health else ["Health flags: none."])]
    return lines


def numerics_table(report: Report) -> list[str]:
    rows = []
    for n in report.numerics.to_dict("records"):
        if n.get("ok") is None or "max_abs_err" not in n or pd.isna(n.get("max_abs_err")):
            rows.append(
                [
                    esc(n["variant"]),
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    esc(n.get("reason", "no probe")),
                ]
            )
            continue
        rows.append(
            [
                esc(n["variant"]),
                f"{n['max_abs_err']:.2e}",
                f"{n['max_rel_err']:.2e}",
                f"{n['cosine']:.6f}",
                f"{n['loss_diff']:+.2e}",
                f"{n['tolerance']:.0e} ({n['dtype']})",
                "pass" if n["ok"] else "FAIL",
            ]
        )
    # a row per variant, as in the comparisons' checks: its baseline is its comparison's
    # (two long labels side by side would push the errors off the page)
    return [
        "Each variant's outputs against its baseline's (its comparison above):",
        "",
        *table(
            [
                "variant",
                "max abs err",
                "max rel err",
                "cosine",
                "loss diff",
                "tolerance",
                "check",
            ],
            rows,
        ),
    ]


ENV_KEYS = (
    "torch",
    "python",
    "cuda",
    "cpu_model",
    "usable_cpus",
    "cuda_devices",
    "hostname",
    "git_commit",
    "git_dirty",
)


def conditions_section(report: Report) -> list[str]:
    firsts = {v.label: first_ok(report.trials[v.name]) for v in report.experiment.plan.variants}
    records = [r for r in firsts.values() if r is not None]
    if not records:
        return ["No trial finished: nothing to describe."]
    env = records[0].environment
    same_env = all(all(r.environment.get(k) == env.get(k) for k in ENV_KEYS) for r in records)
    same_cond = all(r.conditions == records[0].conditions for r in records)
    lines = [
        f"- environment identical across variants: {'yes' if same_env else '**NO**'}; "
        f"conditions (threads, matmul precision, TF32, cudnn flags, seed) identical: "
        f"{'yes' if same_cond else '**NO**'}"
    ]
    # the host name stays out: a shared report should not reveal more of the machine
    lines += [
        f"- {k}: {esc(env.get(k)) if env.get(k) not in (None, '', []) else '-'}"
        for k in ENV_KEYS
        if k != "hostname"
    ]
    lines.append(
        f"- threads: {records[0].conditions.get('threads')}, interop threads: "
        f"{records[0].conditions.get('interop_threads')}"
    )
    loads = [x for r in records for x in r.load_start + r.load_end]
    lines.append(f"- load average seen: {min(loads, default=0):.2f} to {max(loads, default=0):.2f}")
    argv = env.get("argv") or []
    lines.append("- command: " + code(" ".join(["perflab", *map(str, argv[1:])])))
    lines.append("- variants (Hydra overrides):")
    lines += [
        f"  - {esc(v.label)}: {code(' '.join(v.overrides))}"
        for v in report.experiment.plan.variants
    ]
    warnings = sorted({w for r in records for w in r.warnings})
    lines += [f"- warning: {esc(w)}" for w in warnings]
    return lines + baseline_config(report, firsts)


def baseline_config(report: Report, firsts: dict[str, Any]) -> list[str]:
    """The baseline's resolved config, folded: each variant differs by its overrides."""
    label, record = next(
        (
            (v.label, firsts[v.label])
            for v in report.experiment.plan.variants
            if v.baseline is None and firsts[v.label] is not None
        ),
        next(((k, r) for k, r in firsts.items() if r is not None)),
    )
    text = json.dumps(record.config, indent=2, sort_keys=True).replace("`", "'")
    return [
        "",
        f"<details><summary>Resolved config of {esc(label)}; each variant differs "
        "from it by its overrides above</summary>",
        "",
        "```json",
        text,
        "```",
        "",
        "</details>",
    ]


def method_section(report: Report) -> list[str]:
    s, sched = report.summary, report.experiment.schedule
    workers = s.isolation is not None and s.isolation.mode == "worker"
    # with warm workers the analysis's unit is a worker generation (its rounds' mean)
    unit, units = ("per-generation", "worker generations") if workers else ("per-round", "rounds")
    metric = (
        "the median step time of each trial"
        if s.metric == "latency"
        else "the timed nanoseconds per sample of each trial (stalls count)"
    )
    return [
        f"Each round ran one trial of every variant in a freshly shuffled order "
        f"({isolation_text(s.isolation)}). Every trial had its own random heap layout and, "
        f"after its process's first call (timed apart), a warm-up that lasted until the "
        f"step time was steady (or its cap); "
        f"the first trial of each configuration fixed the timed steps of its later ones, "
        f"and a hidden copy of a baseline (A/A sentinel) ran in every round. "
        f"Per trial, one number: {metric}. Speedup = baseline / variant, estimated as the "
        f"exponential of the mean {unit} log-ratio, with a Student t interval at "
        f"{s.ci_level:.0%} (from {MIN_PAIRED_ROUNDS} paired {units} on; a 20 %-trimmed "
        f"interval when a round is an outlier; the estimate of a model that holds the "
        f"preceding variant equal when a carry-over is flagged), Holm-adjusted "
        f"across comparisons. Verdicts use the practical band delta = {s.delta:.1%} "
        f"(schedule.delta): FASTER if the interval is above 1 + delta, SLOWER if below "
        f"1 - delta, EQUIVALENT if inside, INCONCLUSIVE otherwise. The A/A sentinel checks "
        f"the method and never widens the band: outside it, the run is UNRELIABLE; "
        f"excluding 1 inside it, a bias note. The effect of the variant that ran just "
        f"before each trial (carry-over) is estimated from the shuffled order and flagged "
        f"below p = 1 % (Holm). The run stopped after {s.rounds} rounds "
        f"({s.stop_reason}; at least {sched['min_rounds']}, at most "
        f"{sched['max_rounds']}, target half-width {sched['target_half_width']:.1%}, budget "
        f"{sched['time_budget_s']:.0f} s). Tail percentiles marked * have fewer than 10 "
        f"samples beyond them and are descriptive only. Details: perflab's "
        f"docs/experiments.md.",
    ]


def render(
    report: Report,
    plots: list[tuple[str, str]] | None = None,
    extra: list[str] | None = None,
    files: ProfilerFiles | None = None,
) -> str:
    """The markdown; ``plots`` are (file name, title) of PNGs written beside it, ``files``
    the relative links of the profiler's traces and memory snapshots."""
    s = report.summary
    lines = ["# perflab report", ""]
    if s.stop_reason in ("running", "interrupted", "config error"):
        lines += [
            f"> **Incomplete**: the sweep did not finish (state: {esc(s.stop_reason)}); "
            f"this report covers the trials on disk.{_missing(report)}",
            "",
        ]
    for reason in s.unreliable:
        lines += [f"> **UNRELIABLE**: {esc(reason)}", ""]
    for note in s.health:
        lines += [f"> Health: {esc(note)}", ""]
    if s.label:
        lines += [f"> Label: {esc(s.label)}", ""]
    lines += ["## Headline", "", *headline(report), ""]
    if s.sentinel:
        e = s.sentinel.estimate
        lines += [
            f"A/A sentinel: {e.speedup:.3f}x [{e.ci_low:.3f}, {e.ci_high:.3f}] {e.verdict}; "
            f"noise floor {s.sentinel.noise_floor:.1%} (information; the band stays "
            f"+-{s.delta:.1%}).",
            "",
        ]
    lines += ["## Comparisons", "", *comparison_table(report), ""]
    lines += ["## Variants", "", *variant_table(report), ""]
    if s.scaling:
        rows = [
            [
                esc(r.batch_size),
                esc(r.variant),
                f"{r.throughput:,.0f}",
                f"[{r.ci_low:,.0f}, {r.ci_high:,.0f}]",
            ]
            for r in s.scaling
        ]
        lines += [
            "## Throughput by batch size",
            "",
            *table(["batch size", "variant", "samples/s", "CI"], rows),
            "",
        ]
    if plots:
        lines += ["## Plots", ""]
        for name, title in plots:
            lines += [f"### {title}", "", f"![{title}]({name})", ""]
    lines += resources_section(report)
    lines += time_section(report)
    lines += why_section(report)
    files = files or ProfilerFiles()
    lines += profiles_section(report, files.traces)
    lines += files_section(report, files)
    lines += ["## Numerics", "", *numerics_table(report), ""]
    lines += ["## Evidence and conditions", "", *conditions_section(report), ""]
    lines += extra or []
    lines += ["## Method", "", *method_section(report), ""]
    return "\n".join(lines)


def _missing(report: Report) -> str:
    """Which variants have fewer trials on disk than the most complete one."""
    counts = {v.label: len(report.trials[v.name]) for v in report.experiment.plan.variants}
    most = max(counts.values(), default=0)
    short = [f"{esc(label)} has {n} of {most}" for label, n in counts.items() if n < most]
    return f" Missing trials: {'; '.join(short)}." if short else ""
