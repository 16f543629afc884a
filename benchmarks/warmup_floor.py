"""How short may the warm-up's floor be? perflab's own warm-up rule, replayed on long
recorded warm-ups.

    python benchmarks/warmup_floor.py                  # the H100 sweep in tests/fixtures/h100
    python benchmarks/warmup_floor.py --run cpu        # record one on this machine first
    python benchmarks/warmup_floor.py SWEEP_DIR ...    # any sweep recorded this way

A trial warms up for at least ``trial.warmup_s`` (the floor), then until the step time is
steady (perflab.analysis.steady). The floor costs its length in every trial; too short a
floor lets a slow ramp (clocks rising, a heavy predecessor's heat) into the timed block.
This script asks the records which it is. It needs trials that warmed up for a long,
fixed time and kept every warm-up step: ``trial.warmup_s=3 trial.steady_tolerance=0``
(the rule off). For each such trial and each candidate floor it replays
``steady.warm_up`` over the recorded steps, with the default preset's other trial
settings, takes the timed block the trial would then have measured (the kept steady
window and the steps after it, ``trial.min_steps`` and ``trial.min_s``) and compares the
block's mean log step time with the trial's settled level: the mean log step time of
every recorded step that started after ``--settled-after`` seconds of warm-up. Per
variant and floor it prints the block's mean excess over the settled level (with its
standard error across trials), its worst trial, and what the warm-up cost.

``--run DEVICE`` first records the README's main command that way (``perflab -m
batch_size=32,64 amp=true,false``, default preset otherwise, warm workers included: a
worker's first trial and its later ones are shown apart). With no arguments it replays
tests/fixtures/h100/amp_gpu_warmup3s: the transformer on an H100, a fresh process per
trial, 3 s of warm-up (2026-11-23).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perflab.analysis import steady
from perflab.analysis.simulation import preset
from perflab.config.schema import TrialConfig

# the console script found as the tests find it (tests/console_scripts.py): on a machine
# where pip put it outside PATH, the entry point run by this interpreter
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from console_scripts import command  # noqa: E402

PERFLAB = command("perflab")

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "h100" / "amp_gpu_warmup3s"
FLOORS_S = (0.0, 0.1, 0.2, 0.5, 1.0)
RECORDING = ["trial.warmup_s=3", "trial.steady_tolerance=0", "trial.keep_steady_window=false"]


class RecordingTooShort(Exception):
    """The replayed warm-up or block needed more steps than the trial recorded."""


class Replay:
    """A trial's recorded steps, served to steady.warm_up as if they ran now: a clock
    that advances by the steps handed out, and stretches of whole groups."""

    def __init__(self, step_ns: list[float]) -> None:
        self.step_ns, self.position, self.now_ns = step_ns, 0, 0.0

    def clock(self) -> int:
        return int(self.now_ns)

    def stretch(self, steps: int, group: int, min_s: float, max_s: float) -> list[int]:
        """As perflab.measure.steps.run_block: at least ``steps`` and ``min_s``, at most
        ``max_s`` (checked after every group); the samples' durations, ns."""
        samples: list[int] = []
        taken = spent = 0.0
        while taken < steps or spent < min_s * 1e9:
            if spent >= max_s * 1e9:
                break
            end = self.position + group
            if end > len(self.step_ns):
                raise RecordingTooShort
            sample = sum(self.step_ns[self.position : end])
            self.position, self.now_ns = end, self.now_ns + sample
            samples.append(int(sample))
            taken, spent = taken + group, spent + sample
        return samples


@dataclass
class Outcome:
    """One trial replayed with one floor: the timed block's mean log step against the
    settled level (relative excess), and the warm-up's cost."""

    excess: float
    warmup_s: float
    stop: str


def per_step(samples: dict[str, Any]) -> tuple[list[float], int]:
    """A record's warm-up and timed steps as one series of per-step durations (ns), and
    the timed block's steps per sample. Schema 1 records kept one warm-up sample per step
    (``warmup_step_ns``); the kept steady window (``warmup_kept``) is in both lists."""
    group = int(samples.get("steps_per_sample") or 1)
    warm = samples.get("warmup_sample_ns")
    warm_steps = samples.get("warmup_sample_steps")
    if warm is None:
        warm, warm_steps = samples.get("warmup_step_ns") or [], None
    warm_steps = warm_steps or [1] * len(warm)
    series: list[float] = []
    for ns, n in zip(warm, warm_steps, strict=True):
        series += [ns / n] * n
    for ns in samples["step_ns"][int(samples.get("warmup_kept") or 0) :]:
        series += [ns / group] * group
    return series, group


def replay(series: list[float], group: int, trial: TrialConfig, settled_after_s: float) -> Outcome:
    """The trial as the default preset with ``trial.warmup_s`` would have run it."""
    starts = [0.0]
    for ns in series[:-1]:
        starts.append(starts[-1] + ns)
    settled = [
        math.log(ns) for ns, t in zip(series, starts, strict=True) if t >= settled_after_s * 1e9
    ]
    if len(settled) < 5:
        raise RecordingTooShort
    run = Replay(series)
    warm = steady.warm_up(
        run.stretch,
        run.clock,
        min_steps=trial.warmup_steps,
        min_s=trial.warmup_s,
        max_s=trial.warmup_max_s,
        tolerance=trial.steady_tolerance,
        choose_group=lambda _: group,
    )
    kept = steady.last(warm.sample_ns, steady.kept_samples(warm, trial, None))
    kept_steps, kept_s = len(kept) * group, sum(kept) / 1e9
    more = run.stretch(
        max(1, trial.min_steps - kept_steps), group, max(0.0, trial.min_s - kept_s), trial.max_s
    )
    block = [math.log(ns / group) for ns in kept + more]
    excess = math.expm1(statistics.fmean(block) - statistics.fmean(settled))
    return Outcome(excess, warm.seconds - kept_s, warm.stop)


def process_kind(record: dict[str, Any]) -> str:
    """Which kind of process the trial ran in: a fresh one, or a warm worker's first
    trial (which built the workload) or a later one."""
    worker = record.get("worker") or {}
    if worker.get("isolation") != "worker":
        return "fresh process"
    return "worker's first trial" if worker.get("trial") == 0 else "worker's later trials"


def analyse(sweep: Path, settled_after_s: float) -> None:
    labels = {}
    experiment = sweep / "experiment.json"
    if experiment.exists():
        for variant in json.loads(experiment.read_text())["plan"]["variants"]:
            labels[variant["dir"]] = variant["label"]
    # the default preset's trial settings on each record's device
    trials = {device: preset("default", cuda=device == "cuda")[0] for device in ("cpu", "cuda")}
    # per floor, per (variant directory, kind of process): the replayed trials
    by_floor: dict[float, dict[tuple[str, str], list[Outcome]]] = {
        f: defaultdict(list) for f in FLOORS_S
    }
    short = 0
    for path in sorted(sweep.glob("*/trials/r*.json")):
        record = json.loads(path.read_text())
        if record.get("status") != "ok":
            continue
        series, group = per_step(record["samples"])
        trial = trials[record["settings"]["device"]]
        key = (path.parent.parent.name, process_kind(record))
        for floor in FLOORS_S:
            try:
                outcome = replay(series, group, with_floor(trial, floor), settled_after_s)
            except RecordingTooShort:
                short += 1
                continue
            by_floor[floor][key].append(outcome)
    print(f"{sweep}: settled level = mean log step after {settled_after_s} s of warm-up")
    for variant_dir, kind in sorted({key for per in by_floor.values() for key in per}):
        print(f"  {labels.get(variant_dir, variant_dir)} ({kind})")
        for floor in FLOORS_S:
            outcomes = by_floor[floor].get((variant_dir, kind), [])
            if outcomes:
                print("    " + line(floor, outcomes))
    if short:
        print(f"  {short} replays needed more steps than their trial recorded (left out)")


def with_floor(trial: TrialConfig, floor: float) -> TrialConfig:
    return replace(trial, warmup_s=floor)


def line(floor: float, outcomes: list[Outcome]) -> str:
    excess = [o.excess for o in outcomes]
    se = statistics.stdev(excess) / math.sqrt(len(excess)) if len(excess) > 1 else float("nan")
    stops = Counter(o.stop for o in outcomes)
    worst = max(excess, key=abs)
    return (
        f"floor {floor:.1f} s: block vs settled {statistics.fmean(excess):+.2%} "
        f"(se {se:.2%}, median {statistics.median(excess):+.2%}, worst {worst:+.2%}); "
        f"warm-up {statistics.fmean(o.warmup_s for o in outcomes):.3f} s; "
        f"{len(outcomes)} trials; stopped: "
        + ", ".join(f"{k} {v}" for k, v in sorted(stops.items()))
    )


def record(device: str, rounds: int, workdir: Path) -> Path:
    """The README's main command with a fixed 3 s warm-up, every warm-up step kept."""
    root = workdir / f"main_command_{device}_warmup3s"
    overrides = [
        "batch_size=32,64",
        "amp=true,false",
        f"device={device}",
        *RECORDING,
        f"schedule.min_rounds={rounds}",
        f"schedule.max_rounds={rounds}",
        "schedule.time_budget_s=3600",
        f"hydra.sweep.dir={root}",
    ]
    result = subprocess.run([*PERFLAB, "-m", *overrides], capture_output=True, text=True)
    (workdir / "record.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        sys.exit(f"warmup_floor: perflab exited {result.returncode}; see {workdir / 'record.log'}")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweeps", nargs="*", type=Path, help="sweep directories to replay")
    parser.add_argument("--run", choices=("cpu", "cuda"), help="record the main command first")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--settled-after", type=float, default=2.0, metavar="S")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    sweeps = list(args.sweeps)
    if args.run:
        workdir = args.workdir or Path(tempfile.mkdtemp(prefix="warmup_floor_"))
        sweeps.append(record(args.run, args.rounds, workdir))
    for sweep in sweeps or [FIXTURE]:
        analyse(sweep, args.settled_after)


if __name__ == "__main__":
    main()
