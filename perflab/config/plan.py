"""The experiment plan: which variants a sweep has, which are compared with which.

Built-in knobs have a known "off" baseline (amp off, compile off, channels_last off,
num_workers 0, pin_memory off; model=hf's eager attention, no checkpointing, no cache);
implementations of one thing (``step``, ``model.fn``) take the first value listed as
theirs; ``schedule.treatments`` declares more (any key, with its baseline value). Every other
swept key (batch_size, model, ...) splits the variants into cells, and comparisons stay
inside a cell: each variant is compared with the variant of its cell whose treatment
keys are all at their baseline values. A hidden A/A sentinel, a
second copy of the first cell's baseline, measures the noise floor.

Plain data only: the plan is saved in experiment.json in the sweep directory so the analysis
can be re-run from the records alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from perflab.errors import ConfigError, PerflabError
from perflab.formats.sweepdir import relative_name

# knob -> its "off" value, as the validated config holds it
BUILTIN_TREATMENTS: dict[str, Any] = {
    "amp": "off",
    "compile": "off",
    "channels_last": False,
    "fused": "off",
    "num_workers": 0,
    "pin_memory": False,
    # model=hf's knobs (docs/configuration.md, "Hugging Face models"): eager attention is
    # transformers' reference implementation, the one every other is checked against;
    # checkpointing and the cache are off in a plain training step
    "model.attn": "eager",
    "model.gradient_checkpointing": False,
    "model.use_cache": False,
}
SENTINEL = "sentinel"
# where perflab.run's functions shipped by value are imported from (perflab.process.shipped)
SHIPPED_MODULE = "perflab.process.shipped"
# Implementations of one thing (docs/configuration.md, "Your own step", "Two
# implementations of one function"): no value is "off", so the baseline is the first value
# listed on the command line (perflab -m step=pkg.ref,pkg.ours compares ours against ref),
# unless schedule.treatments names another
FIRST_LISTED_TREATMENTS = ("step", "model.fn")


@dataclass(frozen=True)
class Variant:
    # "0", "1", ... (Hydra's job number) or "sentinel"
    name: str
    # the swept settings that make this variant, e.g. "amp=bf16 batch_size=64"
    label: str
    # job directory, relative to the sweep directory
    dir: str
    # Hydra overrides of this job
    overrides: list[str]
    # values of the swept keys that are not treatments: variants are compared within a cell
    cell: dict[str, Any]
    # values of the swept treatment keys
    treatment: dict[str, Any]
    # name of the variant this one is compared with; None for baselines
    baseline: str | None

    @property
    def source(self) -> str:
        """The job whose config this variant runs: its own, or for the A/A sentinel, its
        baseline's."""
        return self.baseline if self.name == SENTINEL and self.baseline else self.name


@dataclass(frozen=True)
class Plan:
    variants: list[Variant]
    # swept keys, in the order they first appear on the command line
    swept: list[str]
    # treatment key -> baseline value, for the swept treatment keys
    treatments: dict[str, Any] = field(default_factory=dict)

    def by_name(self, name: str) -> Variant:
        return next(v for v in self.variants if v.name == name)

    def comparisons(self) -> list[tuple[Variant, Variant]]:
        """(variant, baseline) pairs, the sentinel excluded."""
        return [
            (v, self.by_name(v.baseline))
            for v in self.variants
            if v.baseline is not None and v.name != SENTINEL
        ]

    def sentinel(self) -> tuple[Variant, Variant] | None:
        for v in self.variants:
            if v.name == SENTINEL and v.baseline is not None:
                return v, self.by_name(v.baseline)
        return None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        variants = [Variant(**v) for v in data["variants"]]
        for v in variants:
            # experiment.json names each job's directory: the records, the profile and the
            # trace are read from there, so it must lie in the sweep (sweepdir.inside)
            if not relative_name(v.dir):
                raise ValueError(
                    f"variant {v.name!r} has dir={v.dir!r}; allowed: a relative path "
                    "inside the sweep directory, without '..'"
                )
        return cls(variants, data["swept"], data.get("treatments", {}))


@dataclass(frozen=True)
class Job:
    """One Hydra job of the sweep, as the launcher composed it."""

    num: int
    overrides: list[str]
    # value of each overridden key: the validated config's value for a field, the
    # option name for a config group (model=mlp)
    values: dict[str, Any]


def override_key(override: str) -> str:
    key = override.split("=", 1)[0]
    return key.lstrip("+~")


def swept_keys(jobs: list[Job]) -> list[str]:
    """Keys whose value differs between jobs, in command-line order."""
    keys: list[str] = []
    for job in jobs:
        for override in job.overrides:
            key = override_key(override)
            if key not in keys and key.split(".")[0] != "hydra":
                keys.append(key)
    return [k for k in keys if len({repr(j.values.get(k)) for j in jobs}) > 1]


def _label(values: dict[str, Any], keys: list[str]) -> str:
    return assignments(values, keys) or "baseline"


def value_text(value: Any) -> str:
    """A swept value as an override writes it (booleans lowercase: amp=true)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def assignments(values: dict[str, Any], keys: Iterable[str] | None = None) -> str:
    """``KEY=VALUE KEY=VALUE``: the overrides that make ``values`` (those of ``keys``,
    in their order, when given), as the report, the console and group names show them."""
    chosen = values if keys is None else {k: values.get(k) for k in keys}
    return " ".join(label_text(f"{k}={value_text(v)}") for k, v in chosen.items())


def label_text(assignment: str) -> str:
    """``key=value`` as a label shows it: a function perflab.run shipped by value by its
    own name and hash, without the module every shipped function shares."""
    return assignment.replace("=" + SHIPPED_MODULE + ".", "=", 1)


# Swept keys that are the user's own knobs (a factory's arguments): swept, they ask for a
# comparison, and perflab cannot know which value is the baseline. Sizes (batch_size,
# model.hidden) swept alone are cells: a throughput table, no comparison needed.
USER_KNOBS = ("model.args.", "data.dataset_args.")


def _refuse_knobs_without_baseline(
    variants: list[Variant], cell_keys: list[str], jobs: list[Job]
) -> None:
    """A sweep of a user's knob with no baseline would run its whole budget and then say
    "no comparisons" (issue 26 saw 1 min 26 s spent so): refused before it starts, with
    the line that declares the baseline."""
    if any(v.baseline is not None for v in variants):
        return
    knob = next((k for k in cell_keys if k.startswith(USER_KNOBS)), None)
    if knob is None:
        return
    first = value_text(jobs[0].values.get(knob))
    raise ConfigError(
        "schedule.treatments",
        f"(none for {knob})",
        f"the value {knob} is compared against: add '+schedule.treatments={{{knob}:{first}}}' "
        "(or another of its swept values)",
        f"{knob} is swept without a baseline, so no variant would be compared with another",
    )


def first_listed_baselines(plan: Plan, declared: dict[str, Any]) -> list[str]:
    """One note per implementation key whose baseline the plan took from the command
    line's order (FIRST_LISTED_TREATMENTS), for the sweep to print once."""
    return [
        f"{key}={value_text(value)} is the baseline (the first value listed; "
        f"+schedule.treatments={{{key}:VALUE}} picks another)"
        for key, value in plan.treatments.items()
        if key in FIRST_LISTED_TREATMENTS and key not in declared
    ]


def build_plan(jobs: list[Job], declared: dict[str, Any], sentinel: bool) -> Plan:
    """Group jobs into cells, find each cell's baseline, add the A/A sentinel."""
    swept = swept_keys(jobs)
    unknown = [k for k in declared if k not in swept]
    if unknown:
        raise ConfigError(
            "schedule.treatments",
            {k: declared[k] for k in unknown},
            f"keys swept in this sweep ({', '.join(swept) or 'none'})",
            "not swept",
        )
    declared = {
        k: BUILTIN_TREATMENTS[k] if k in BUILTIN_TREATMENTS else v for k, v in declared.items()
    }
    first_listed = {k: jobs[0].values.get(k) for k in FIRST_LISTED_TREATMENTS if k in swept}
    known = {**BUILTIN_TREATMENTS, **first_listed, **declared}
    treatments = {k: known[k] for k in swept if k in known}
    cell_keys = [k for k in swept if k not in treatments]
    baselines: dict[str, Job] = {}
    for job in jobs:
        if all(job.values.get(k) == v for k, v in treatments.items()):
            baselines.setdefault(repr([job.values.get(k) for k in cell_keys]), job)
    variants = []
    for job in jobs:
        cell_id = repr([job.values.get(k) for k in cell_keys])
        base = baselines.get(cell_id)
        if base is None and treatments:
            missing = assignments(treatments)
            where = assignments(job.values, cell_keys) or "the sweep"
            raise PerflabError(
                f"no baseline for {where}: the sweep has no variant with {missing} there; "
                f"add the baseline values to the sweep (e.g. {next(iter(treatments))}="
                f"{value_text(next(iter(treatments.values())))},...)"
            )
        variants.append(
            Variant(
                name=str(job.num),
                label=_label(job.values, swept),
                dir=str(job.num),
                overrides=list(job.overrides),
                cell={k: job.values.get(k) for k in cell_keys},
                treatment={k: job.values.get(k) for k in treatments},
                baseline=None if base is None or base is job else str(base.num),
            )
        )
    _refuse_knobs_without_baseline(variants, cell_keys, jobs)
    if sentinel:
        first = next(v for v in variants if v.baseline is None)
        variants.append(
            Variant(
                name=SENTINEL,
                label=f"{first.label} (A/A copy)",
                dir=SENTINEL,
                overrides=list(first.overrides),
                cell=dict(first.cell),
                treatment=dict(first.treatment),
                baseline=first.name,
            )
        )
    return Plan(variants, swept, treatments)
