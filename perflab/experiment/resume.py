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
"""

from __future__ import annotations

import json
import platform
import socket
from importlib import metadata
from pathlib import Path
from typing import Any

from perflab.analysis.summarize import Experiment
from perflab.config.plan import Plan
from perflab.config.schema import without_keys
from perflab.errors import ConfigError
from perflab.experiment import codeprint
from perflab.formats.sweepdir import EXPERIMENT_FILE, trial_records

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

# The machine and software the numbers belong to. Trials from another host, another
# torch (its version names the CUDA build too), Python or perflab, or with the user's
# code imported from another working directory or git commit, are another experiment.
MACHINE_KEYS = ("hostname", "python", "torch", "perflab", "cwd", "git_commit")

FIELD = "hydra.sweep.dir"
ALLOWED = (
    "the same experiment, to resume it (the same command, config, machine, software and "
    "code; "
    f"only {', '.join(MAY_CHANGE)} may change), or a new hydra.sweep.dir for a new one"
)
# differences named in the error message, at most (the rest are counted)
SHOWN_DIFFERENCES = 4


def fingerprint(configs: dict[str, dict[str, Any]], invocation: dict[str, Any]) -> dict[str, Any]:
    """What a later session must match: each job's composed config (MAY_CHANGE removed),
    the machine identity and the code. ``invocation`` is
    perflab.experiment.invocation.read_invocation()."""
    targets = [t for cfg in configs.values() for t in codeprint.factories(cfg)]
    fp = {
        "configs": {name: _measured(cfg) for name, cfg in sorted(configs.items())},
        "machine": machine(invocation),
        "code": codeprint.code_fingerprint(targets, invocation.get("cwd") or "."),
    }
    return json.loads(json.dumps(fp))  # as experiment.json will give it back (tuples, keys)


def machine(invocation: dict[str, Any]) -> dict[str, Any]:
    """MACHINE_KEYS, read in the sweep process from package metadata (the sweep process
    does not import torch; the version string is torch.__version__'s, e.g. 2.13.0+cpu)."""
    try:
        perflab_version: str | None = metadata.version("perflab")
    except metadata.PackageNotFoundError:
        perflab_version = None
    return {
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "perflab": perflab_version,
        "cwd": invocation.get("cwd"),
        "git_commit": invocation.get("git_commit"),
    }


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
    try:
        old = Experiment.load(sweep_dir)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            FIELD, str(sweep_dir), ALLOWED, f"its {EXPERIMENT_FILE} is unreadable ({exc})"
        ) from exc
    if not old.fingerprint:
        raise ConfigError(
            FIELD,
            str(sweep_dir),
            ALLOWED,
            f"its {EXPERIMENT_FILE} has no fingerprint (written by a perflab that could not "
            "resume), so it cannot be checked to be the same experiment",
        )
    found = differences(old, plan, fp)
    if found:
        shown = "; ".join(found[:SHOWN_DIFFERENCES])
        more = len(found) - SHOWN_DIFFERENCES
        shown += f"; and {more} more" if more > 0 else ""
        raise ConfigError(FIELD, str(sweep_dir), ALLOWED, f"holds a different experiment ({shown})")
    return old


def differences(old: Experiment, plan: Plan, fp: dict[str, Any]) -> list[str]:
    """What differs between the experiment in a sweep directory and this one, each as
    "what: before -> now"; empty when they are the same experiment."""
    if _shape(old.plan) != _shape(plan):
        before, now = [v.label for v in old.plan.variants], [v.label for v in plan.variants]
        if before != now:
            return [f"variants: {', '.join(before)} -> {', '.join(now)}"]
        return ["the plan (baselines, cells or swept keys) differs"]
    found: list[str] = []
    old_configs, new_configs = old.fingerprint.get("configs", {}), fp["configs"]
    for name in sorted(set(old_configs) | set(new_configs)):
        a, b = _flat(old_configs.get(name, {})), _flat(new_configs.get(name, {}))
        for key in sorted(set(a) | set(b)):
            if a.get(key, _ABSENT) != b.get(key, _ABSENT):
                found.append(f"{key}: {_show(a.get(key, _ABSENT))} -> {_show(b.get(key, _ABSENT))}")
    old_machine = old.fingerprint.get("machine", {})
    for key in MACHINE_KEYS:
        if old_machine.get(key, _ABSENT) != fp["machine"].get(key, _ABSENT):
            found.append(
                f"{key}: {_show(old_machine.get(key, _ABSENT))} -> "
                f"{_show(fp['machine'].get(key, _ABSENT))}"
            )
    found += code_differences(old.fingerprint.get("code"), fp["code"])
    return list(dict.fromkeys(found))  # a global setting differs in every job: say it once


def code_differences(before: dict[str, Any] | None, now: dict[str, Any]) -> list[str]:
    """What changed in the code the trials run, in words (the hashes say nothing)."""
    if before is None:
        return ["code: not fingerprinted by the perflab that started this directory"]
    found = []
    if before.get("perflab") != now.get("perflab"):
        found.append("code: perflab's own source files changed")
    old_modules, new_modules = before.get("modules", {}), now.get("modules", {})
    for target in sorted(set(old_modules) | set(new_modules)):
        if old_modules.get(target, _ABSENT) != new_modules.get(target, _ABSENT):
            found.append(f"code: the source of {target} changed")
    found += _import_differences(before.get("imports"), now.get("imports"))
    if before.get("worktree") != now.get("worktree"):
        found.append(
            "code: the uncommitted changes to Python files in the working directory's git "
            "work tree differ"
        )
    return found


def _import_differences(before: Any, now: Any) -> list[str]:
    """The local modules the factories import (codeprint.local_imports) whose source
    changed, appeared or went, each named with the module importing it. A fingerprint
    from before perflab followed imports has none: read as no imports."""
    old = before if isinstance(before, dict) else {}
    new = now if isinstance(now, dict) else {}
    found = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        a, b = (a if isinstance(a, dict) else {}), (b if isinstance(b, dict) else {})
        if a.get("hash") != b.get("hash"):
            by = b.get("by") or a.get("by")
            found.append(f"code: the source of {name} (imported by {by}) changed")
    return found


def _shape(plan: Plan) -> dict[str, Any]:
    """The plan without each job's overrides: those hold unswept settings too (e.g.
    schedule.max_rounds=40), which the configs compare, MAY_CHANGE applied."""
    data = plan.to_dict()
    for variant in data["variants"]:
        variant.pop("overrides", None)
    return data


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
