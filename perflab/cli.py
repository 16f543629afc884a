"""The ``perflab`` command: a thin Hydra app around one isolated trial.

User errors (bad overrides, impossible settings) print one line and exit 2; a trial that
fails prints its record's path and exits 1; bugs keep their full traceback.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from perflab import exits
from perflab.config import compose, devices
from perflab.config.compose import check_overrides, one_line, register_configs, to_config
from perflab.config.schema import PerflabConfig
from perflab.errors import OutputLost, PerflabError, printable
from perflab.experiment.invocation import read_invocation
from perflab.formats.records import check_writable, load_record
from perflab.formats.sweepdir import single_run_record
from perflab.process import cuda_probe
from perflab.process.console_streams import guard_console
from perflab.process.isolation import hf_preload, start_fork_server

register_configs()


def run_single(
    cfg: PerflabConfig, config_dict: dict[str, Any], job_dir: Path, choices: dict[str, str]
) -> Path:
    """Check the settings as a sweep checks each variant's, then run one trial in a fresh
    process; return its record path or raise.

    The check (a process of its own: resolve on this machine, import and bind the model
    and dataset factories) raises PerflabError for bad input, nothing measured and no
    record written: a missing data.dataset module, or one that ends the process while it
    is imported, is exit 2 naming the field, as in a sweep, not a failed trial (exit 1)."""
    from perflab.experiment.schedule import VariantRun, check_all
    from perflab.process.trial_request import TrialRequest, run_in_process

    record_path = single_run_record(job_dir)
    request = TrialRequest(cfg, config_dict, str(record_path), read_invocation(), choices=choices)
    # its warnings are the trial's own too: the trial records and prints them
    check_all({"run": VariantRun(request, job_dir, config="run")})
    return run_in_process(request)


def _display_path(path: Path) -> Path:
    """Relative to the working directory when inside it: shorter, and what users type."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


@hydra.main(version_base=None, config_path=compose.CONFIG_PATH, config_name="perflab")
def _app(cfg: DictConfig) -> None:
    try:
        with exits.sigterm_interrupts():  # SIGTERM ends the run the way Ctrl-C does
            _run_app(cfg)
    except PerflabError as exc:
        exits.report(exits.EXIT_USAGE, f"error: {exc}")


def _run_app(cfg: DictConfig) -> None:
    from perflab.report.console import trial_summary

    config = to_config(cfg)
    runtime = HydraConfig.get().runtime
    choices = {k: str(v) for k, v in runtime.choices.items() if not k.startswith("hydra")}
    config_dict: Any = OmegaConf.to_container(cfg, resolve=True)
    check_writable(Path(runtime.output_dir), "hydra.run.dir")  # full or read-only: exit 2
    record_path = run_single(config, config_dict, Path(runtime.output_dir), choices)
    record = load_record(record_path)
    print(trial_summary(record, _display_path(record_path)))
    if record.status != "ok":
        exits.report(exits.EXIT_FAILED, f"trial {record.status}; see {record_path}")


# errno values meaning "results cannot be written there": the user's output location
UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR)


# Hydra's flags that print something and run no trial (`perflab --help`, `--cfg job`)
INFO_FLAGS = frozenset(
    ["--help", "-h", "--hydra-help", "--version", "--cfg", "-c", "--info", "-i"]
    + ["--shell-completion", "-sc"]
)


def main() -> None:
    # Hydra prints its own multi-line report and exits 1 on any exception unless
    # HYDRA_FULL_ERROR is set; with it set, exceptions reach us and we choose the exit
    # code: 2 and one line for user errors, a full traceback for bugs.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    guard_console()  # `perflab ... | head`, a dropped SSH session: measuring goes on
    try:
        check_overrides(sys.argv[1:])
        flags = {arg.split("=", 1)[0] for arg in sys.argv[1:]}  # --cfg=job as --cfg job
        if not INFO_FLAGS.intersection(flags):  # these run no trial
            start_fork_server(hf_preload(sys.argv[1:]))
        devices.ask_cuda_with(cuda_probe.cuda_available)  # device=auto: this machine's answer
        _app()
    except OutputLost as exc:  # a single run's record could not be written
        print(f"perflab: stopped: {printable(str(exc))}", file=sys.stderr)
        sys.exit(exits.EXIT_OUTPUT_LOST)
    except KeyboardInterrupt:
        # A sweep writes its partial summary before letting the interrupt through.
        print("perflab: interrupted; finished trials and their records are kept", file=sys.stderr)
        sys.exit(exits.EXIT_INTERRUPTED)
    except (PerflabError, HydraException, OmegaConfBaseException) as exc:
        message = str(exc) if isinstance(exc, PerflabError) else one_line(exc)
        print(f"perflab: error: {printable(message)}", file=sys.stderr)
        sys.exit(exits.EXIT_USAGE)
    except OSError as exc:
        if exc.errno not in UNWRITABLE:
            raise
        # Hydra creates the output directory before perflab's own check can run
        print(
            f"perflab: error: cannot write the results: {exc}; choose a writable "
            "hydra.run.dir (single run) or hydra.sweep.dir (sweep) on a disk with space",
            file=sys.stderr,
        )
        sys.exit(exits.EXIT_USAGE)
    worst = exits.worst()
    if worst is not None:
        code, message = worst
        print(f"perflab: {printable(message)}", file=sys.stderr)
        sys.exit(code)


if __name__ == "__main__":
    main()
