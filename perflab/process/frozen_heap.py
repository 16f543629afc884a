"""The fork server's last preload: freeze the objects its imports left alive.

The fork server imports torch, torch._dynamo, Hydra and perflab before it forks a trial
(perflab/process/isolation.py, PRELOAD), and every child inherits those objects as its own:
about 316,000 of them, which Python's cycle collector walks on every full collection.
A trial runs one before it measures (perflab/measure/trial.py), so that no earlier
garbage is collected inside the timed block. Walking them took 0.2 s of every trial on
a 2-core CPU (benchmarks/RESULTS.md, "A fresh trial process"): outside the timed block,
but inside every round. `gc.freeze` moves them to a generation the collector never
visits. They are modules, classes and functions that live as long as the process
anyway, and a full collection that falls inside a timed step skips them as well.
"""

from __future__ import annotations

import gc

# garbage left by the imports is freed first: frozen, it would stay for good
gc.collect()
gc.freeze()
