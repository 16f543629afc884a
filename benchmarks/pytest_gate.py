"""The pytest plugin on perflab's spin ground truth, run again and again: how often a
known 5 % effect passes "faster by 2 %", and how often an A/A pair fails "not slower".

Each repetition runs pytest (a fresh process, as a CI job would) on a test file with two
tests: spin steps of 2000 us against 2100 us (the variant is 5 % faster by construction)
asserted faster by at least 2 %, and pin_memory=false against true on the CPU (the same
step: an A/A pair) asserted not slower. Outcomes are counted from pytest's junit XML.

    python benchmarks/pytest_gate.py --repeats 10

Results: benchmarks/RESULTS.md, "The pytest plugin on the spin ground truth".
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

TESTS = """
def test_known_effect_is_faster_by_2_percent(perflab_run):
    result = perflab_run("+experiment=spin_ratio", "preset=quick", "profile=off",
                         "schedule.treatments={model.step_us:2100}", budget_s=60)
    print(result.assert_faster(model__step_us=2000, by=0.02))


def test_aa_pair_is_not_slower(perflab_run):
    result = perflab_run("+experiment=spin_ground_truth", "model.step_us=2000",
                         "pin_memory=false,true", "preset=quick", "profile=off", budget_s=60)
    print(result.assert_not_slower(pin_memory=True))
"""


def outcomes(junit: Path) -> dict[str, str]:
    """Each test's outcome: passed, failed, skipped (undecided) or error."""
    found = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "skipped", "error")]
        found[case.attrib["name"]] = kinds[0] if kinds else "passed"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    counts: dict[str, Counter[str]] = {}
    seconds = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "test_gate.py").write_text(TESTS)
        for i in range(args.repeats):
            junit = root / f"junit{i}.xml"
            start = time.monotonic()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    f"--junitxml={junit}",
                    "test_gate.py",
                ],
                cwd=root,
                capture_output=True,
                text=True,
                check=False,
            )
            seconds.append(time.monotonic() - start)
            for name, outcome in outcomes(junit).items():
                counts.setdefault(name, Counter())[outcome] += 1
            print(
                f"repeat {i + 1}/{args.repeats}: {dict(outcomes(junit))} ({seconds[-1]:.0f} s)",
                flush=True,
            )
    for name, counter in counts.items():
        print(
            f"{name}: " + ", ".join(f"{k} {v}/{args.repeats}" for k, v in sorted(counter.items()))
        )
    median = sorted(seconds)[len(seconds) // 2]
    print(f"pytest run (two tests): median {median:.0f} s, max {max(seconds):.0f} s")


if __name__ == "__main__":
    main()
