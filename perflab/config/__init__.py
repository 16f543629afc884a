"""What an experiment is: the typed config, its vocabulary and rules, the Hydra glue that
composes it, and the plan (variants, cells, baselines) a sweep's jobs make of it."""
