"""The report's plots, as PNG files beside report.md (linked by relative path).

White figure backgrounds: a transparent PNG with dark text disappears in GitHub's dark
theme, a white card reads in both. matplotlib is imported here only, and only when a
report is written (importing pyplot costs ~1.2 s).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from perflab.analysis import stats, trials
from perflab.formats.atomic import replaced_whole
from perflab.report.markdown_text import visible
from perflab.report.tables import Report

DPI = 110


def _figure(height: float, width: float = 7.5) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height), facecolor="white")
    ax.set_facecolor("white")
    ax.grid(True, alpha=0.3)
    return fig, ax


def _save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    try:
        with replaced_whole(path) as tmp:  # a full disk leaves no 0-byte plot behind
            fig.savefig(tmp, dpi=DPI, facecolor="white", format="png")
    finally:
        plt.close(fig)


def forest(report: Report, path: Path) -> bool:
    """Speedups with their intervals on a log axis, the equivalence band shaded."""
    rows = [(c.variant, c.estimate) for c in report.summary.comparisons if c.estimate]
    sentinel = report.summary.sentinel
    if sentinel:
        rows.append(("A/A sentinel", sentinel.estimate))
    rows = [(label, e) for label, e in rows if e.speedup]
    if not rows:
        return False
    fig, ax = _figure(0.5 * len(rows) + 1.4)
    delta = report.summary.delta
    ax.axvspan(1 - delta, 1 + delta, color="tab:gray", alpha=0.2, label=f"band +-{delta:.1%}")
    ax.axvline(1.0, color="black", lw=0.8)
    for i, (_, e) in enumerate(rows):
        low, high = e.ci_low, e.ci_high or e.speedup
        ax.errorbar(
            e.speedup,
            i,
            xerr=[[e.speedup - low], [high - e.speedup]],
            fmt="o",
            color="tab:blue",
            capsize=4,
        )
    _label_rows(ax, [label for label, _ in rows])
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(
        FuncFormatter(lambda x, _: f"{x:g}") if _narrow(ax) else NullFormatter()
    )
    ax.set_xlabel(f"speedup over baseline (log scale), {report.summary.ci_level:.0%} CI")
    ax.legend(loc="best", fontsize=8)
    _save(fig, path)
    return True


def _narrow(ax: Any) -> bool:
    """A log axis spanning less than a factor of 10 has no major ticks inside: label the
    minor ones instead."""
    low, high = ax.get_xlim()
    return high / low < 10


# Beyond this many lines a legend covers the plot: the tables name the variants instead.
MAX_LEGEND = 12


def _legend_below(ax: Any) -> None:
    if len(ax.get_lines()) <= MAX_LEGEND:
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)


def _costs(report: Report) -> dict[str, dict[int, float]]:
    metric = report.summary.metric
    return {
        v.label: {
            r: trials.trial_cost(t, metric)
            for r, t in report.trials[v.name].items()
            if t.status == "ok"
        }
        for v in report.experiment.plan.variants
    }


def rounds(report: Report, path: Path) -> bool:
    """Each trial's number by round: drift, bimodality and outlier trials show here."""
    costs = _costs(report)
    if not any(costs.values()):
        return False
    fig, ax = _figure(4.2)
    for label, by_round in costs.items():
        if by_round:
            xs = sorted(by_round)
            ax.plot(xs, [by_round[r] / 1e6 for r in xs], "o-", ms=3, lw=0.8, label=visible(label))
    ax.set_xlabel("round")
    unit = "ms per step (median)" if report.summary.metric == "latency" else "ms per sample"
    ax.set_ylabel(unit)
    _legend_below(ax)
    _save(fig, path)
    return True


def distributions(report: Report, path: Path) -> bool:
    """Empirical CDF of every timed step of each variant, pooled over its trials."""
    fig, ax = _figure(4.2)
    drawn = False
    for v in report.experiment.plan.variants:
        steps = [
            s / 1e6
            for t in report.trials[v.name].values()
            if t.samples
            for s in stats.per_step_ns(t.samples.step_ns, t.samples.steps_per_sample)
        ]
        if steps:
            xs = np.sort(steps)
            ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", label=visible(v.label))
            drawn = True
    if drawn:
        ax.set_xlabel("step time, ms")
        ax.set_ylabel("fraction of steps")
        _legend_below(ax)
    _save(fig, path)
    return drawn


def phases(report: Report, path: Path) -> bool:
    """Median time of each phase of the step, stacked, per variant."""
    variants = [
        (v.label, v.measured.phase_median_ns)
        for v in report.summary.variants
        if v.measured and v.measured.phase_median_ns
    ]
    if not variants:
        return False
    names = list(dict.fromkeys(k for _, phases in variants for k in phases))
    fig, ax = _figure(0.45 * len(variants) + 1.4)
    left = np.zeros(len(variants))
    for name in names:
        widths = np.array([(phases.get(name) or 0.0) / 1e6 for _, phases in variants])
        ax.barh(range(len(variants)), widths, left=left, label=name)
        left += widths
    _label_rows(ax, [label for label, _ in variants])
    ax.set_xlabel("median phase time, ms")
    ax.legend(fontsize=7, loc="best")
    _save(fig, path)
    return True


def scaling(report: Report, path: Path) -> bool:
    rows = report.summary.scaling
    if len(rows) < 2:
        return False
    fig, ax = _figure(3.4)
    xs = [float(r.batch_size) for r in rows]
    ys = [r.throughput for r in rows]
    err = [
        [y - r.ci_low for y, r in zip(ys, rows, strict=True)],
        [r.ci_high - y for y, r in zip(ys, rows, strict=True)],
    ]
    ax.errorbar(xs, ys, yerr=err, fmt="o-", capsize=4)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("samples/s")
    _save(fig, path)
    return True


def memory(report: Report, path: Path) -> bool:
    variants = [
        (v.label, v.measured.peak_memory_bytes)
        for v in report.summary.variants
        if v.measured and v.measured.peak_memory_bytes
    ]
    if not variants:
        return False
    fig, ax = _figure(0.45 * len(variants) + 1.4)
    megabytes = [peak / 2**20 for _, peak in variants]
    ax.barh(range(len(variants)), megabytes, color="tab:purple")
    _label_rows(ax, [label for label, _ in variants])
    ax.set_xlabel("peak memory, MiB")
    _save(fig, path)
    return True


def _label_rows(ax: Any, labels: list[str]) -> None:
    """One horizontal bar per variant, labelled (on one line), first at the top."""
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels([visible(label) for label in labels])
    ax.invert_yaxis()


PLOTS: dict[str, tuple[str, Callable[[Report, Path], bool]]] = {
    "forest.png": ("Speedups with their confidence intervals", forest),
    "rounds.png": ("Each trial by round", rounds),
    "distributions.png": ("Step-time distributions", distributions),
    "phases.png": ("Where the step's time goes", phases),
    "scaling.png": ("Throughput against batch size", scaling),
    "memory.png": ("Peak memory", memory),
}


def draw_all(report: Report, out: Path) -> list[tuple[str, str]]:
    """Write every plot that has data; return (file name, title) of those written."""
    written = []
    for name, (title, draw) in PLOTS.items():
        if draw(report, out / name):
            written.append((name, title))
        else:
            (out / name).unlink(missing_ok=True)
    return written
