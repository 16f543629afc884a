"""perflab's kernel attribution on real CUDA traces, against the traces' own sums and
HolisticTraceAnalysis's temporal breakdown.

    python benchmarks/attribution_vs_hta.py [TRACE_DIR] [--write-fixture]

TRACE_DIR holds SWEEP/VARIANT.json.xz traces (default: the H100 traces in
tests/fixtures/h100/traces). For each trace it prints the sum of perflab's family totals
against the trace's kernel + memcpy + memset time, and perflab's GPU idle share; with HTA
installed (`pip install HolisticTraceAnalysis "pandas<3"`, in a separate environment if
need be) also HTA's idle share. `--write-fixture` stores HTA's figures in
tests/fixtures/h100/hta_temporal_breakdown.json, which tests/test_attribution.py checks
perflab against.
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perflab.profile import attribution  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "h100"
HTA_FIGURES = FIXTURES / "hta_temporal_breakdown.json"


def load(path: Path) -> dict[str, Any]:
    opener = lzma.open if path.suffix == ".xz" else gzip.open
    with opener(path, "rt") as f:
        return dict(json.load(f))


def raw_device_us(trace: dict[str, Any]) -> float:
    """The trace's own kernel + memcpy + memset time, summed independently of perflab."""
    cats = {"kernel", "gpu_memcpy", "gpu_memset"}
    return sum(float(e.get("dur", 0)) for e in trace["traceEvents"] if e.get("cat") in cats)


def hta_idle(trace: dict[str, Any]) -> dict[str, float] | None:
    """HTA's temporal breakdown of one trace (rank 0), or None without HTA."""
    try:
        os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "rank0.pt.trace.json.gz").write_bytes(
            gzip.compress(json.dumps(trace).encode())
        )
        # perflab synchronises at the end of every profiled step, so the last one is
        # complete and belongs in the breakdown
        analysis = TraceAnalysis(trace_dir=tmp, include_last_profiler_step=True)
        row = analysis.get_temporal_breakdown(visualize=False).iloc[0]
    return {
        "idle_us": float(row["idle_time(us)"]),
        "kernel_time_us": float(row["kernel_time(us)"]),
        "idle_share": float(row["idle_time(us)"]) / float(row["kernel_time(us)"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="?", type=Path, default=FIXTURES / "traces")
    parser.add_argument("--write-fixture", action="store_true")
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    print(f"{'trace':30s} {'families/raw':>12s} {'perflab idle':>12s} {'HTA idle':>9s}")
    for path in sorted(args.traces.glob("*/*.json*")):
        key = f"{path.parent.name}/{path.name.split('.')[0]}"
        trace = load(path)
        found = attribution.attribute(trace, top=15)
        ratio = sum(found.families_us.values()) / raw_device_us(trace)
        idle = 1 - (found.busy.busy_share or 0.0)
        hta = hta_idle(trace)
        if hta is not None:
            figures[key] = hta
        seen = "-" if hta is None else f"{hta['idle_share']:.1%}"
        print(f"{key:30s} {ratio:12.4f} {idle:12.1%} {seen:>9s}")
    if args.write_fixture:
        if not figures:
            sys.exit("--write-fixture needs HolisticTraceAnalysis installed")
        import hta

        HTA_FIGURES.write_text(
            json.dumps(
                {
                    "tool": f"HolisticTraceAnalysis {getattr(hta, '__version__', '0.5.0')}",
                    "call": "TraceAnalysis(trace_dir, include_last_profiler_step=True)"
                    ".get_temporal_breakdown(), HTA_DISABLE_NS_ROUNDING=1",
                    "traces": figures,
                },
                indent=1,
                sort_keys=True,
            )
            + "\n"
        )
        print(f"wrote {HTA_FIGURES.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
