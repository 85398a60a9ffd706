"""Planning the hooks when the host starts: how each runs, in which environment, by which runner.

`plan_hooks` resolves the shell, the Python interpreter and every hook's executable and scripts
against the sandbox's writable roots (see `._launch`), refusing with a `ConfigError` one a tool
could rewrite, and starts the shared runner (see `._process`); `warn_exposed_settings` warns of
a settings file that lies where a tool could rewrite it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import final

import attrs

from dsh_host import ConfigError, Host
from dsh_plugins_builtin._sandbox._fence import SandboxPolicy

from ._environment import unconfined_environment
from ._launch import HookRefused, exposure_of, plan_launch, sandbox_policy
from ._process import HookRunner, shared_runner
from ._settings import NAME, HookCommand

__all__ = ["Planned", "plan_hooks", "warn_exposed_settings"]

log = logging.getLogger("dsh_plugins_builtin.hook_commands")


@final
@attrs.frozen
class Planned:
    """The hooks with their launches, and what runs them."""

    hooks: list[HookCommand]
    policy: SandboxPolicy | None
    env: dict[str, str]
    interpreter: str
    runner: HookRunner


def plan_hooks(
    host: Host, hooks: Sequence[HookCommand], workspace: Path, interpreter: str
) -> Planned:
    """Plan every hook's launch; raise `ConfigError` for one that cannot run safely."""
    policy = sandbox_policy(host)
    exposure = exposure_of(policy)
    root = str(workspace)
    unconfined = unconfined_environment(
        {**os.environ, "DSH_PROJECT_DIR": root, "CLAUDE_PROJECT_DIR": root}, exposure
    )
    env = unconfined.env
    try:
        shell = plan_launch("/bin/sh", cwd=root, env=env, exposure=exposure, shell="")
        runner = plan_launch(interpreter, cwd=root, env=env, exposure=exposure, shell="")
    except HookRefused as exc:
        raise ConfigError(
            f"cannot run hooks safely: the shell or the Python interpreter that runs them "
            f"is exposed: {exc}",
            path=host.config.source, plugin=NAME, key="settings",
        ) from None  # fmt: skip
    interpreter = runner.argv[0]
    planned = []
    for hook in hooks:
        try:
            launch = plan_launch(
                hook.command, cwd=root, env=env, exposure=exposure, shell=shell.argv[0]
            )
        except HookRefused as exc:
            raise ConfigError(
                f"settings file {hook.source!r}: {hook.event} hook {hook.command!r} "
                f"({hook.where}) is refused: {exc}",
                path=host.config.source, plugin=NAME, key="settings",
            ) from None  # fmt: skip
        planned.append(attrs.evolve(hook, launch=launch))
    if hooks:
        unconfined.warn(log, "hooks")
    try:
        shared = shared_runner(interpreter)
    except OSError as exc:
        raise ConfigError(
            f"cannot start the process that runs hooks ({interpreter}): {exc}",
            path=host.config.source, plugin=NAME, key="settings",
        ) from None  # fmt: skip
    return Planned(planned, policy, env, interpreter, shared)


def warn_exposed_settings(
    policy: SandboxPolicy | None, settings: Sequence[str], workspace: Path
) -> None:
    """Warn of each settings file a tool could rewrite (it lies in a writable root)."""
    exposure = exposure_of(policy)
    for source in settings:
        path = os.path.realpath(workspace / source)
        if exposure.exposed(path):
            log.warning(
                "settings file %r lies in a writable root of the sandbox (%s) and is not "
                "protected: a tool could rewrite it and change the hooks of the next run; "
                "keep it under .claude/ or outside the writable roots",
                source, path,
            )  # fmt: skip
