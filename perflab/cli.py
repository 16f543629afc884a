"""The ``perflab`` command: a thin Hydra app around one isolated trial.

User errors (bad overrides, impossible settings) print one line and exit 2; a trial that
fails prints its record's path and exits 1; bugs keep their full traceback.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from perflab import environment, outcome
from perflab.config import PerflabConfig, register_configs
from perflab.errors import ConfigError, PerflabError
from perflab.records import load_record

register_configs()


def to_config(cfg: DictConfig) -> PerflabConfig:
    """Turn the composed Hydra config into the validated, typed config (once)."""
    try:
        return OmegaConf.to_object(cfg)  # type: ignore[return-value]
    except MissingMandatoryValue as exc:
        key = str(exc.full_key)
        allowed = (
            "a dotted path to your factory, e.g. model._target_=mypkg.build_model"
            if key.endswith("_target_")
            else "a value; this field has no default"
        )
        raise ConfigError(key, "???", allowed, "required") from exc


def run_single(
    cfg: PerflabConfig, config_dict: dict[str, Any], job_dir: Path, choices: dict[str, str]
) -> Path:
    """Run one trial in a fresh process; return its record path or raise."""
    from perflab.trial import TrialRequest, run_in_fresh_process

    record_path = job_dir / "trials" / "000.json"
    request = TrialRequest(
        cfg, config_dict, str(record_path), environment.invocation(), choices=choices
    )
    return run_in_fresh_process(request)


def _display_path(path: Path) -> Path:
    """Relative to the working directory when inside it: shorter, and what users type."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


@hydra.main(version_base=None, config_path="pkg://perflab.conf", config_name="perflab")
def _app(cfg: DictConfig) -> None:
    try:
        _run_app(cfg)
    except PerflabError as exc:
        outcome.report(outcome.EXIT_USAGE, f"error: {exc}")


def _run_app(cfg: DictConfig) -> None:
    from perflab.console import trial_summary

    config = to_config(cfg)
    runtime = HydraConfig.get().runtime
    choices = {k: str(v) for k, v in runtime.choices.items() if not k.startswith("hydra")}
    config_dict: Any = OmegaConf.to_container(cfg, resolve=True)
    record_path = run_single(config, config_dict, Path(runtime.output_dir), choices)
    record = load_record(record_path)
    print(trial_summary(record, _display_path(record_path)))
    if record.status != "ok":
        outcome.report(outcome.EXIT_FAILED, f"trial {record.status}; see {record_path}")


def one_line(exc: BaseException) -> str:
    """Hydra and OmegaConf errors span several lines; say the same on one."""
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and exc.options:
        options = ", ".join(o for o in exc.options if not o.endswith("_schema"))
        group, _, name = exc.missing_cfg_file.rpartition("/")
        return f"{group}={name}: no such option; allowed: {options}"
    text, cause = str(exc), exc.__cause__
    unknown = re.search(
        r"Could not override '(\S+)'\.\s+To append to your config use \+(\S+)", text
    )
    if unknown:
        key, override = unknown.groups()
        return (
            f"{key}: no such config field; allowed: the fields `perflab --cfg job` lists; "
            f"new keys inside a free-form dict are added with +{override}"
        )
    merging = re.search(r"override (\S+=\S*)", text)
    if merging and isinstance(cause, OmegaConfBaseException):
        return f"{merging.group(1)}: {_first_lines(str(cause))}"
    return _first_lines(text)


def _first_lines(text: str) -> str:
    keep = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith(("full_key:", "object_type="))
    ]
    return " ".join(keep)


def main() -> None:
    # Hydra prints its own multi-line report and exits 1 on any exception unless
    # HYDRA_FULL_ERROR is set; with it set, exceptions reach us and we choose the exit
    # code: 2 and one line for user errors, a full traceback for bugs.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        _app()
    except BrokenPipeError:  # output piped into head and friends
        sys.exit(0)
    except KeyboardInterrupt:
        # A sweep writes its partial summary before letting the interrupt through.
        print("perflab: interrupted; finished trials and their records are kept", file=sys.stderr)
        sys.exit(outcome.EXIT_INTERRUPTED)
    except (PerflabError, HydraException, OmegaConfBaseException) as exc:
        message = str(exc) if isinstance(exc, PerflabError) else one_line(exc)
        print(f"perflab: error: {message}", file=sys.stderr)
        sys.exit(outcome.EXIT_USAGE)
    worst = outcome.worst()
    if worst is not None:
        code, message = worst
        print(f"perflab: {message}", file=sys.stderr)
        sys.exit(code)


if __name__ == "__main__":
    main()
