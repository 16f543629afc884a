"""The reference docs name every config field and every record field."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from perflab.config.schema import (
    DataConfig,
    InputSpec,
    PerflabConfig,
    ProfilingConfig,
    ReportConfig,
    ScaleOutConfig,
    ScheduleConfig,
    SlurmConfig,
    TargetSpec,
    TrialConfig,
)
from perflab.formats.records import ErrorInfo, Probe, Samples, TrialRecord

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize(
    ("prefix", "schema"),
    [
        ("", PerflabConfig),
        ("data.", DataConfig),
        ("trial.", TrialConfig),
        ("model.input.", InputSpec),
        ("model.target.", TargetSpec),
        ("schedule.", ScheduleConfig),
        ("report.", ReportConfig),
        ("profiling.", ProfilingConfig),
        ("scaleout.", ScaleOutConfig),
        ("scaleout.slurm.", SlurmConfig),
    ],
)
def test_configuration_reference_names_every_field(prefix, schema):
    text = (DOCS / "configuration.md").read_text()
    missing = [
        f"{prefix}{f.name}"
        for f in fields(schema)
        if f"`{prefix}{f.name}`" not in text
        and f.name not in ("model", "data", "trial", "schedule", "report", "profiling")
    ]
    assert not missing


@pytest.mark.parametrize("schema", [TrialRecord, Samples, Probe, ErrorInfo])
def test_record_reference_names_every_field(schema):
    text = (DOCS / "records.md").read_text()
    assert not [f.name for f in fields(schema) if f"`{f.name}`" not in text]
