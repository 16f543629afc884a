"""Resuming a sweep: the same command with the same ``hydra.sweep.dir`` continues it.

A sweep directory holds one experiment. Run again into the same directory, perflab keeps
every finished trial (a record on disk, whatever its status: ok, failed, timeout,
invalid), replays the shuffled order of the rounds it already ran (the order comes from
``schedule.shuffle_seed``) and runs only the missing trials, so the directory ends up as
an uninterrupted run would have left it (perflab.experiment.schedule.run_experiment).

Only the same experiment may continue; trials of another must never be mixed in
silently. "The same" is checked against the fingerprint stored in experiment.json: the
plan (variants, labels, cells, baselines), every job's fully composed config except the
keys of MAY_CHANGE, the machine and software of MACHINE_KEYS, and the code the trials run
(perflab.experiment.codeprint: perflab's sources, the user's factories and the local modules
they import, uncommitted changes). Any
other difference stops the run before anything is measured, with exit 2 and one line
naming it.

The fingerprint is written into experiment.json as a JSON object (fingerprint()) and
read back, from there and for this session alike, as a Fingerprint: the comparison reads
attributes. Its history: ``code`` since 2026-11-23, its ``imports`` since 2026-11-26; a
fingerprint without them is read with None there.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import socket
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from perflab.analysis.sweep import Experiment
from perflab.config.plan import Plan
from perflab.config.schema import without_keys
from perflab.errors import ConfigError
from perflab.experiment import codeprint
from perflab.formats.dataclass_json import decode, encode, written_when
from perflab.formats.sweepdir import EXPERIMENT_FILE, trial_records
from perflab.formats.trial_parts import Invocation

# Config keys that may differ between the sessions of one experiment, and why: they
# decide when the experiment stops (raise max_rounds or time_budget_s to extend a finished
# run, lower target_half_width to ask for more precision), and where the report goes and
# whether the separate, untimed profiling pass runs, and the caps on a trial's memory and
# log (a sweep stopped by a full disk or a cap resumes with another); never what a timed
# trial measures. Everything else (the knobs, the workload, the rest of trial.*, the rest
# of schedule.*: seed, sentinel, treatments, confidence, band, metric, label) must be
# equal.
MAY_CHANGE = (
    "schedule.min_rounds",
    "schedule.max_rounds",
    "schedule.target_half_width",
    "schedule.time_budget_s",
    "report.dir",
    "profile",
    "profiling",
    "trial.max_memory_mb",
    "trial.max_log_mb",
)


@dataclass(frozen=True, kw_only=True)
class Machine:
    """The machine and software the numbers belong to. Trials from another host, another
    torch (its version names the CUDA build too), Python or perflab, or with the user's
    code imported from another working directory or git commit, are another experiment."""

    # socket.gethostname()
    hostname: str
    # platform.python_version()
    python: str
    # torch's version from package metadata, e.g. 2.13.0+cpu (None: not installed)
    torch: str | None
    # perflab's version (None: not installed as a package)
    perflab: str | None
    # the working directory perflab ran in (the user's code is imported from there)
    cwd: str | None
    # its git commit (None: not in a git work tree)
    git_commit: str | None


MACHINE_KEYS = tuple(f.name for f in dataclasses.fields(Machine))


@dataclass(frozen=True, kw_only=True)
class Imported:
    """A local module the factories import (perflab.experiment.codeprint.local_imports)."""

    # the module whose import names it
    by: str
    # the hash of its source
    hash: str


@dataclass(frozen=True, kw_only=True)
class CodePrint:
    """The code the trials run, as hashes (perflab.experiment.codeprint.code_fingerprint)."""

    # perflab's own source files
    perflab: str
    # each factory ("package.module.function") outside perflab: its source's hash (None:
    # no source file found)
    modules: dict[str, str | None]
    # the local modules the factories import, by name (None: a fingerprint of before
    # 2026-11-26, read as none)
    imports: dict[str, Imported] | None = written_when()
    # the uncommitted changes of the working directory's git work tree (None: not in one)
    worktree: str | None


@dataclass(frozen=True, kw_only=True)
class Fingerprint:
    """What a later session must match to continue a sweep directory."""

    # each job's composed config, MAY_CHANGE removed, by job number
    configs: dict[str, dict[str, Any]]
    machine: Machine
    # None: a fingerprint of before 2026-11-23, which did not hash the code
    code: CodePrint | None = written_when()

    @classmethod
    def from_json(cls, data: Any) -> Fingerprint:
        """The fingerprint from its JSON object; SchemaError (a ValueError) names a field
        missing or of the wrong type."""
        return decode(cls, data, "fingerprint")


FIELD = "hydra.sweep.dir"
ALLOWED = (
    "the same experiment, to resume it (the same command, config, machine, software and "
    "code; "
    f"only {', '.join(MAY_CHANGE)} may change), or a new hydra.sweep.dir for a new one"
)
# differences named in the error message, at most (the rest are counted)
SHOWN_DIFFERENCES = 4


def fingerprint(configs: dict[str, dict[str, Any]], invocation: Invocation) -> dict[str, Any]:
    """What a later session must match, as experiment.json stores it (Fingerprint's JSON
    object): each job's composed config (MAY_CHANGE removed), the machine identity and
    the code. ``invocation`` is perflab.experiment.invocation.read_invocation()."""
    targets = [t for cfg in configs.values() for t in codeprint.factories(cfg)]
    fp = {
        "configs": {name: _measured(cfg) for name, cfg in sorted(configs.items())},
        "machine": encode(machine(invocation)),
        "code": codeprint.code_fingerprint(targets, invocation.cwd or "."),
    }
    return json.loads(json.dumps(fp))  # as experiment.json will give it back (tuples, keys)


def machine(invocation: Invocation) -> Machine:
    """This machine, read in the sweep process from package metadata (the sweep process
    does not import torch; the version string is torch.__version__'s, e.g. 2.13.0+cpu)."""
    return Machine(
        hostname=socket.gethostname(),
        python=platform.python_version(),
        torch=_version("torch"),
        perflab=_version("perflab"),
        cwd=invocation.cwd or None,
        git_commit=invocation.git_commit,
    )


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _measured(config: dict[str, Any]) -> dict[str, Any]:
    return without_keys(config, MAY_CHANGE)


def previous(sweep_dir: Path, plan: Plan, fp: dict[str, Any]) -> Experiment | None:
    """The earlier session's experiment when ``sweep_dir`` holds the same experiment,
    None for a new directory; ConfigError (exit 2) for anything else."""
    sweep_dir = Path(sweep_dir)
    if not (sweep_dir / EXPERIMENT_FILE).exists():
        stray = [p for v in plan.variants for p in trial_records(sweep_dir / v.dir)]
        if stray:
            raise ConfigError(
                FIELD,
                str(sweep_dir),
                ALLOWED,
                f"has trial records ({stray[0].relative_to(sweep_dir)}) but no "
                f"{EXPERIMENT_FILE}, so nothing says which experiment they belong to",
            )
        return None
    old, before = _earlier(sweep_dir)
    found = _differences(old.plan, before, plan, Fingerprint.from_json(fp))
    if found:
        shown = "; ".join(found[:SHOWN_DIFFERENCES])
        more = len(found) - SHOWN_DIFFERENCES
        shown += f"; and {more} more" if more > 0 else ""
        raise ConfigError(FIELD, str(sweep_dir), ALLOWED, f"holds a different experiment ({shown})")
    return old


def _earlier(sweep_dir: Path) -> tuple[Experiment, Fingerprint]:
    """The experiment in ``sweep_dir`` and its fingerprint; ConfigError (exit 2) when
    either cannot be read."""
    try:
        old = Experiment.load(sweep_dir)
        before = Fingerprint.from_json(old.fingerprint) if old.fingerprint else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            FIELD, str(sweep_dir), ALLOWED, f"its {EXPERIMENT_FILE} is unreadable ({exc})"
        ) from exc
    if before is None:
        raise ConfigError(
            FIELD,
            str(sweep_dir),
            ALLOWED,
            f"its {EXPERIMENT_FILE} has no fingerprint (written by a perflab that could not "
            "resume), so it cannot be checked to be the same experiment",
        )
    return old, before


def differences(old: Experiment, plan: Plan, fp: dict[str, Any]) -> list[str]:
    """What differs between the experiment in a sweep directory and this one (``fp``:
    fingerprint()'s), each as "what: before -> now"; empty when they are the same
    experiment."""
    before = Fingerprint.from_json(old.fingerprint)
    return _differences(old.plan, before, plan, Fingerprint.from_json(fp))


def _differences(old_plan: Plan, before: Fingerprint, plan: Plan, now: Fingerprint) -> list[str]:
    if _shape(old_plan) != _shape(plan):
        old_labels, labels = [v.label for v in old_plan.variants], [v.label for v in plan.variants]
        if old_labels != labels:
            return [f"variants: {', '.join(old_labels)} -> {', '.join(labels)}"]
        return ["the plan (baselines, cells or swept keys) differs"]
    found = config_differences(before.configs, now.configs)
    found += machine_differences(before.machine, now.machine)
    found += code_differences(before.code, now.code)
    return list(dict.fromkeys(found))  # a global setting differs in every job: say it once


def config_differences(
    before: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]
) -> list[str]:
    """Every setting that differs between the jobs' configs, "key: before -> now"."""
    found = []
    for name in sorted(set(before) | set(now)):
        a, b = _flat(before.get(name, {})), _flat(now.get(name, {}))
        for key in sorted(set(a) | set(b)):
            if a.get(key, _ABSENT) != b.get(key, _ABSENT):
                found.append(f"{key}: {_show(a.get(key, _ABSENT))} -> {_show(b.get(key, _ABSENT))}")
    return found


def machine_differences(before: Machine, now: Machine) -> list[str]:
    """Each of MACHINE_KEYS that differs, "key: before -> now"."""
    pairs = [(key, getattr(before, key), getattr(now, key)) for key in MACHINE_KEYS]
    return [f"{key}: {_show(a)} -> {_show(b)}" for key, a, b in pairs if a != b]


def code_differences(before: CodePrint | None, now: CodePrint | None) -> list[str]:
    """What changed in the code the trials run, in words (the hashes say nothing)."""
    if before is None or now is None:
        return ["code: not fingerprinted by the perflab that started this directory"]
    found = []
    if before.perflab != now.perflab:
        found.append("code: perflab's own source files changed")
    for target in sorted(set(before.modules) | set(now.modules)):
        if before.modules.get(target, _ABSENT) != now.modules.get(target, _ABSENT):
            found.append(f"code: the source of {target} changed")
    found += _import_differences(before.imports or {}, now.imports or {})
    if before.worktree != now.worktree:
        found.append(
            "code: the uncommitted changes to Python files in the working directory's git "
            "work tree differ"
        )
    return found


def _import_differences(before: dict[str, Imported], now: dict[str, Imported]) -> list[str]:
    """The local modules the factories import (codeprint.local_imports) whose source
    changed, appeared or went, each named with the module importing it. A fingerprint
    from before perflab followed imports has none: read as no imports."""
    found = []
    for name in sorted(set(before) | set(now)):
        a, b = before.get(name), now.get(name)
        if a is None or b is None or a.hash != b.hash:
            entry = b or a  # the name is in one of them at least
            importer = entry.by if entry is not None else None
            found.append(f"code: the source of {name} (imported by {importer}) changed")
    return found


def _shape(plan: Plan) -> Plan:
    """The plan without each job's overrides: those hold unswept settings too (e.g.
    schedule.max_rounds=40), which the configs compare, MAY_CHANGE applied."""
    variants = [dataclasses.replace(v, overrides=[]) for v in plan.variants]
    return dataclasses.replace(plan, variants=variants)


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):  # an empty node has no settings: as if absent
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


_ABSENT = object()


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    return "null" if value is None else str(value)
