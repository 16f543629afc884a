"""perflab's files on disk: the sweep directory's names, trial records, summary.json,
and the writing and reading every one of them shares (atomic, bounded, typed)."""

# The public face: every on-disk format and the reading and writing they share.
# tests/test_layout.py checks that no other package imports a module not listed.
__all__ = [
    "atomic",
    "dataclass_json",
    "groups",
    "json_file",
    "profile_json",
    "records",
    "summary",
    "sweepdir",
    "trial_parts",
]
