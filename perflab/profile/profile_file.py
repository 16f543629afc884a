"""profile.json, the record of a profiled pass: its schema version and its tolerant
loading (an unreadable or foreign file reads as no profile, never a crash)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perflab.json_file import read_json

PROFILE_SCHEMA_VERSION = 1
TOP_OPS = 15


def load_profile(path: Path) -> dict[str, Any] | None:
    try:
        data = read_json(path)  # not JSON, or nested deeper than any profile: ValueError
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema_version") != PROFILE_SCHEMA_VERSION:
        return None
    return data
