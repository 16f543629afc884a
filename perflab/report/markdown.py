"""report.md: what a reviewer reads in a pull request, most important first.

GitHub-flavoured markdown with user values escaped and no absolute paths of the machine
that produced it, so the folder can be committed or attached as it is. Every section
renders typed values: the summary (perflab.formats.summary) and the rows that
perflab.report.rows derives from it, the plan and the records.
"""

from __future__ import annotations

import json
import math

from perflab.analysis.stats import MIN_PAIRED_ROUNDS
from perflab.config.plan import assignments
from perflab.formats.records import TrialRecord
from perflab.formats.summary import Comparison, Numerics
from perflab.formats.summary.variant import Measured
from perflab.report.artifacts import ProfilerFiles, files_section
from perflab.report.frames import NO_PROBE, PERCENTILES
from perflab.report.markdown_text import code, esc, table, tables_within
from perflab.report.markdown_text import num as _num
from perflab.report.memory_section import resources_section
from perflab.report.profiles import profiles_section, why_section
from perflab.report.rows import ComparisonRow, first_ok
from perflab.report.tables import Report
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


def _known(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _numerics_check(n: Numerics | None) -> str:
    """The headline's word on a variant's numerics. Outputs of different shapes have no
    error to show (compare_probes gives the reason instead), nor has a diverged model's
    NaN (null in summary.json)."""
    if n is None:
        return "numerics not checked"
    err = n.max_rel_err
    if err is not None and math.isfinite(err):
        detail = f"max rel err {err:.1e}"
    else:
        detail = esc(n.reason or "not compared")
    return f"numerics OK ({detail})" if n.ok else f"**numerics CHANGED** ({detail})"


def _what(row: ComparisonRow) -> str:
    """A comparison in the headline: its treatments, and its cell when there is one."""
    treatments = (assignments(row.variant.treatment), assignments(row.baseline.treatment))
    what = " vs ".join(map(esc, treatments))
    return what + (f" at {esc(assignments(row.variant.cell))}" if row.variant.cell else "")


def headline(report: Report) -> list[str]:
    level, lines = f"{report.summary.ci_level:.0%}", []
    for row in report.comparison_rows:
        c, e = row.comparison, row.comparison.estimate
        if e is None:
            lines.append(f"- {_what(row)}: no paired rounds, no estimate")
            continue
        ratio, said = _effect(e.speedup, c.verdict, c.delta)
        lines.append(
            f"- {_what(row)}: {ratio} [{e.ci_low:.3f}, {e.ci_high:.3f}] "
            f"({level} CI, {e.rounds} rounds) — **{c.verdict}**{said}; "
            f"{_numerics_check(c.numerics)}"
        )
        if row.interpreted:
            lines[-1] += f"; **{INTERPRETER_LABEL}**"
    return lines or ["- no comparisons: no swept knob has a baseline in this sweep"]


def _comparison(variant: str, baseline: str) -> str:
    """A comparison's cell: one label per line when they do not fit side by side."""
    return f"{esc(variant)} vs {esc(baseline)}"


def comparison_table(report: Report) -> list[str]:
    """Two tables: the verdicts with their intervals first, then each variant's checks
    (numerics, the knob's evidence, the first call and when it pays off). A comparison
    names its variant and baseline in one cell, which wraps between the labels: two long
    labels side by side would push the numbers off the page."""
    verdicts, checks = [], []
    for row in report.comparison_rows:
        c, e, n = row.comparison, row.comparison.estimate, row.comparison.numerics
        verdicts.append(
            [
                _comparison(row.variant.label, row.baseline.label),
                _num(e.speedup if e else None, ".3f"),
                f"[{_num(e.ci_low if e else None, '.3f')}, "
                f"{_num(e.ci_high if e else None, '.3f')}]",
                _verdict_text(c),
                f"{c.delta:.1%}",
                str(e.rounds) if e else "-",
                _num(c.p_adjusted, ".2g"),
            ]
        )
        checks.append(
            [
                esc(row.variant.label),
                "-" if n is None else ("OK" if n.ok else "CHANGED"),
                esc(row.knob_in_effect),
                _num(row.first_call_s, ".2f"),
                _break_even_text(row.break_even_steps),
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


def _verdict_text(c: Comparison) -> str:
    """The verdict, with the interval that gave it when that is not the plain t one."""
    if c.estimate is not None and c.estimate.interval != "t":
        return f"{c.verdict} ({c.estimate.interval})"
    return c.verdict


def _break_even_text(steps: float | None) -> str:
    return "-" if steps is None else f"~{steps:,.0f} steps"


def _phases(entries: list[Measured]) -> list[str]:
    """The step phases any variant has a median for, in the order they first appear:
    perflab's, or those a user's step marked (perflab.measure.steps.RESERVED_PHASES keeps
    them apart)."""
    names = dict.fromkeys(k for m in entries for k in m.phase_median_ns)
    return [k for k in names if any(_known(m.phase_median_ns.get(k)) for m in entries)]


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def _warmup_text(m: Measured) -> str:
    """The median warm-up and why the warm-ups ended ("-" in a version 1 summary)."""
    if m.warmup is None:
        return "-"
    stops = ", ".join(f"{why} {n}" for why, n in m.warmup.stops.items())
    return f"{m.warmup.median_s:.2f} ({stops})"


def variant_table(report: Report) -> list[str]:
    """The step times per variant; then, each in a table of its own, the median of each
    phase, the first call, warm-up and trial length; then the health flags, as a list
    (a flag is a sentence: in a cell it would make its row many lines tall)."""
    rows = report.variant_rows
    phases = _phases([r.summary.measured for r in rows if r.summary.measured is not None])
    times, phase_rows, trials, health = [], [], [], []
    for row in rows:
        v, m, label = row.summary, row.summary.measured, esc(row.summary.label)
        flags = esc("; ".join(v.health))
        if m is None:
            times.append([label, *["-"] * 6])
            phase_rows.append([label, *["-"] * len(phases)])
            trials.append([label, "-", "-", "-"])
            health.append(f"- {label}: {flags or str(len(v.failed)) + ' failed trial(s)'}")
            continue
        steps, bounded = m.step_ns, set(m.step_ns.bounded_percentiles)
        tail = [
            _num(getattr(steps, p) / 1e6, ".2f") + ("" if p in bounded else "*")
            for p in PERCENTILES
        ]
        times.append([label, *tail, f"{m.throughput:,.0f}", f"{m.peak_memory_bytes / 2**20:,.0f}"])
        phase_rows.append([label, *(_num(_ms(m.phase_median_ns.get(p)), ".2f") for p in phases)])
        timed = " ".join(map(str, m.trial_length.timed_steps if m.trial_length else []))
        trials.append([label, f"{m.first_call_ns / 1e9:.2f}", _warmup_text(m), timed])
        flags = "; ".join(h for h in (flags, INTERPRETER_LABEL if row.interpreted else "") if h)
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


def _sci(value: float | None, fmt: str) -> str:
    """A numerics figure; a diverged model's NaN (null in summary.json) shows as nan."""
    return format(float("nan") if value is None else value, fmt)


def _numerics_row(label: str, n: Numerics | None) -> list[str]:
    if n is None or not _known(n.max_abs_err):
        why = NO_PROBE if n is None else n.reason or "not compared"
        return [label, "-", "-", "-", "-", "-", esc(why)]
    return [
        label,
        _sci(n.max_abs_err, ".2e"),
        _sci(n.max_rel_err, ".2e"),
        _sci(n.cosine, ".6f"),
        _sci(n.loss_diff, "+.2e"),
        f"{_sci(n.tolerance, '.0e')} ({n.dtype})",
        "pass" if n.ok else "FAIL",
    ]


def numerics_table(report: Report) -> list[str]:
    rows = [
        _numerics_row(esc(row.variant.label), row.comparison.numerics)
        for row in report.comparison_rows
    ]
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


def baseline_config(report: Report, firsts: dict[str, TrialRecord | None]) -> list[str]:
    """The baseline's resolved config, folded: each variant differs by its overrides (a
    variant's with a finished trial, the first baseline's when it has one)."""
    finished = {label: r for label, r in firsts.items() if r is not None}
    baselines = [v.label for v in report.experiment.plan.variants if v.baseline is None]
    label = next((b for b in baselines if b in finished), next(iter(finished)))
    text = json.dumps(finished[label].config, indent=2, sort_keys=True).replace("`", "'")
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
        f"({s.stop_reason}; at least {sched.min_rounds}, at most "
        f"{sched.max_rounds}, target half-width {sched.target_half_width:.1%}, budget "
        f"{sched.time_budget_s:.0f} s). Tail percentiles marked * have fewer than 10 "
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
