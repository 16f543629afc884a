"""Nothing lost when things go wrong: a real small sweep per injected fault.

Each scenario runs `perflab -m` on the model of tests/faulty.py (a busy-wait forward that
then does its fault) with a baseline, one more variant and the A/A sentinel, 4 rounds:

- raise, oom (torch.OutOfMemoryError), segfault, sigkill, hang (trial.timeout_s=3): the
  second variant's trial does it; the sweep must record it and finish the others;
- sigint (Ctrl-C: SIGINT to the process group) and sigterm (`kill PID`: the sweep process
  alone), each sent while the second trial of round 3 is running (so round 3 is left
  partly done), then the same command again;
- corrupt: a finished sweep gets a truncated record, a foreign JSON file and a record
  of a future schema_version, then the same command again and perflab-report.

Per scenario it reports the exit code(s), the finished trials kept (trials that had a
record when the fault or the signal came, still there and unchanged afterwards; must be
100 %), whether the interrupted trial left no record, and whether the final directory has
the same layout as an uninterrupted run: the same variants, and per variant and round
the same trial statuses (timings differ, of course).

    python benchmarks/fault_matrix.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
ROUNDS = 4
COMMON = (
    "model=custom",
    "model._target_=tests.faulty.build",
    "model.input.shape=[1]",
    "model.target.kind=none",
    "data=memory",
    "mode=infer",
    "profile=off",
    "trial.warmup_steps=2",
    "trial.warmup_s=0",
    "trial.min_steps=5",
    "trial.timeout_s=3",
    f"schedule.min_rounds={ROUNDS}",
    f"schedule.max_rounds={ROUNDS}",
)
# a fault in the second variant's trial; trials of ~0.1 s
FAULT = (*COMMON, "trial.min_s=0", "+schedule.treatments={model.args.fault:none}")
# two healthy variants with trials of ~0.4 s, so that a signal lands inside one
HEALTHY = (
    *COMMON,
    "trial.min_s=0.3",
    "+model.args.step_us=2000,2100",
    "+schedule.treatments={model.args.step_us:2000}",
)


def perflab(cwd: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "perflab"), "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def finished(sweep: Path) -> dict[Path, int]:
    """Every record file on disk and its modification time."""
    return {p: p.stat().st_mtime_ns for p in sweep.glob("*/trials/r*.json")}


def layout(sweep: Path) -> dict[str, list[tuple[int, str]]]:
    """Per variant label, (round, status) of each trial on disk."""
    from perflab.analysis import Experiment, load_trials

    experiment = Experiment.load(sweep)
    trials = load_trials(sweep, experiment.plan)
    return {
        v.label: [(r, t.status) for r, t in sorted(trials[v.name].items())]
        for v in experiment.plan.variants
    }


def started(log: Path) -> int:
    return len(log.read_text().split()) if log.exists() else 0


def in_trial_fault(root: Path, fault: str) -> dict[str, Any]:
    sweep, log = root / fault, root / f"{fault}.log"
    args = [*FAULT, f"+model.args.fault=none,{fault}", f"+model.args.started_log={log}"]
    result = perflab(root, [*args, f"hydra.sweep.dir={sweep}"])
    got = layout(sweep)
    expected_status = "timeout" if fault == "hang" else "failed"
    expected = {
        "model.args.fault=none": [(r, "ok") for r in range(ROUNDS)],
        f"model.args.fault={fault}": [(0, expected_status)],  # not scheduled again
        "model.args.fault=none (A/A copy)": [(r, "ok") for r in range(ROUNDS)],
    }
    records = sum(len(v) for v in got.values())
    summary = json.loads((sweep / "summary.json").read_text())
    why = next(v["failed"]["0"] for v in summary["variants"] if v["failed"])
    return {
        "fault": fault,
        "exit": str(result.returncode),
        "kept": f"{records}/{started(log)}",
        "no_record_for_interrupted": "n/a",
        "same_layout": got == expected,
        "stop": summary["stop_reason"],
        "note": why[:90],
    }


def interrupt(root: Path, name: str, sig: int, to_group: bool, reference: dict) -> dict[str, Any]:
    sweep, log = root / name, root / f"{name}.log"
    args = [*HEALTHY, f"+model.args.started_log={log}", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(
        [str(BIN / "perflab"), "-m", *args],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    while started(log) < 8 and proc.poll() is None:  # round 3's second trial is running
        time.sleep(0.02)
    time.sleep(0.1)
    before = finished(sweep)
    if to_group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    proc.communicate(timeout=600)
    after = finished(sweep)
    kept = sum(after.get(p) == t for p, t in before.items())
    resumed = perflab(root, args)
    return {
        "fault": name,
        "exit": f"{proc.returncode} then {resumed.returncode}",
        "kept": f"{kept}/{len(before)}",
        "no_record_for_interrupted": set(after) == set(before),
        "same_layout": layout(sweep) == reference,
        "stop": json.loads((sweep / "summary.json").read_text())["stop_reason"],
        "note": f"{started(log)} trial starts for {len(finished(sweep))} records (the "
        f"interrupted trial ran again on resume); load {os.getloadavg()[0]:.1f}",
    }


def corrupt(root: Path, reference: dict) -> dict[str, Any]:
    sweep = root / "corrupt"
    args = [*HEALTHY, f"+model.args.started_log={root / 'corrupt.log'}"]
    perflab(root, [*args, f"hydra.sweep.dir={sweep}"])
    truncated = sweep / "1" / "trials" / "r002.json"
    truncated.write_text(truncated.read_text()[:100])
    (sweep / "0" / "trials" / "r099.json").write_text('{"hello": "world"}')
    future = json.loads((sweep / "sentinel" / "trials" / "r001.json").read_text())
    (sweep / "sentinel" / "trials" / "r098.json").write_text(
        json.dumps({**future, "schema_version": 99, "round": 98})
    )
    before = {p: t for p, t in finished(sweep).items() if p != truncated}
    report = subprocess.run(
        [str(BIN / "perflab-report"), str(sweep)], capture_output=True, text=True, timeout=300
    )
    again = perflab(root, [*args, f"hydra.sweep.dir={sweep}"])
    after = finished(sweep)
    kept = sum(after.get(p) == t for p, t in before.items())
    got = {k: [x for x in v if x[0] < ROUNDS] for k, v in layout(sweep).items()}
    return {
        "fault": "corrupt",
        "exit": f"report {report.returncode}, rerun {again.returncode}",
        "kept": f"{kept}/{len(before)}",
        "no_record_for_interrupted": "n/a",
        "same_layout": got == reference,
        "stop": json.loads((sweep / "summary.json").read_text())["stop_reason"],
        "note": "bad files named by perflab-report: "
        f"{sum(n in report.stderr for n in ('r002.json', 'r099.json', 'r098.json'))}/3; "
        f"truncated one named and re-measured: "
        f"{f'skipping {truncated}' in again.stderr and truncated in after}",
    }


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        start = time.monotonic()
        for fault in ("raise", "oom", "segfault", "sigkill", "hang"):
            rows.append(in_trial_fault(root, fault))
        reference_dir = root / "reference"
        log = root / "ref.log"
        ref = perflab(
            root, [*HEALTHY, f"+model.args.started_log={log}", f"hydra.sweep.dir={reference_dir}"]
        )
        assert ref.returncode == 0, ref.stderr
        reference = layout(reference_dir)
        rows.append(interrupt(root, "sigint", signal.SIGINT, True, reference))
        rows.append(interrupt(root, "sigterm", signal.SIGTERM, False, reference))
        rows.append(corrupt(root, reference))
        spent = time.monotonic() - start
    keys = ["fault", "exit", "kept", "no_record_for_interrupted", "same_layout", "stop", "note"]
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in keys[:-1]}
    print("  ".join(k.ljust(widths.get(k, 0)) for k in keys))
    for r in rows:
        print("  ".join(str(r[k]).ljust(widths.get(k, 0)) for k in keys))
    print(f"{len(rows)} scenarios in {spent:.0f} s")


if __name__ == "__main__":
    main()
