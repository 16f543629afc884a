"""The ``perflab`` command: a thin Hydra app around one isolated trial.

User errors (bad overrides, impossible settings) print one line and exit 2; a trial that
fails prints its record's path and exits 1; bugs keep their full traceback.
"""

from __future__ import annotations

import os
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from perflab import environment
from perflab.config import PerflabConfig, register_configs
from perflab.errors import PerflabError
from perflab.records import ErrorInfo, TrialRecord, load_record, write_record

register_configs()

EXIT_TRIAL_FAILED = 1
EXIT_USAGE = 2


# Set by the task function when its trial did not end "ok"; main() turns it into the exit
# code. Raising instead would make Hydra log a second, multi-line error report.
_failed: list[str] = []


def to_config(cfg: DictConfig) -> PerflabConfig:
    """Turn the composed Hydra config into the validated, typed config (once)."""
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


def _failed_record(request: Any, status: str, message: str) -> TrialRecord:
    now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    return TrialRecord(
        status=status, config=request.config_dict, settings={}, started_at=now,
        finished_at=now, error=ErrorInfo(status, message, ""),
        environment=dict(request.invocation),
    )


def run_single(cfg: PerflabConfig, config_dict: dict[str, Any], job_dir: Path) -> Path:
    """Run one trial in a fresh process; return its record path or raise."""
    from perflab.isolation import run_isolated
    from perflab.trial import TrialRequest, run_trial

    record_path = job_dir / "trials" / "000.json"
    request = TrialRequest(cfg, config_dict, str(record_path), environment.invocation())
    outcome = run_isolated(run_trial, request, cfg.trial.timeout_s)
    if outcome.kind == "config_error":
        raise PerflabError(outcome.message)
    if outcome.kind != "ok":
        # The child died or hung before writing its record: the parent writes it, so a
        # failure is never a lost result.
        status = "timeout" if outcome.kind == "timeout" else "failed"
        write_record(record_path, _failed_record(request, status, outcome.message))
    return record_path


@hydra.main(version_base=None, config_path="pkg://perflab.conf", config_name="perflab")
def _app(cfg: DictConfig) -> None:
    from perflab.console import trial_summary

    config = to_config(cfg)
    job_dir = Path(HydraConfig.get().runtime.output_dir)
    record_path = run_single(config, OmegaConf.to_container(cfg, resolve=True), job_dir)  # type: ignore[arg-type]
    record = load_record(record_path)
    print(trial_summary(record, record_path))
    if record.status != "ok":
        _failed.append(f"trial {record.status}; see {record_path}")


def one_line(exc: BaseException) -> str:
    """Hydra and OmegaConf errors span several lines; say the same on one."""
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and exc.options:
        options = ", ".join(o for o in exc.options if not o.endswith("_schema"))
        group, _, name = exc.missing_cfg_file.rpartition("/")
        return f"{group}={name}: no such option; allowed: {options}"
    cause = exc.__cause__
    match = re.search(r"override (\S+)", str(exc))
    if match and isinstance(cause, OmegaConfBaseException):
        return f"{match.group(1)}: {_first_lines(str(cause))}"
    return _first_lines(str(exc))


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
    except (PerflabError, HydraException, OmegaConfBaseException) as exc:
        message = str(exc) if isinstance(exc, PerflabError) else one_line(exc)
        print(f"perflab: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    if _failed:
        print(f"perflab: {'; '.join(_failed)}", file=sys.stderr)
        sys.exit(EXIT_TRIAL_FAILED)


if __name__ == "__main__":
    main()
