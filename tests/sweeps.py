"""A small sweep directory written from fixed, seeded records (no torch, no timing)."""

from __future__ import annotations

import random
from pathlib import Path

from perflab.analysis.sweep import Experiment, ScheduleSettings
from perflab.config.plan import Job, Plan, build_plan
from perflab.formats.records import Probe, Samples, TrialRecord, write_json_atomic, write_record
from perflab.formats.sweepdir import EXPERIMENT_FILE
from perflab.formats.trial_parts import KnobEvidence, PhaseReading, TrialMemory, TrialTelemetry

SCHEDULE = {
    "metric": "latency",
    "confidence": 0.95,
    "delta": 0.01,
    "label": "",
    "min_rounds": 5,
    "max_rounds": 10,
    "target_half_width": 0.02,
    "time_budget_s": 240.0,
}
ENVIRONMENT = {
    "argv": ["/somewhere/bin/perflab", "-m", "amp=off,bf16"],
    "torch": "2.13.0+cpu",
    "python": "3.11.7",
    "cpu_model": "Test CPU",
    "usable_cpus": 2,
    "hostname": "secret-host",
    "cuda_devices": [],
}


def make_sweep(
    root: Path,
    speedup: float = 1.25,
    rounds: int = 8,
    fail_round: int | None = None,
    label: str = "amp=bf16",
    scale: float = 1.0,
    torch: str = "2.13.0+cpu",
    seed: int = 0,
) -> Plan:
    """``scale`` multiplies every cost (a code change that slows everything down);
    ``torch`` is the version the records claim."""
    key, value = label.split("=", 1)
    plan = build_plan(
        [Job(0, ["amp=off"], {"amp": "off"}), Job(1, [label], {key: value})], {}, sentinel=True
    )
    rng = random.Random(seed)
    started = _start_times(plan, rounds, random.Random(seed + 1))
    for variant in plan.variants:
        fast = variant.name == "1"
        base_ns = scale * 1_000_000 / (speedup if fast else 1.0)
        for r in range(rounds):
            machine = 1 + 0.01 * rng.gauss(0, 1)
            steps = [int(base_ns * machine * (1 + 0.005 * rng.gauss(0, 1))) for _ in range(40)]
            record = TrialRecord(
                status="ok",
                config={"amp": value if fast else "off"},
                settings={"batch_size": 8, "device": "cpu"},
                started_at=started[variant.name, r],
                finished_at=started[variant.name, r].replace(":00.", ":01."),
                round=r,
                samples=Samples(
                    1,
                    steps,
                    {"data": [1000] * 40, "forward": steps},
                    [],
                    5_000_000 if not fast else 9_000_000,
                    0.04,
                    "min_reached",
                ),
                memory=TrialMemory(
                    kind="process_rss",
                    peak_bytes=100 * 2**20,
                    phases=[
                        PhaseReading(phase=p, rss_bytes=(90 + i) * 2**20)
                        for i, p in enumerate(("data", "forward"))
                    ]
                    if r == 0
                    else None,
                ),
                telemetry=TrialTelemetry.unavailable("no GPU telemetry on cpu"),
                environment={**ENVIRONMENT, "torch": torch},
                conditions={"threads": 1, "interop_threads": 2},
                load_start=[0.5, 0.4, 0.3],
                load_end=[0.6, 0.4, 0.3],
                evidence={
                    "amp": KnobEvidence(
                        requested="bfloat16", observed=["bfloat16"], ok=True, detail=""
                    )
                }
                if fast
                else {},
            )
            if r == 0:
                out = [0.5, -0.25, 1.0, 2.0] if not fast else [0.501, -0.25, 0.999, 2.002]
                record.probe = Probe(
                    8,
                    2.0 if not fast else 2.001,
                    [2, 2],
                    "float32" if not fast else "bfloat16",
                    2.3,
                    out,
                    1.0,
                )
            if fast and r == fail_round:
                record.status, record.samples = "failed", None
            write_record(root / variant.dir / "trials" / f"r{r:03d}.json", record)
    write_json_atomic(
        root / EXPERIMENT_FILE,
        Experiment(
            plan, ScheduleSettings.from_dict(SCHEDULE), "max rounds", rounds, 12.5
        ).to_dict(),
    )
    return plan


def _start_times(plan: Plan, rounds: int, rng: random.Random) -> dict[tuple[str, int], str]:
    """When each trial started, two seconds apart, in freshly shuffled rounds."""
    out = {}
    for r in range(rounds):
        names = [v.name for v in plan.variants]
        rng.shuffle(names)
        for i, name in enumerate(names):
            minute = r * len(names) + i
            out[name, r] = f"2026-11-23T{10 + minute // 60:02d}:{minute % 60:02d}:00.000+00:00"
    return out
