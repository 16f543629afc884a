"""What a sweep asks a trial process before measuring anything: do this variant's
settings resolve on this machine, and do its factories import and build? An impossible
setting or a broken factory is a ConfigError (exit 2, nothing measured); unwise settings
come back as warnings."""

from __future__ import annotations

import sys

from perflab.config.schema import PerflabConfig
from perflab.errors import ConfigError
from perflab.measure.resolve import resolve
from perflab.trial_request import TrialRequest
from perflab.workloads import check_factories, locate


def user_code_importable(request: TrialRequest) -> None:
    cwd = request.invocation.get("cwd")
    if cwd and cwd not in sys.path:
        sys.path.insert(0, cwd)  # the user's own factories live beside their command


def check_settings(request: TrialRequest) -> list[str]:
    """Resolve the config on this machine without running anything: raises ConfigError
    for impossible settings (sizes that cannot fit among them) or factories that cannot
    be imported or built with their arguments, returns the warnings for unwise ones."""
    user_code_importable(request)
    warnings = resolve(request.config).warnings
    for field_name, target in factory_fields(request.config).items():
        _import_factory(field_name, target)
    check_factories(request.config)
    return warnings


def factory_fields(cfg: PerflabConfig) -> dict[str, str]:
    """The factories a config names, by field: the model's, and the dataset's if set."""
    named = {"model._target_": cfg.model._target_, "data.dataset": cfg.data.dataset}
    return {name: target for name, target in named.items() if target}


# what a factory whose module ends the process on import is told to be instead
IMPORTS_CLEANLY = "a factory whose module imports without ending the process"


def _import_factory(field_name: str, target: str) -> None:
    """Import a factory's module. sys.exit() there raises SystemExit, which no handler
    below the process's own expects: it would end the check with a traceback."""
    try:
        locate(target)
    except SystemExit as exc:
        raise ConfigError(
            field_name, target, IMPORTS_CLEANLY, f"{exit_status(exc)} while importing it"
        ) from None
    except Exception:  # noqa: BLE001 - check_factories names the problem, as it always has
        return


def exit_status(exc: SystemExit) -> str:
    """As perflab.isolation.describe_exit says it of a process: sys.exit() and
    sys.exit(None) exit 0, sys.exit("text") prints the text and exits 1."""
    if exc.code is None or isinstance(exc.code, int):
        return f"exited with code {exc.code or 0}"
    return f"exited with code 1 ({exc.code})"


def import_factory(job: tuple[TrialRequest, str]) -> None:
    """Import one factory of a request, alone in its process: perflab.experiment.schedule.check_all
    runs it for each factory after a check process died (os._exit, a signal), to name the
    factory whose import ends the process."""
    request, field_name = job
    user_code_importable(request)
    locate(factory_fields(request.config)[field_name])
