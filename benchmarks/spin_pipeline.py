"""Ground truth through the whole pipeline: real `perflab -m` sweeps of the spin workload.

A spin step waits a set number of microseconds (the host busy-waits on CPU; a kernel
calibrated against CUDA events spins on the GPU on CUDA), so the true speedup between
two variants is the ratio of their step_us plus the step's own constant overhead c (the
loop, the multiply, the marks): (base + c) / (variant + c). c is estimated from each
sweep (median step time minus step_us) and printed. Everything
runs as a user would run it: the shipped presets, perflab's launcher, fresh trial
processes, records, analysis.

1. Known ratios: sweeps of a 10710 us base against faster and slower variants (true
   speedups 1.02, 1.05, 1.25 and 0.980, 0.952, 0.800); per comparison the estimate,
   interval, verdict and whether the interval held the truth; then the counts of
   EQUIVALENT and wrong-direction verdicts.
2. A/A: sweeps of one variant; each sweep's hidden A/A sentinel is a real A/A
   comparison. False FASTER/SLOWER with a Clopper-Pearson interval.
3. Scheduler overhead: the gap between one trial's end and the next one's start.

    python benchmarks/spin_pipeline.py [--preset quick default] [--sweeps 2] [--aa 10]
                                       [--device auto|cpu|cuda]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path

from perflab.analysis.simulation import clopper_pearson

PERFLAB = shutil.which("perflab") or "perflab"
BASE_US = 10710
STEPS_US = (10500, 10200, 8568, 10925, 11246, 13388)
SPIN = ("model=spin", "data=memory", "mode=infer")
TREATMENT = f"+schedule.treatments={{model.step_us:{BASE_US}}}"


def sweep(cwd: Path, preset: str, device: str, steps_us: tuple[int, ...]) -> Path:
    """One sweep over ``steps_us`` (one value: a single variant and its A/A sentinel)."""
    args = [PERFLAB, "-m", *SPIN, f"model.step_us={','.join(map(str, steps_us))}"]
    args += [f"preset={preset}", f"device={device}", "profile=false"]
    if len(steps_us) > 1:
        args.append(TREATMENT)
    subprocess.run(args, cwd=cwd, check=True, capture_output=True, text=True)
    return max(cwd.glob("multirun/*/*/summary.json"), key=lambda p: p.stat().st_mtime).parent


def overhead_us(summary: dict) -> float:
    """The step's own constant cost beyond the spin: the median over variants of their
    median step time minus their step_us. It pulls every true ratio towards 1."""
    return statistics.median(
        v["step_ns"]["p50"] / 1000 - int(v["label"].split("=")[1].split()[0])
        for v in summary["variants"]
        if "step_ns" in v
    )


def ratios(cwd: Path, preset: str, device: str, sweeps: int) -> list[Path]:
    dirs, equivalent, wrong, covered, total = [], 0, 0, 0, 0
    for _ in range(sweeps):
        start = time.monotonic()
        d = sweep(cwd, preset, device, (BASE_US, *STEPS_US))
        summary = json.loads((d / "summary.json").read_text())
        c_us = overhead_us(summary)
        print(
            f"  sweep: {summary['rounds']} rounds, {time.monotonic() - start:.0f} s; the step's "
            f"own overhead beyond the spin: {c_us:.0f} us"
        )
        for c in summary["comparisons"]:
            step_us = int(c["variant"].split("=")[1])
            nominal = BASE_US / step_us
            true = (BASE_US + c_us) / (step_us + c_us)
            hit = c["ci_low"] <= true <= c["ci_high"]
            print(
                f"    nominal {nominal:.4f}, with the overhead {true:.4f}: estimate "
                f"{c['speedup']:.4f} [{c['ci_low']:.4f}, {c['ci_high']:.4f}] {c['verdict']} "
                f"({c['interval']}), bias {c['speedup'] / true - 1:+.3%}, covered: {hit}"
            )
            equivalent += c["verdict"] == "EQUIVALENT"
            wrong += c["verdict"] == ("SLOWER" if nominal > 1 else "FASTER")
            covered += hit
            total += 1
        dirs.append(d)
    print(
        f"  preset={preset}: EQUIVALENT {equivalent}/{total} (true effects 2-25 %), wrong "
        f"direction {wrong}/{total}, intervals holding the truth {covered}/{total}"
    )
    return dirs


def aa(cwd: Path, preset: str, device: str, runs: int) -> None:
    verdicts = [
        json.loads((sweep(cwd, preset, device, (BASE_US,)) / "summary.json").read_text())[
            "sentinel"
        ]["verdict"]
        for _ in range(runs)
    ]
    false = sum(v in ("FASTER", "SLOWER") for v in verdicts)
    low, high = clopper_pearson(false, runs)
    print(
        f"  preset={preset}: A/A (sentinel of {runs} sweeps) {false}/{runs} FASTER/SLOWER "
        f"[Clopper-Pearson 95 %: {low:.1%}, {high:.1%}]; verdicts: "
        + ", ".join(f"{v} {verdicts.count(v)}" for v in sorted(set(verdicts)))
    )


def gaps(sweep_dir: Path) -> None:
    spans = sorted(
        (datetime.fromisoformat(r["started_at"]), datetime.fromisoformat(r["finished_at"]))
        for r in (json.loads(p.read_text()) for p in sweep_dir.glob("*/trials/r*.json"))
    )
    between = [(b[0] - a[1]).total_seconds() for a, b in zip(spans, spans[1:], strict=False)]
    print(
        f"  scheduler overhead between trials ({len(between)} gaps): median "
        f"{statistics.median(between) * 1000:.0f} ms, max {max(between) * 1000:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", nargs="+", default=["quick", "default"])
    parser.add_argument("--sweeps", type=int, default=2, help="known-ratio sweeps per preset")
    parser.add_argument("--aa", type=int, default=10, help="A/A sweeps per preset")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        for preset in args.preset:
            print(f"preset={preset}, device={args.device}:")
            dirs = ratios(cwd, preset, args.device, args.sweeps)
            gaps(dirs[-1])
            aa(cwd, preset, args.device, args.aa)


if __name__ == "__main__":
    main()
