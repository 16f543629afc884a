"""Where a profiling trial's seconds go, and what reading the operator table from the
trace saves against torch's key_averages().

    python benchmarks/profile_cost.py                      # the convnet at batch 32 and 64
    python benchmarks/profile_cost.py --batch 64 --repeat 3

Each repeat runs one profiling trial of the built-in convnet (the README's main
command's workload, device=cpu, no AMP) exactly as perflab runs it after the timed rounds,
in this process, timing its parts; then times key_averages() on a fresh profile of the
same steps, which is what the operator table cost before perflab read it from the
trace. Results: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from perflab.config.compose import register_configs
from perflab.config.schema import PerflabConfig

PARTS = {
    "perflab.measure.profiling_pass": ("prepare", "first_call"),
    "perflab.profile.capture": ("profile_steps", "export_trace", "write_trace"),
    # the trace's events parsed once, then the operator table from them
    "perflab.profile.trace_events": ("trace_events",),
    "perflab.profile.operators": ("table_of",),
}


def _config(batch: int) -> PerflabConfig:
    with initialize_config_module(config_module="perflab.conf", version_base=None):
        cfg = compose(config_name="perflab", overrides=["device=cpu", f"batch_size={batch}"])
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


def _timing(seconds: dict[str, float]) -> dict[tuple[Any, str], Any]:
    """Wrap each part so that every call adds its wall time to ``seconds``; return the
    originals, for _restore."""
    import importlib

    originals = {}
    for module_name, names in PARTS.items():
        module = importlib.import_module(module_name)
        for name in names:
            originals[(module, name)] = fn = getattr(module, name)
            setattr(module, name, _timed(fn, name, seconds))
    return originals


def _restore(originals: dict[tuple[Any, str], Any]) -> None:
    for (module, name), fn in originals.items():
        setattr(module, name, fn)


def _timed(fn: Callable[..., Any], name: str, seconds: dict[str, float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - start

    return wrapper


def _key_averages_s(cfg: PerflabConfig) -> float:
    """The old table's cost: key_averages(group_by_input_shape=True) on a profile of the
    same steps."""
    from perflab.measure.resolve import resolve
    from perflab.measure.steps import INFER_PHASES, TRAIN_PHASES, first_call, make_step
    from perflab.measure.steps import prepare as build
    from perflab.measure.timing import make_timer
    from perflab.profile.capture import profile_steps

    resolved = resolve(cfg)
    prep = build(cfg, resolved)
    step = make_step(cfg, resolved, prep)
    first_call(step, prep, make_timer(resolved.device, capacity=2))
    phases = TRAIN_PHASES if cfg.mode == "train" else INFER_PHASES
    prof, _ = profile_steps(step, prep.workload.batches, phases, "cpu", cfg.profiling)
    start = time.perf_counter()
    prof.key_averages(group_by_input_shape=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    register_configs()
    from perflab.measure import profiling_pass
    from perflab.process.trial_request import TrialRequest

    for batch in args.batch:
        cfg = _config(batch)
        totals, olds = [], []
        parts: dict[str, list[float]] = defaultdict(list)
        for _ in range(args.repeat):
            seconds: dict[str, float] = defaultdict(float)
            originals = _timing(seconds)
            with tempfile.TemporaryDirectory() as tmp:
                request = TrialRequest(cfg, {}, str(Path(tmp) / "profile.json"))
                start = time.perf_counter()
                profiling_pass._profile(request)
                totals.append(time.perf_counter() - start)
            _restore(originals)
            for name, s in seconds.items():
                parts[name].append(s)
            olds.append(_key_averages_s(cfg))
        shown = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in parts.items())
        print(
            f"convnet batch {batch}: profiling trial {statistics.median(totals):.2f} s "
            f"(median of {args.repeat}; {shown}); key_averages on the same steps "
            f"{statistics.median(olds):.2f} s"
        )


if __name__ == "__main__":
    main()
