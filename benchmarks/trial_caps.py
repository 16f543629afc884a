"""What the caps on a trial cost: trial.max_memory_mb and trial.max_log_mb, enforced by
the process that waits for the trial (perflab.process.isolation.Limits, sampled every
WATCH_INTERVAL_S).

  sample - one look at a running trial, as the parent takes it every interval: the
           resident memory of the trial process and its descendants (tree_rss_bytes)
           and its log's size (trim_log), for a trial process alone and with child
           processes (DataLoader workers, say); in us, and as a share of one core;
  parent - the CPU the parent spends waiting for a trial of --seconds, with the caps
           and without (time.process_time, start and answer included);
  log    - a trial writing --mib MiB to its log in 64 KiB lines as fast as it can, then
           120 MiB at 60 MB/s (the issue's 200 kB a step): MB/s with the log cap (10 MiB,
           the default) and without, and the most the log held on disk meanwhile (it
           outgrows the cap by what the trial writes before the next cut).

    python benchmarks/trial_caps.py [--seconds 5] [--children 4] [--mib 512] [--dir .]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MiB = 2**20
LINE = "x" * (64 * 1024 - 1) + "\n"


def holds(args: tuple[int, float, str]) -> int:
    """A trial process that uses torch's thread pool, starts ``children`` Python
    processes and waits ``seconds``; its pid goes to ``pid_file`` at once."""
    children, seconds, pid_file = args
    import torch

    torch.ones(256, 256) @ torch.ones(256, 256)  # the intra-op pool's threads start
    started = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        for _ in range(children)
    ]
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(seconds)
    for child in started:
        child.kill()
        child.wait()
    return len(os.listdir(f"/proc/{os.getpid()}/task"))


def writes(args: tuple[int, float]) -> tuple[float, int]:
    """Write ``mib`` MiB to stdout (the log), at ``rate`` MB/s (0: as fast as it can);
    the seconds it took and the largest size the log had after any write."""
    mib, rate = args
    largest, start, written = 0, time.perf_counter(), 0
    for _ in range(mib * MiB // len(LINE)):
        written += os.write(1, LINE.encode())
        largest = max(largest, os.fstat(1).st_size)
        if rate:
            time.sleep(max(start + written / (rate * 1e6) - time.perf_counter(), 0))
    return time.perf_counter() - start, largest


def sample_cost(children: int, work: Path, samples: int = 2000) -> tuple[float, int]:
    """Median us of one sample (memory of the tree + the log's size) of a live trial
    with ``children`` child processes, and its thread count."""
    from perflab.process.isolation import run_isolated, tree_rss_bytes, trim_log

    pid_file, log = work / f"pid{children}", work / "sample.log"
    log.write_bytes(b"y" * 1000)
    done: dict[str, int] = {}

    def run() -> None:
        outcome = run_isolated(holds, (children, 4.0, str(pid_file)), timeout_s=120)
        done["threads"] = outcome.value

    thread = threading.Thread(target=run)
    thread.start()
    while not pid_file.exists() or not pid_file.read_text():
        time.sleep(0.01)
    pid = int(pid_file.read_text())
    took = []
    for _ in range(samples):
        start = time.perf_counter_ns()
        tree_rss_bytes(pid)
        trim_log(log, 10 * MiB)
        took.append(time.perf_counter_ns() - start)
    thread.join()
    return statistics.median(took) / 1000, done["threads"]


def parent_cpu(seconds: float, work: Path, capped: bool) -> float:
    """CPU seconds this process spends while a trial of ``seconds`` runs."""
    from perflab.process.isolation import Limits, run_isolated

    limits = Limits(2**40, "benchmark", work / "cpu.log", 10 * MiB) if capped else None
    start = time.process_time()
    run_isolated(holds, (0, seconds, str(work / "cpu.pid")), timeout_s=120, limits=limits)
    return time.process_time() - start


def log_throughput(mib: int, rate: float, work: Path, capped: bool) -> tuple[float, int, int]:
    """MB/s of a trial writing ``mib`` MiB to its log (at ``rate`` MB/s, 0: at full
    speed), the most the log held meanwhile, and its size at the end."""
    from perflab.process.isolation import Limits, run_isolated

    log = work / ("capped.log" if capped else "uncapped.log")
    limits = Limits(log=log, max_log_bytes=10 * MiB) if capped else None
    outcome = run_isolated(writes, (mib, rate), timeout_s=600, log=log, limits=limits)
    seconds, largest = outcome.value
    size = log.stat().st_size
    log.unlink()
    return mib * MiB / 1e6 / seconds, largest, size


def main() -> None:
    from perflab.process.isolation import WATCH_INTERVAL_S, start_fork_server

    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--children", type=int, default=4)
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--dir", default=".", help="where the logs go (its disk is measured)")
    args = parser.parse_args()
    start_fork_server()
    per_s = 1 / WATCH_INTERVAL_S
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = Path(tmp)
        print(f"sample every {WATCH_INTERVAL_S} s ({per_s:g} a second)")
        for children in (0, args.children):
            us, threads = sample_cost(children, work)
            share = us * per_s / 1e6
            print(
                f"sample: trial with {threads} threads and {children} child processes: "
                f"{us:.0f} us, {share:.3%} of a core"
            )
        for capped in (False, True):
            cpu = statistics.median(parent_cpu(args.seconds, work, capped) for _ in range(3))
            label = "caps on " if capped else "caps off"
            print(
                f"parent, {label}: {cpu * 1000:.1f} ms CPU over a {args.seconds:g} s trial "
                f"({cpu / args.seconds:.3%} of a core; median of 3)"
            )
        # as fast as the page cache takes it, then at the 60 MB/s (200 kB a step)
        for mib, rate in ((args.mib, 0.0), (120, 60.0)):
            for capped in (False, True):
                got, largest, size = log_throughput(mib, rate, work, capped)
                label = "cap 10 MiB" if capped else "no cap    "
                print(
                    f"log, {mib} MiB at {f'{rate:g} MB/s' if rate else 'full speed'}, "
                    f"{label}: {got:,.0f} MB/s; most on disk {largest / MiB:,.1f} MiB; "
                    f"at the end {size / MiB:,.2f} MiB"
                )


if __name__ == "__main__":
    main()
