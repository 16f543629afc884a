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
window and the steps after it: ``trial.min_steps`` and ``trial.min_s`` in a
configuration's first trial, the timed steps it fixed in the later ones) and compares
the block's mean log step time with the trial's settled level: the mean log step time
of every recorded step that started after ``--settled-after`` seconds of warm-up. Per
variant and floor it prints the block's mean excess over the settled level (with its
standard error across trials), its worst trial and what the warm-up cost, and says how
many trials were too short to replay and how many blocks reached into the settled
window (which pulls their excess towards 0).

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
from perflab.measure.steps import steps_per_sample

ROOT = Path(__file__).resolve().parents[1]
# the console script found as the tests find it (tests/console_scripts.py): on a machine
# where pip put it outside PATH, the entry point run by this interpreter
sys.path.insert(0, str(ROOT / "tests"))
from console_scripts import command  # noqa: E402

PERFLAB = command("perflab")

FIXTURE = ROOT / "tests" / "fixtures" / "h100" / "amp_gpu_warmup3s"
# 0.1 s is preset=quick's floor and 0.5 s the default preset's; 0 leaves the minimum to
# trial.warmup_steps and the rule; 0.2 s and 1.0 s bracket them
FLOORS_S = (0.0, 0.1, 0.2, 0.5, 1.0)
# a long, fixed warm-up (the rule off) whose every step the record keeps, and no kept
# window, so that the timed steps follow the warm-up's without overlapping them
RECORDING = ["trial.warmup_s=3", "trial.steady_tolerance=0", "trial.keep_steady_window=false"]


@dataclass(frozen=True)
class Length:
    """What a configuration's first trial fixes for its later ones (schedule.count)."""

    timed_steps: int
    steps_per_sample: int


@dataclass
class Outcome:
    """One trial replayed with one floor: the timed block's mean log step against the
    settled level (relative excess), the warm-up's cost and why it stopped, the length
    the block had, and whether the block reached into the settled window (which pulls
    the excess towards 0)."""

    excess: float
    warmup_s: float
    stop: str
    length: Length
    overlaps: bool


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


def replay(
    series: list[float],
    device: str,
    trial: TrialConfig,
    settled_after_s: float,
    length: Length | None = None,
) -> Outcome:
    """The trial as the default preset with ``trial.warmup_s`` would have run it: as its
    configuration's first trial (``length`` None: the steps per sample chosen from the
    warm-up, the block bounded by trial.min_*/max_*), or as a later one, whose steps per
    sample and timed steps the first trial fixed (perflab/measure/trial.py, ``_bounds``)."""
    starts = [0.0]
    for ns in series[:-1]:
        starts.append(starts[-1] + ns)
    after_ns = settled_after_s * 1e9
    settled = [math.log(ns) for ns, t in zip(series, starts, strict=True) if t >= after_ns]
    if len(settled) < 5:
        raise steady.OutOfSteps  # no settled level to compare with
    run = steady.Recorded(series, trial.max_steps)
    warm = steady.warm_up(
        run.stretch,
        run.clock,
        trial,
        choose_group=lambda per_step: steps_per_sample(device, per_step, trial.min_event_window_us),
        fixed_group=length.steps_per_sample if length else None,
    )
    group = warm.steps_per_sample
    timed_steps = length.timed_steps if length else None
    kept = steady.last(warm.sample_ns, steady.kept_samples(warm, trial, timed_steps))
    kept_steps, kept_s = len(kept) * group, sum(kept) / 1e9
    more = run.block(steady.timed_block(trial, timed_steps, kept_steps, kept_s), group)
    block = [math.log(ns / group) for ns in kept + more]
    return Outcome(
        excess=math.expm1(statistics.fmean(block) - statistics.fmean(settled)),
        warmup_s=warm.seconds - kept_s,
        stop=warm.stop,
        length=Length(kept_steps + len(more) * group, group),
        overlaps=run.now_ns > after_ns,
    )


def process_kind(record: dict[str, Any]) -> str:
    """Which kind of process the trial ran in: a fresh one, or a warm worker's first
    trial (which built the workload) or a later one."""
    worker = record.get("worker") or {}
    if worker.get("isolation") != "worker":
        return "fresh process"
    return "worker's first trial" if worker.get("trial") == 0 else "worker's later trials"


def analyse(sweep: Path, settled_after_s: float) -> None:
    """Replay every ok trial of a sweep with every floor, in round order per variant (the
    first trial fixes the length of the later ones), and print the outcomes per variant,
    kind of process and floor."""
    labels = {}
    experiment = sweep / "experiment.json"
    if experiment.exists():
        for variant in json.loads(experiment.read_text())["plan"]["variants"]:
            labels[variant["dir"]] = variant["label"]
    # the default preset's trial settings on each record's device
    trials = {device: preset("default", cuda=device == "cuda")[0] for device in ("cpu", "cuda")}
    # per floor, per (variant directory, kind of process): the replayed trials, and how
    # many could not be replayed
    outcomes: dict[float, dict[tuple[str, str], list[Outcome]]] = {
        f: defaultdict(list) for f in FLOORS_S
    }
    too_short: Counter[tuple[float, str, str]] = Counter()
    for variant_dir in sorted(p for p in sweep.iterdir() if (p / "trials").is_dir()):
        lengths: dict[float, Length] = {}
        for path in sorted((variant_dir / "trials").glob("r*.json")):
            record = json.loads(path.read_text())
            if record.get("status") != "ok":
                continue
            series, _ = per_step(record["samples"])
            device = record["settings"]["device"]
            key = (variant_dir.name, process_kind(record))
            for floor in FLOORS_S:
                trial = replace(trials[device], warmup_s=floor)
                try:
                    outcome = replay(series, device, trial, settled_after_s, lengths.get(floor))
                except steady.OutOfSteps:
                    too_short[(floor, *key)] += 1
                    continue
                lengths.setdefault(floor, outcome.length)
                outcomes[floor][key].append(outcome)
    print(f"{sweep}: settled level = mean log step after {settled_after_s} s of warm-up")
    keys = sorted({key for per in outcomes.values() for key in per} | {k[1:] for k in too_short})
    for name, kind in keys:
        print(f"  {labels.get(name, name)} ({kind})")
        for floor in FLOORS_S:
            replayed = outcomes[floor].get((name, kind), [])
            print("    " + line(floor, replayed, too_short[(floor, name, kind)]))


def line(floor: float, outcomes: list[Outcome], too_short: int) -> str:
    """One floor's outcomes for one variant and kind of process, in one line."""
    head = f"floor {floor:.1f} s: "
    short = (
        f"; {too_short} trial(s) left out: the replay needed more than was recorded (record "
        "a longer warm-up, or lower --settled-after)"
        if too_short
        else ""
    )
    if not outcomes:
        return head + "no trial replayed" + short
    excess = [o.excess for o in outcomes]
    se = statistics.stdev(excess) / math.sqrt(len(excess)) if len(excess) > 1 else float("nan")
    stops = Counter(o.stop for o in outcomes)
    overlaps = sum(o.overlaps for o in outcomes)
    return (
        head + f"block vs settled {statistics.fmean(excess):+.2%} (se {se:.2%}, median "
        f"{statistics.median(excess):+.2%}, worst {max(excess, key=abs):+.2%}); warm-up "
        f"{statistics.fmean(o.warmup_s for o in outcomes):.3f} s; {len(outcomes)} trials; "
        "stopped: "
        + ", ".join(f"{k} {v}" for k, v in sorted(stops.items()))
        + (f"; {overlaps} block(s) reached into the settled window" if overlaps else "")
        + short
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
        if not any(sweep.glob("*/trials/r*.json")):
            sys.exit(f"warmup_floor: {sweep} holds no trial records (SWEEP/VARIANT/trials/r*.json)")
        analyse(sweep, args.settled_after)


if __name__ == "__main__":
    main()
