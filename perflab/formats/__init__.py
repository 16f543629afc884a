"""perflab's files on disk: the sweep directory's names, trial records, summary.json,
and the writing and reading every one of them shares (atomic, bounded, typed)."""
