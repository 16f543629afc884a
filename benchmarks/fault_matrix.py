"""Nothing lost when things go wrong: a real small sweep per injected fault.

Each scenario runs `perflab -m` on the model of tests/faulty.py (a busy-wait forward that
then does its fault) with a baseline, one more variant and the A/A sentinel, 4 rounds:

- raise, oom (torch.OutOfMemoryError), segfault, sigkill, hang (trial.timeout_s=3): the
  second variant's trial does it; the sweep must record it and finish the others;
- sigint (Ctrl-C: SIGINT to the process group) and sigterm (`kill PID`: the sweep process
  alone), each sent while the second trial of round 3 is running (so round 3 is left
  partly done), then the same command again;
- corrupt: a finished sweep gets a truncated record, a foreign JSON file and a record
  of a future schema_version, then the same command again and perflab-report;
- kill_9 (the sweep process alone) and sighup (its process group, as a dropped SSH
  session), while the second trial of round 3 runs, then the same command: no process
  may outlive the sweep (checked after 5 s), no record may appear after the kill;
- concurrent: a second perflab with another experiment on the live directory;
- code_edit: the model's module (no git) edited between a finished session and a resume;
- disk_full: a 60 MB tmpfs filled while the second trial runs (needs root to mount),
  then space freed and the same command again;
- pipe_closed: `perflab -m ... | head -2`;
- deleted_dir: the sweep directory removed while the second trial runs;
- bad_dirs: `/`, `/proc`, a file, a foreign non-empty directory and a 100 kB name, as
  hydra.sweep.dir of a sweep and hydra.run.dir of a single run;
- outside_file: a copy of a finished sweep whose profile.json names a file outside it
  and whose trace is a link to it, then `perflab-report SWEEP --out DIR`: the file's
  bytes must not reach DIR;
- lost_variant: one variant's directory deleted, then the same command on a machine
  2 ms per step slower: the re-measured rounds must not be paired with the old session;
- memory_cap, log_cap, child_process (tests/unbounded.py): a variant leaking 256 MiB a
  step under trial.max_memory_mb=1200; a model printing 200 kB a step under the default
  log cap; a model that starts `sleep 60` and changes directory under a relative sweep
  directory;
- deep_json: a record of 100,000 nested arrays, then perflab-report, the analysis and
  the same command; helper_edited: a helper module the model imports edited (no git)
  between a finished session and a resume.

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
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# the console scripts found as the tests find them (tests/console_scripts.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from console_scripts import command  # noqa: E402
from processes import alive, descendants  # noqa: E402

PERFLAB, PERFLAB_REPORT = command("perflab"), command("perflab-report")
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
    "trial.warmup_max_s=1",
    f"schedule.min_rounds={ROUNDS}",
    f"schedule.max_rounds={ROUNDS}",
)
# a fault in the second variant's trial; trials of ~0.1 s
FAULT = (*COMMON, "trial.min_s=0", "+schedule.treatments={model.args.fault:none}")
# the hang is cut short; a healthy trial gets time to spare on a loaded machine
# (the warm-up rule may run to trial.warmup_max_s, 5 s by default: capped below 3 s)
TIMEOUT = {"hang": "trial.timeout_s=3"}
SPARE = "trial.timeout_s=60"
# two healthy variants with trials of ~0.4 s, so that a signal lands inside one
HEALTHY = (
    *COMMON,
    SPARE,
    "trial.min_s=0.3",
    "+model.args.step_us=2000,2100",
    "+schedule.treatments={model.args.step_us:2000}",
)


def perflab(cwd: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PERFLAB, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def finished(sweep: Path) -> dict[Path, int]:
    """Every record file on disk and its modification time."""
    return {p: p.stat().st_mtime_ns for p in sweep.glob("*/trials/r*.json")}


def layout(sweep: Path) -> dict[str, list[tuple[int, str]]]:
    """Per variant label, (round, status) of each trial on disk."""
    from perflab.analysis.sweep import Experiment, load_trials

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
    args = [*FAULT, TIMEOUT.get(fault, SPARE), f"+model.args.fault=none,{fault}"]
    args.append(f"+model.args.started_log={log}")
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
        [*PERFLAB, "-m", *args],
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
        [*PERFLAB_REPORT, str(sweep)], capture_output=True, text=True, timeout=300
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


def start(root: Path, args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*PERFLAB, "-m", *args],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_started(log: Path, count: int, proc: subprocess.Popen[str]) -> None:
    while started(log) < count and proc.poll() is None:
        time.sleep(0.02)
    time.sleep(0.1)


def killed(root: Path, name: str, sig: int, reference: dict) -> dict[str, Any]:
    """kill -9 of the sweep process alone, or SIGHUP to its process group (a dropped SSH
    session), while the second trial of round 3 runs; then the same command."""
    sweep, log = root / name, root / f"{name}.log"
    args = [*HEALTHY, f"+model.args.started_log={log}", f"hydra.sweep.dir={sweep}"]
    proc = start(root, args)
    wait_started(log, 8, proc)
    before, helpers = finished(sweep), descendants(proc.pid)
    if sig == signal.SIGKILL:
        proc.kill()
    else:
        os.killpg(proc.pid, sig)
    proc.communicate(timeout=600)
    left = alive(helpers, wait_s=5)
    time.sleep(1)  # longer than the trial had left: an orphan would have written by now
    after = finished(sweep)
    resumed = perflab(root, args)
    console = (sweep / "console.log").read_text() if (sweep / "console.log").exists() else ""
    return {
        "fault": name,
        "exit": f"{proc.returncode} then {resumed.returncode}",
        "kept": f"{sum(after.get(p) == t for p, t in before.items())}/{len(before)}",
        "no_record_for_interrupted": set(after) == set(before),
        "same_layout": layout(sweep) == reference,
        "stop": json.loads((sweep / "summary.json").read_text())["stop_reason"],
        "note": f"processes left after 5 s: {len(left)} of {len(helpers)}"
        + ("; resume command in console.log" if "resume with:" in console else ""),
    }


def concurrent(root: Path, reference: dict) -> dict[str, Any]:
    """A second perflab (another experiment) on a sweep directory while the first runs."""
    sweep, log = root / "concurrent", root / "concurrent.log"
    args = [*HEALTHY, f"+model.args.started_log={log}", f"hydra.sweep.dir={sweep}"]
    first = start(root, args)
    wait_started(log, 2, first)
    other = [a.replace("2000,2100", "2000,9000") for a in args]
    second = perflab(root, other)
    first.communicate(timeout=600)
    labels = set(layout(sweep))
    return {
        "fault": "concurrent",
        "exit": f"first {first.returncode}, second {second.returncode}",
        "kept": f"{len(finished(sweep))}/{started(log)}",
        "no_record_for_interrupted": "n/a",
        "same_layout": layout(sweep) == reference,
        "stop": json.loads((sweep / "summary.json").read_text())["stop_reason"],
        "note": f"second refused in one line: {len(second.stderr.strip().splitlines()) == 1}; "
        f"another experiment's variant mixed in: {'model.args.step_us=9000' in labels}",
    }


def code_edit(root: Path) -> dict[str, Any]:
    """The model's module edited (no git) between a finished session and a resume."""
    source = (Path(__file__).resolve().parents[1] / "tests" / "faulty.py").read_text()
    work = root / "code_edit"
    work.mkdir()
    (work / "mymodel.py").write_text(source)
    args = [a.replace("tests.faulty.build", "mymodel.build") for a in HEALTHY]
    args += [f"hydra.sweep.dir={work / 'sweep'}"]
    first = perflab(work, args)
    before = finished(work / "sweep")
    (work / "mymodel.py").write_text(source + "\n# tuned\n")
    edited = perflab(work, args)
    return {
        "fault": "code_edit",
        "exit": f"{first.returncode} then {edited.returncode}",
        "kept": f"{sum(finished(work / 'sweep').get(p) == t for p, t in before.items())}"
        f"/{len(before)}",
        "no_record_for_interrupted": "n/a",
        "same_layout": "n/a",
        "stop": json.loads((work / "sweep" / "summary.json").read_text())["stop_reason"],
        "note": edited.stderr.strip().splitlines()[-1].split(": ", 3)[-1][:90],
    }


def hostile_profile(path: Path, trace: str) -> None:
    """A profile.json as a profiling trial writes it (no operators), naming ``trace``."""
    from perflab.formats.profile_json import Overhead, TraceFile, write_profile
    from perflab.profile.capture import profile_of

    profile = profile_of(
        variant={},
        device="cpu",
        rows=[],
        trace_file=TraceFile(trace=trace, trace_bytes=0),
        overhead=Overhead(unprofiled_step_s=0.01, profiled_step_s=0.011, ratio=1.1),
        profiled_steps=3,
    )
    write_profile(path, profile)


def outside_file(root: Path, reference_dir: Path) -> dict[str, Any]:
    """A copy of the finished reference sweep whose profile.json names a file outside it,
    and whose other variant's trace is a link to that file, published with
    `perflab-report SWEEP --out DIR`: the file's bytes must not land in DIR."""
    sweep, out, secret = root / "outside", root / "outside-published", root / "secret.txt"
    secret.write_bytes(b"SECRET-BYTES-OUTSIDE-THE-SWEEP")
    shutil.copytree(reference_dir, sweep, symlinks=True)
    before = finished(sweep)
    for job, trace in (("0", "../../../secret.txt"), ("1", "trace/t.pt.trace.json.gz")):
        (sweep / job / "profile" / "trace").mkdir(parents=True, exist_ok=True)
        hostile_profile(sweep / job / "profile" / "profile.json", trace)
    (sweep / "1" / "profile" / "trace" / "t.pt.trace.json.gz").symlink_to(secret)
    result = subprocess.run(
        [*PERFLAB_REPORT, str(sweep), "--out", str(out)], capture_output=True, text=True
    )
    copies = [p for p in out.rglob("*") if p.is_file() and not p.is_symlink()]
    leaked = any(b"SECRET-BYTES" in p.read_bytes() for p in copies)
    return {
        "fault": "outside_file",
        "exit": str(result.returncode),
        "kept": f"{sum(finished(sweep).get(p) == t for p, t in before.items())}/{len(before)}",
        "no_record_for_interrupted": "n/a",
        "same_layout": "n/a",
        "stop": "-",
        "note": f"secret copied: {leaked}; refusals named: "
        f"{result.stderr.count('neither linked nor copied')}",
    }


def lost_variant(root: Path) -> dict[str, Any]:
    """A finished sweep loses one variant's directory; the same command runs again on a
    machine 2 ms per step slower (tests/faulty.py's FAULTY_EXTRA_US): the re-measured
    variant must not be paired with the old session's baseline."""
    sweep = root / "lost_variant"
    args = [*HEALTHY, f"hydra.sweep.dir={sweep}"]
    first = perflab(root, args)
    shutil.rmtree(sweep / "1")
    before = finished(sweep)
    slower = {**os.environ, "FAULTY_EXTRA_US": "2000"}
    again = subprocess.run(
        [*PERFLAB, "-m", *args], cwd=root, capture_output=True, text=True, timeout=600, env=slower
    )
    summary = json.loads((sweep / "summary.json").read_text())
    [comparison] = summary["comparisons"]
    return {
        "fault": "lost_variant",
        "exit": f"{first.returncode} then {again.returncode}",
        "kept": f"{sum(finished(sweep).get(p) == t for p, t in before.items())}/{len(before)}",
        "no_record_for_interrupted": "n/a",
        "same_layout": "n/a",
        "stop": summary["stop_reason"],
        "note": f"verdict {comparison['verdict']}, rounds not paired "
        f"{len(comparison.get('across_sessions', []))}/{ROUNDS}",
    }


# tests/unbounded.py's model: leaks, prints, changes directory or starts a child on request
UNBOUNDED = tuple(a.replace("tests.faulty.build", "tests.unbounded.build") for a in COMMON)


def memory_cap(root: Path) -> dict[str, Any]:
    """A variant leaking 256 MiB a step against trial.max_memory_mb=1200: its trial is
    killed at the cap and recorded as failed; the others finish every round."""
    sweep = root / "memory_cap"
    args = [
        *UNBOUNDED,
        SPARE,
        "trial.min_s=0",
        "trial.max_memory_mb=1200",
        "+model.args.leak_mb=0,256",
        "+schedule.treatments={model.args.leak_mb:0}",
        f"hydra.sweep.dir={sweep}",
    ]
    result = perflab(root, args)
    got = layout(sweep)
    expected = {
        "model.args.leak_mb=0": [(r, "ok") for r in range(ROUNDS)],
        "model.args.leak_mb=256": [(0, "failed")],
        "model.args.leak_mb=0 (A/A copy)": [(r, "ok") for r in range(ROUNDS)],
    }
    record = json.loads((sweep / "1" / "trials" / "r000.json").read_text())
    return {
        "fault": "memory_cap",
        "exit": str(result.returncode),
        "kept": f"{sum(len(v) for v in got.values())}/{ROUNDS * 2 + 1}",
        "no_record_for_interrupted": "n/a",
        "same_layout": got == expected,
        "stop": json.loads((sweep / "summary.json").read_text())["stop_reason"],
        "note": f"{record['error']['type']}: {record['error']['message'][:70]}",
    }


def log_cap(root: Path) -> dict[str, Any]:
    """A model printing 200 kB a step (~65 MB/s) under the default 10 MiB log cap: every
    trial's log is cut to its cap, with a line saying how much was dropped."""
    sweep = root / "log_cap"
    args = [
        *UNBOUNDED,
        SPARE,
        "trial.min_s=0.3",
        "+model.args.print_kb=200",
        "+model.args.step_us=3000,3100",
        "+schedule.treatments={model.args.step_us:3000}",
        f"hydra.sweep.dir={sweep}",
    ]
    result = perflab(root, args)
    logs = list(sweep.glob("*/trials/r*.log"))
    biggest = max((p.stat().st_size for p in logs), default=0)
    marked = sum("more bytes of this trial's output dropped" in p.read_text() for p in logs)
    got = layout(sweep)
    return {
        "fault": "log_cap",
        "exit": str(result.returncode),
        "kept": f"{sum(len(v) for v in got.values())}/{ROUNDS * 3}",
        "no_record_for_interrupted": "n/a",
        "same_layout": all(len(v) == ROUNDS for v in got.values()),
        "stop": json.loads((sweep / "summary.json").read_text())["stop_reason"],
        "note": f"{len(logs)} logs, largest {biggest / 2**20:.1f} MiB, {marked} marked as cut",
    }


def child_process(root: Path) -> dict[str, Any]:
    """A model that starts `sleep 60` and changes directory, under a relative
    hydra.sweep.dir: every trial ok, perflab's files where they belong, no child left."""
    work, pids, elsewhere = root / "child_process", root / "children.log", root / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    args = [
        *UNBOUNDED,
        SPARE,
        "trial.min_s=0",
        "+model.args.step_us=200,300",
        "+schedule.treatments={model.args.step_us:200}",
        f"+model.args.child_log={pids}",
        f"+model.args.chdir={elsewhere}",
        "hydra.sweep.dir=sweep",
    ]
    result = perflab(work, args)
    started = {int(p) for p in pids.read_text().split()} if pids.exists() else set()
    got = layout(work / "sweep")
    return {
        "fault": "child_process",
        "exit": str(result.returncode),
        "kept": f"{sum(len(v) for v in got.values())}/{ROUNDS * 3}",
        "no_record_for_interrupted": "n/a",
        "same_layout": all(s == "ok" for v in got.values() for _, s in v),
        "stop": json.loads((work / "sweep" / "summary.json").read_text())["stop_reason"],
        "note": f"children started {len(started)}, alive after 5 s "
        f"{len(alive(started, 5.0))}; files in the chdir target "
        f"{len(os.listdir(elsewhere))}",
    }


def deep_json(root: Path, reference: dict) -> dict[str, Any]:
    """A finished sweep whose record is then 100,000 nested arrays: perflab-report, the
    analysis and the same command skip it with a warning; the last measures it again."""
    sweep = root / "deep_json"
    first = perflab(root, [*HEALTHY, f"hydra.sweep.dir={sweep}"])
    assert first.returncode == 0, first.stderr
    record = sweep / "1" / "trials" / "r001.json"
    record.write_text("[" * 100_000 + "]" * 100_000)
    before = {p: t for p, t in finished(sweep).items() if p != record}
    report = subprocess.run([*PERFLAB_REPORT, str(sweep)], capture_output=True, text=True)
    analysis = subprocess.run(
        [sys.executable, "-m", "perflab.report", str(sweep)], capture_output=True, text=True
    )
    resumed = perflab(root, [*HEALTHY, f"hydra.sweep.dir={sweep}"])
    return {
        "fault": "deep_json",
        "exit": f"{report.returncode}, {analysis.returncode}, {resumed.returncode}",
        "kept": f"{sum(finished(sweep).get(p) == t for p, t in before.items())}/{len(before)}",
        "no_record_for_interrupted": "n/a",
        "same_layout": layout(sweep) == reference,
        "stop": json.loads((sweep / "summary.json").read_text())["stop_reason"],
        "note": f"warned: {'nested deeper' in report.stderr}; "
        f"re-measured: {json.loads(record.read_text())['status']}",
    }


def helper_edited(root: Path) -> dict[str, Any]:
    """The model's module imports a helper beside it (no git); the helper is edited
    between a finished session and a resume: refused, naming the helper."""
    source = (Path(__file__).resolve().parents[1] / "tests" / "faulty.py").read_text()
    work = root / "helper_edited"
    work.mkdir()
    (work / "helper_mod.py").write_text("SCALE = 1\n")
    (work / "my_model.py").write_text(source + "\nimport helper_mod  # noqa: E402, F401\n")
    args = [a.replace("tests.faulty.build", "my_model.build") for a in HEALTHY]
    args += [f"hydra.sweep.dir={work / 'sweep'}"]
    first = perflab(work, args)
    before = finished(work / "sweep")
    (work / "helper_mod.py").write_text("SCALE = 2\n")
    edited = perflab(work, args)
    return {
        "fault": "helper_edited",
        "exit": f"{first.returncode} then {edited.returncode}",
        "kept": f"{sum(finished(work / 'sweep').get(p) == t for p, t in before.items())}"
        f"/{len(before)}",
        "no_record_for_interrupted": "n/a",
        "same_layout": "n/a",
        "stop": json.loads((work / "sweep" / "summary.json").read_text())["stop_reason"],
        "note": edited.stderr.strip().splitlines()[-1].split(": ", 3)[-1][:90],
    }


def disk_full(root: Path) -> dict[str, Any]:
    """A 60 MB tmpfs filled while the second trial runs; then space freed and resumed."""
    disk = root / "disk"
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=60m", "tmpfs", str(disk)]
    if subprocess.run(mount, capture_output=True).returncode != 0:
        return {
            "fault": "disk_full",
            "exit": "-",
            "kept": "-",
            "no_record_for_interrupted": "-",
            "same_layout": "-",
            "stop": "-",
            "note": "skipped: cannot mount a tmpfs here",
        }
    try:
        sweep, log = disk / "sweep", root / "disk_full.log"
        args = [*HEALTHY, f"+model.args.started_log={log}", f"hydra.sweep.dir={sweep}"]
        proc = start(root, args)
        wait_started(log, 2, proc)
        before = finished(sweep)
        filler = disk / "filler"
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 2**20)
                    f.flush()
            except OSError:
                pass
        _, err = proc.communicate(timeout=600)
        half_written = list(sweep.rglob("*.tmp")) + [
            p
            for p in sweep.rglob("*")
            if p.is_file() and p.stat().st_size == 0 and p.name != ".perflab.lock"
        ]
        filler.unlink()
        resumed = perflab(root, args)
        after = finished(sweep)
        return {
            "fault": "disk_full",
            "exit": f"{proc.returncode} then {resumed.returncode}",
            "kept": f"{sum(after.get(p) == t for p, t in before.items())}/{len(before)}",
            "no_record_for_interrupted": "n/a",
            "same_layout": len(after) == 3 * ROUNDS,
            "stop": json.loads((sweep / "summary.json").read_text())["stop_reason"],
            "note": f"half-written files: {len(half_written)}; resume command printed: "
            f"{'resume with:' in err}",
        }
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def pipe_closed(root: Path, reference: dict) -> dict[str, Any]:
    """`perflab -m ... | head -2`."""
    sweep, log = root / "pipe", root / "pipe.log"
    args = [*HEALTHY, f"+model.args.started_log={log}", f"hydra.sweep.dir={sweep}"]
    line = " ".join(shlex.quote(a) for a in [*PERFLAB, "-m", *args])
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {line} | head -2"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return {
        "fault": "pipe_closed",
        "exit": str(done.returncode),
        "kept": f"{len(finished(sweep))}/{started(log)}",
        "no_record_for_interrupted": "n/a",
        "same_layout": layout(sweep) == reference,
        "stop": json.loads((sweep / "experiment.json").read_text())["stop_reason"],
        "note": f"lines on stdout: {len(done.stdout.splitlines())}; report in console.log: "
        f"{'report: ' in (sweep / 'console.log').read_text()}",
    }


def deleted(root: Path) -> dict[str, Any]:
    """The sweep directory removed while the second trial runs."""
    sweep, log = root / "deleted", root / "deleted.log"
    proc = start(root, [*HEALTHY, f"+model.args.started_log={log}", f"hydra.sweep.dir={sweep}"])
    wait_started(log, 2, proc)
    shutil.rmtree(sweep)
    _, err = proc.communicate(timeout=600)
    return {
        "fault": "deleted_dir",
        "exit": str(proc.returncode),
        "kept": "n/a",
        "no_record_for_interrupted": "n/a",
        "same_layout": "n/a",
        "stop": "-",
        "note": f"recreated: {sweep.exists()}; {err.strip().splitlines()[-1][17:80]}",
    }


def bad_dirs(root: Path) -> dict[str, Any]:
    """Output directories perflab must not write into, in a sweep and a single run."""
    (root / "a-file").write_text("")
    foreign = root / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    places = ["/", "/proc", str(root / "a-file"), str(foreign), "x" * 100_000]
    before = sorted(os.listdir("/"))
    codes, one_line = [], 0
    for place in places:
        for mode, field in ((["-m"], "hydra.sweep.dir"), ([], "hydra.run.dir")):
            done = subprocess.run(
                [*PERFLAB, *mode, *COMMON, f"{field}={place}"],
                cwd=root,
                capture_output=True,
                text=True,
                timeout=300,
            )
            codes.append(done.returncode)
            one_line += len(done.stderr.strip().splitlines()) == 1
    return {
        "fault": "bad_dirs",
        "exit": "/".join(sorted(set(map(str, codes)))),
        "kept": "n/a",
        "no_record_for_interrupted": "n/a",
        "same_layout": "n/a",
        "stop": "-",
        "note": f"{len(codes)} commands, {one_line} one-line errors; / unchanged: "
        f"{sorted(os.listdir('/')) == before}; foreign dir unchanged: "
        f"{os.listdir(foreign) == ['notes.txt']}",
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
        rows.append(killed(root, "kill_9", signal.SIGKILL, reference))
        rows.append(killed(root, "sighup", signal.SIGHUP, reference))
        rows.append(concurrent(root, reference))
        rows.append(code_edit(root))
        rows.append(disk_full(root))
        rows.append(pipe_closed(root, reference))
        rows.append(deleted(root))
        rows.append(bad_dirs(root))
        rows.append(outside_file(root, reference_dir))
        rows.append(lost_variant(root))
        rows.append(memory_cap(root))
        rows.append(log_cap(root))
        rows.append(child_process(root))
        rows.append(deep_json(root, reference))
        rows.append(helper_edited(root))
        spent = time.monotonic() - start
    keys = ["fault", "exit", "kept", "no_record_for_interrupted", "same_layout", "stop", "note"]
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in keys[:-1]}
    print("  ".join(k.ljust(widths.get(k, 0)) for k in keys))
    for r in rows:
        print("  ".join(str(r[k]).ljust(widths.get(k, 0)) for k in keys))
    print(f"{len(rows)} scenarios in {spent:.0f} s")


if __name__ == "__main__":
    main()
