"""What `SandboxPlugin` does once, when the host starts it: build the policy, refuse what this
machine cannot enforce, and prepare Landlock (`check_enforceable`); the last two wait for the
first command when Landlock cannot be the backend (`StartCheck`)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import threading
import time
import types
import weakref
from pathlib import Path

import trio

from dsh_host import ConfigError, Host
from dsh_plugins_builtin._sandbox._config import SandboxConfig, build_policy
from dsh_plugins_builtin._sandbox._deny import config_files, dsh_state
from dsh_plugins_builtin._sandbox._errors import SandboxUnavailable, SandboxUnavailableError
from dsh_plugins_builtin._sandbox._fence import (
    RootReplaced,
    SandboxPolicy,
    check_pinned,
    import_paths,
    install_paths,
)
from dsh_plugins_builtin._sandbox._locks import FileLock, lock_key, release
from dsh_plugins_builtin._sandbox._locks import sweep as sweep_locks

__all__ = [
    "StartCheck",
    "StartPolicy",
    "check_enforceable",
    "plugin_modules",
    "start_policy",
    "sweep_stale_tmp",
]

_TMP_PREFIX = "dsh-ptmp-"
"""Private tmps made since hosts lock them in the lock directory: the sweep takes no other name
(an older host's ``dsh-tmp-*``, unlocked while it lives, or ``dsh-tmpl-*``, locked on the
directory itself, which its commands could reach, is never swept)."""


def plugin_modules(host: Host) -> list[str]:
    """The modules the host's plugins come from (their code runs at the next start too)."""
    names = []
    for plugin in host.pm.get_plugins():
        name = plugin.__name__ if isinstance(plugin, types.ModuleType) else type(plugin).__module__
        if isinstance(name, str):
            names.append(name)
    return names


def start_policy(
    owner: object, host: Host, config: SandboxConfig, install: tuple[Path, ...], name: str
) -> SandboxPolicy:
    """The policy of *config* for *host*; the private tmp is made here and removed with *owner*.

    Raises:
        ConfigError: A ``deny_read`` entry is not usable.
    """
    tmp = None
    if config.private_tmp and config.mode != "danger-full-access":
        tmp = _make_private_tmp(owner)
    roots = [Path(host.workspace, os.path.expanduser(r)) for r in config.writable_roots or ()]
    files = config_files(Path(host.workspace), roots, host.config.tables, os.environ)
    files += tuple(host.config_files)  # what any plugin's config names (`dsh_config_files`)
    hidden = dsh_state(Path(host.workspace), host.config.tables)
    try:
        return build_policy(
            config, host.workspace, host.config.source, install, tmp=tmp, files=files,
            hidden=hidden, imports=import_paths(),
        )  # fmt: skip
    except ValueError as exc:
        raise ConfigError(str(exc), path=host.config.source, plugin=name, key="deny_read") from None


class StartPolicy:
    """A sandbox plugin's configuration, install paths and policy for one host start: built
    the first time they are asked for, then the same objects for the rest of that start.
    Another host (another start, another configuration) builds its own; a build that raised
    keeps nothing (asked again, it is built again and raises again)."""

    def __init__(self, owner: object, name: str) -> None:
        self._owner, self._name = owner, name
        self._built: tuple[Host, SandboxConfig, tuple[Path, ...], SandboxPolicy] | None = None

    def __call__(self, host: Host) -> SandboxPolicy:
        """The policy for *host* (`built`)."""
        return self.built(host)[2]

    def built(self, host: Host) -> tuple[SandboxConfig, tuple[Path, ...], SandboxPolicy]:
        """``(config, install paths, policy)`` for *host*.

        Raises:
            ConfigError: A ``deny_read`` entry is not usable.
        """
        if self._built is None or self._built[0] is not host:
            config = host.config_for(self._owner)
            config = config if isinstance(config, SandboxConfig) else SandboxConfig()
            install = install_paths(plugin_modules(host))
            policy = start_policy(self._owner, host, config, install, self._name)
            self._built = (host, config, install, policy)
        return self._built[1:]


def sweep_stale_tmp(base: Path, *, min_age: float = 60.0) -> list[Path]:
    """Remove the private tmp directories in *base* that hosts killed outright (SIGKILL: no
    finalizer ran) left behind; the ones removed.

    A host holds a shared lock for its private tmp for as long as it lives (`_make_private_tmp`),
    across PID namespaces too: a file in the lock directory, which no command sees
    (`dsh_plugins_builtin._sandbox._locks`), never the directory its commands see as ``/tmp``.
    Lock files no one holds any more are removed too. Only a directory (never a symlink) named
    ``dsh-ptmp-*``, owned by this user, older than *min_age* seconds (a host locks its own the
    moment it makes it) and that nobody holds a lock on, is removed; anything else is left
    alone."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not entry.name.startswith(_TMP_PREFIX):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if (
            not stat.S_ISDIR(info.st_mode)
            or info.st_uid != os.geteuid()
            or now - info.st_mtime < min_age
        ):
            continue
        if _remove_if_unlocked(base, entry.name, info):
            removed.append(Path(entry.path))
    sweep_locks()
    return removed


def _remove_if_unlocked(base: Path, name: str, seen: os.stat_result) -> bool:
    """Remove *base*/*name* if it is still the directory *seen* and nobody holds its lock."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        base_fd = os.open(base, flags)
    except OSError:
        return False
    try:
        fd = os.open(name, flags, dir_fd=base_fd)
    except OSError:
        os.close(base_fd)
        return False
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino, now.st_uid) != (seen.st_dev, seen.st_ino, seen.st_uid):
            return False  # swapped since it was looked at
        lock = lock_key("tmp", now.st_dev, now.st_ino, fcntl.LOCK_EX | fcntl.LOCK_NB)
        shutil.rmtree(name, dir_fd=base_fd, ignore_errors=True)  # fd-based: follows no symlink
        release(lock)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        os.close(base_fd)


def _make_private_tmp(owner: object) -> Path:
    """A fresh private tmp (0700), locked (shared) for *owner*'s life, removed with it."""
    base = Path(tempfile.gettempdir())  # swept before the first command (`StartCheck.run`)
    tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=base))
    info = os.stat(tmp, follow_symlinks=False)
    lock = lock_key("tmp", info.st_dev, info.st_ino, fcntl.LOCK_SH)
    weakref.finalize(owner, _remove_private_tmp, tmp, lock)
    return tmp


def _remove_private_tmp(tmp: Path, lock: FileLock) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    release(lock)


def check_enforceable(
    host: Host,
    name: str,
    config: SandboxConfig,
    policy: SandboxPolicy,
    bwrap: tuple[str | None, str],
    *,
    deferred: bool = False,
) -> None:
    """Refuse a configuration this machine cannot enforce (never run weaker); build the
    Landlock ruleset now when Landlock is the backend. *deferred*: run before the first
    command rather than at start (`StartCheck`); the roots must then still be the ones pinned
    at start right before the ruleset opens them (and `run_confined` checks them again after).

    Raises:
        ConfigError: Naming the key to change.
        RootReplaced: *deferred*, and a root was replaced since the host started.
    """
    if config.bwrap is not None and bwrap[0] is None:
        raise ConfigError(f"{bwrap[1]}", path=host.config.source, plugin=name, key="bwrap")
    if policy.mode == "danger-full-access" or config.backend == "none":
        return
    from dsh_plugins_builtin._sandbox._backends import (
        prepare_landlock,
        select_backend,
        startup_problem,
    )

    probes = probe_backends(bwrap)
    problem = startup_problem(policy, config.backend, probes)
    if problem is not None:
        key, message = problem
        raise ConfigError(message, path=host.config.source, plugin=name, key=key)
    with contextlib.suppress(SandboxUnavailable):  # else every command fails closed
        if select_backend(policy, config.backend, probes) == "landlock":
            if deferred:
                check_pinned(policy)
            prepare_landlock(policy)  # the ruleset is built once, here


def probe_backends(bwrap: tuple[str | None, str]) -> dict[str, str | None]:
    """`~dsh_plugins_builtin._sandbox._backends.probe_backends`, imported when first asked: the
    backends (Landlock, the fork server, the probes) load with the first command, not at start."""
    from dsh_plugins_builtin._sandbox._backends import probe_backends as probe

    return probe(bwrap)


def landlock_possible(config: SandboxConfig, bwrap: tuple[str | None, str]) -> bool:
    """Whether Landlock may confine the commands (then `check_enforceable` runs at start, so
    its ruleset holds the roots as they were then): ``backend = "landlock"``, or ``auto``
    without a bwrap binary. With a bwrap binary ``auto`` chooses Landlock only if bwrap fails
    its probe."""
    return config.backend == "landlock" or (config.backend == "auto" and bwrap[0] is None)


class StartCheck:
    """`check_enforceable`, once: at start when Landlock may be the backend, else before the
    first command (a call that runs no command, e.g. ``read_file``, never probes the machine:
    the probe runs ``true`` three times). Until it passed, no command runs: a failure is raised
    to every command (the probe is cached, so each asks again at no cost). The private tmps
    that killed hosts left are swept first, once (`sweep_stale_tmp`): a start that runs no
    command (``dsh hook``, a read) scans no ``/tmp``."""

    def __init__(
        self,
        host: Host,
        name: str,
        config: SandboxConfig,
        policy: SandboxPolicy,
        bwrap: tuple[str | None, str],
    ) -> None:
        self._args = (host, name, config, policy, bwrap)
        self._lock = threading.Lock()
        self.done = False
        """It passed: commands run with no further check."""
        self._swept = False
        if (config.bwrap is not None and bwrap[0] is None) or landlock_possible(config, bwrap):
            self.run(deferred=False)

    def run(self, *, deferred: bool = True) -> None:
        """Check now unless done (blocking: the probe runs processes; thread-safe).

        Raises:
            ConfigError: The configuration cannot be enforced here (key named).
            RootReplaced: *deferred*, and a root was replaced since the host started.
        """
        with self._lock:
            if not self.done:
                policy = self._args[3]
                if not self._swept and policy.tmp is not None:  # what killed hosts left
                    self._swept = True
                    sweep_stale_tmp(policy.tmp.parent)
                check_enforceable(*self._args, deferred=deferred)
                self.done = True

    async def before_command(self, by: str) -> None:
        """`run` before a command, in a thread (the probe runs processes) unless done; a
        refusal is the command's ``SANDBOX_UNAVAILABLE`` (decided *by*), and nothing runs.

        Raises:
            SandboxUnavailableError: The configuration cannot be enforced here, or a root was
                replaced since the host started.
        """
        if self.done:
            return
        try:
            await trio.to_thread.run_sync(self.run)
        except ConfigError as exc:
            message = f"this machine cannot enforce the configuration: {exc}"
            raise SandboxUnavailableError(message, by=by) from None
        except RootReplaced as exc:
            raise SandboxUnavailableError(str(exc), by=by) from None
