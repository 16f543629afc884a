"""The profiler's files a report links, laid out for the tools that read them.

Each variant's profiling trial leaves a Chrome trace (and, on CUDA with
``profiling.memory_snapshot=true``, a memory snapshot) in its job directory. A report in
the sweep directory links them there; a report published elsewhere gets copies, one
folder per variant named after its label (``traces/batch_size=32,amp=true/``), because
HolisticTraceAnalysis reads every trace file of a folder as one rank, and TensorBoard's
profiler plugin makes one run per folder holding ``*.pt.trace.json.gz`` files and names
it by the folder. How to open them: docs/profiles.md.
"""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from perflab.config.plan import Variant
from perflab.errors import OutsideSweep
from perflab.formats.atomic import replaced_whole
from perflab.formats.profile_json import Profile
from perflab.formats.sweepdir import PROFILE_DIR, PROFILE_FILE, TRACE_FILE, inside, relative_name
from perflab.report.markdown_text import esc
from perflab.report.tables import Report

TRACES_DIR = "traces"
SNAPSHOTS_DIR = "memory_snapshots"
# where the profiling trial writes its files, relative to the variant's job directory

# A folder name keeps letters, digits and . _ - = , + (the characters of Hydra's own
# override_dirname, "amp=true,batch_size=32"); any other run of characters becomes "_".
# None of them needs quoting in POSIX shells, and none is reserved on Windows.
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]+")
# Windows refuses these as a name (before any extension), whatever the case
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"{p}{i}" for p in ("COM", "LPT") for i in range(10))}
# long labels are cut so that a path stays well inside Windows' 260 characters
MAX_NAME = 80


@dataclass
class ProfilerFiles:
    """Relative links from the report to each variant's files, by variant name."""

    traces: dict[str, str] = field(default_factory=dict)
    snapshots: dict[str, str] = field(default_factory=dict)
    # True when the files were copied beside a report published outside the sweep
    published: bool = False
    # files profile.json named that were neither linked nor copied, each with why
    refused: list[str] = field(default_factory=list)


def safe_name(label: str) -> str:
    """A variant label as a folder name that needs no quoting in a shell and is valid on
    Windows: "batch_size=32 amp=true" -> "batch_size=32,amp=true"."""
    name = _UNSAFE.sub("_", ",".join(label.split()))[:MAX_NAME].rstrip(".")
    if name.startswith(("-", ".")) or name.split(".")[0].upper() in _RESERVED:
        name = f"_{name}"  # not an option to a command, not hidden, not a device
    return name


def folder_names(variants: list[Variant]) -> dict[str, str]:
    """A distinct folder name per variant, also on case-insensitive file systems; a name
    taken already gets the variant's job directory appended."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for v in variants:
        base = safe_name(v.label) or "variant"
        name, n = base, 0
        while name.casefold() in taken:
            n += 1
            name = f"{base}-{v.dir}" if n == 1 else f"{base}-{v.dir}-{n}"
        taken.add(name.casefold())
        names[v.name] = name
    return names


def snapshot_file(profile: Profile) -> str | None:
    """The memory snapshot's file name (in the profile directory), when one was written."""
    return profile.memory_snapshot.file if profile.memory_snapshot else None


def publish(report: Report, out: Path) -> ProfilerFiles:
    """Links to each variant's trace and memory snapshot; a report written outside the
    sweep directory gets copies laid out per variant (module docstring), so its links
    keep working wherever the folder goes."""
    in_sweep = out.resolve() == report.sweep_dir.resolve()
    files = ProfilerFiles(published=not in_sweep)
    names = folder_names(report.experiment.plan.variants)
    for v in report.experiment.plan.variants:
        profile = report.profiles.get(v.name)
        if not profile:
            continue
        source_dir = report.sweep_dir / v.dir / PROFILE_DIR
        links = [
            (files.traces, profile.trace_file.trace, f"{TRACES_DIR}/{names[v.name]}/{TRACE_FILE}"),
            (files.snapshots, snapshot_file(profile), f"{SNAPSHOTS_DIR}/{names[v.name]}.pickle"),
        ]
        for found, relative, copy in links:
            if not relative:
                continue
            source = _confined(report.sweep_dir, source_dir, relative, files.refused)
            if source is None:
                continue
            if in_sweep:
                found[v.name] = f"{v.dir}/{PROFILE_DIR}/{relative}"
            elif source.is_file():
                (out / copy).parent.mkdir(parents=True, exist_ok=True)
                with replaced_whole(out / copy) as tmp:
                    shutil.copyfile(source, tmp)
                found[v.name] = copy
    if not in_sweep:
        _prune(out, set(files.traces.values()) | set(files.snapshots.values()))
    return files


def _confined(
    sweep_dir: Path, source_dir: Path, relative: object, refused: list[str]
) -> Path | None:
    """The file profile.json names, resolved, when it is a relative path that stays in the
    sweep directory (sweepdir.inside); else None, with a warning naming profile.json and
    the value, also kept in ``refused`` for the report. A profile.json from another
    machine or a hand may name anything: ``"../../secret"``, ``"/etc/shadow"``, or a trace
    replaced by a link to either."""
    profile = (source_dir / PROFILE_FILE).relative_to(sweep_dir).as_posix()
    try:
        if not relative_name(relative):
            raise OutsideSweep(f"names {relative!r}, not a relative path inside the sweep")
        return inside(sweep_dir, source_dir / str(relative))
    except OutsideSweep as exc:
        why = f"{profile}: {exc}; neither linked nor copied"
        print(f"perflab: warning: {why}", file=sys.stderr)
        refused.append(why)
        return None


def _prune(out: Path, keep: set[str]) -> None:
    """Remove the traces and snapshots an earlier report published into this folder
    left behind, so that TensorBoard and HTA see only this report's variants. Only files
    perflab names this way are touched: ``traces/NAME/perflab.pt.trace.json.gz`` (and
    the folder once empty), ``traces/*.json.gz`` of the earlier one-folder layout, and
    ``memory_snapshots/*.pickle``."""
    old = [
        *(out / TRACES_DIR).glob(f"*/{TRACE_FILE}"),
        *(out / TRACES_DIR).glob("*.json.gz"),
        *(out / SNAPSHOTS_DIR).glob("*.pickle"),
    ]
    for path in old:
        if path.relative_to(out).as_posix() not in keep:
            path.unlink()
            if path.parent.parent == out / TRACES_DIR and not any(path.parent.iterdir()):
                path.parent.rmdir()


def _link(path: str, text: str) -> str:
    return f"[`{text}`]({path})"


def files_section(report: Report, files: ProfilerFiles) -> list[str]:
    """Where each variant's trace and memory snapshot are, and how to open them."""
    if not files.traces and not files.snapshots:
        return []
    variants = [
        v
        for v in report.experiment.plan.variants
        if v.name in files.traces or v.name in files.snapshots
    ]
    # a list, not a table: two paths named after a variant's label, beside the label,
    # are wider than the page
    rows = []
    for v in variants:
        trace = files.traces.get(v.name)
        parts = ["trace folder " + (_link(trace, trace.rsplit("/", 1)[0] + "/") if trace else "-")]
        if files.snapshots:
            snapshot = files.snapshots.get(v.name)
            parts.append("CUDA memory snapshot " + (_link(snapshot, snapshot) if snapshot else "-"))
        rows.append(f"- {esc(v.label)}: {'; '.join(parts)}")
    logdir = TRACES_DIR if files.published else "."
    runs = (
        "one run per variant, named by its folder"
        if files.published
        else "runs named by job directory (`0/profile/trace`); a report published with "
        "`report.dir=DIR` or `perflab-report SWEEP --out DIR` names them by variant"
    )
    lines = [
        "## Traces and memory snapshots",
        "",
        "From each variant's profiling trial, relative to this report; the tools below "
        "read them on your machine (details: perflab's docs/profiles.md).",
        "",
        *rows,
        "",
        "To open them:",
        "",
        "- Perfetto: open the `.json.gz` at https://ui.perfetto.dev (it runs in the "
        "browser; gzip is read as it is).",
        f"- TensorBoard: `pip install torch-tb-profiler`, then `tensorboard --logdir "
        f"{logdir}` from this folder: {runs}.",
        "- HolisticTraceAnalysis, per trace folder: `HTA_DISABLE_NS_ROUNDING=1` in the "
        "environment, then `TraceAnalysis(trace_dir=FOLDER, include_last_profiler_step=True)`.",
    ]
    if files.snapshots:
        lines.append(
            "- Memory snapshot: drop it on https://pytorch.org/memory_viz (the page runs "
            "in the browser and uploads nothing), or `python -m torch.cuda._memory_viz "
            "trace_plot FILE -o memory.html` (it unpickles FILE: only snapshots you trust)."
        )
    return [*lines, ""]
