"""The paths kept read-only inside the writable roots, and dsh's own installation."""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

from dsh_plugins_builtin._sandbox._paths import abs_paths, outermost, resolve_abs, within
from dsh_plugins_builtin._sandbox._policy import SandboxPolicy, writable_roots

__all__ = [
    "config_warning",
    "danger_warning",
    "import_paths",
    "install_in_roots",
    "install_paths",
    "protected_paths",
]


def protected_paths(policy: SandboxPolicy) -> tuple[Path, ...]:
    """The absolute paths that stay read-only inside writable roots, to every tool and command.

    Relative entries of ``policy.protected`` are taken under each writable root (canonical, as
    `writable_roots` gives them); absolute entries as they are; the config file the host was
    started with and the ``install`` paths are added when they lie in a writable root. Paths
    need not exist: a protected ``.git`` that does not exist yet may not be created either.
    """
    if policy.resolved is not None:
        return policy.resolved.protected
    roots = writable_roots(policy)
    if not roots or roots == (Path("/"),):
        return ()
    out: dict[Path, None] = {}

    def in_roots(path: str) -> bool:
        return any(within(path, str(root)) for root in roots)

    def add(path: str, *, anywhere: bool = True) -> None:
        # A protected name reached through a symbolic link (``dsh.toml`` linked from dotfiles)
        # keeps the directory holding the link too: a command could point it elsewhere.
        real, *holders = _held(path)
        if anywhere or in_roots(str(real)):
            out.setdefault(real, None)
        for where in holders:
            if in_roots(str(where)):
                out.setdefault(where, None)

    tmp = None if policy.tmp is None else Path(resolve_abs(str(policy.tmp)))
    for entry in policy.protected:
        if os.path.isabs(entry):
            add(os.path.normpath(entry))
            continue
        for root in roots:
            if root != tmp:  # the private tmp dies with the host: no next run reads it
                add(os.path.join(str(root), entry))
    for path in policy.config_files:  # dsh.toml, pyproject.toml, imported settings, ...
        add(str(path), anywhere=False)
    config = _config_in_roots(policy, roots)
    if config is not None and (config.name != "pyproject.toml" or policy.config_files):
        # Without protect_config a pyproject.toml stays writable; `config_warning` says so.
        add(str(policy.config_file))
    for path in install_in_roots(policy, roots):
        out.setdefault(path, None)
    return tuple(out)


def install_in_roots(policy: SandboxPolicy, roots: tuple[Path, ...]) -> tuple[Path, ...]:
    """The canonical ``install`` paths of *policy* that lie inside one of *roots*."""
    found: dict[Path, None] = {}
    for path in policy.install:
        real = _held(str(path))[0]
        if any(within(str(real), str(root)) for root in roots):
            found.setdefault(real, None)
    return outermost(found)  # a virtual environment holds its site-packages


def install_paths(modules: Iterable[str] = ()) -> tuple[Path, ...]:
    """Where the next ``dsh`` run executes code from, whether or not it lies in a writable root.

    The virtual environment dsh runs in (``sys.prefix``: its site-packages, where a new
    ``.pth`` file or a ``dsh.plugins`` entry point would run at the next start, and its scripts,
    ``dsh`` among them), the interpreter's site-packages and the user's, the directories of
    dsh's own packages (an editable install keeps them in a source tree), and those of
    *modules* (the top-level packages or files of the plugins the host loaded); and
    ``sys.pycache_prefix`` when set (``PYTHONPYCACHEPREFIX``: the bytecode of all of these, and
    the console script's compiled attrs code, are kept there instead of beside the sources).
    """
    found: dict[Path, None] = {}
    if sys.prefix != sys.base_prefix:  # a virtual environment: all of it
        found.setdefault(Path(sys.prefix), None)
    for key in ("purelib", "platlib"):
        found.setdefault(Path(sysconfig.get_path(key)), None)
    if site.ENABLE_USER_SITE:
        found.setdefault(Path(site.getusersitepackages()), None)
    if sys.pycache_prefix:
        found.setdefault(Path(os.path.abspath(sys.pycache_prefix)), None)
    for name in ("dsh_host", "dsh_plugins_builtin", *modules):
        module = sys.modules.get(name.partition(".")[0])
        if module is None or name.startswith("__main__"):
            continue
        places = list(getattr(module, "__path__", ()))  # a package: its directories
        if not places and getattr(module, "__file__", None):
            places = [module.__file__]  # a module of its own: its file
        for place in places:
            found.setdefault(Path(os.path.abspath(place)), None)
    return abs_paths(found)


def import_paths() -> tuple[Path, ...]:
    """The entries of Python's import path (`sys.path`; ``""`` is the working directory): where
    the next ``dsh`` start looks for every module it imports.

    Any of them lets a command that can write there run code in that start, unconfined,
    whether or not dsh's own packages live there: a module planted in an entry ahead of the
    standard library shadows it, and one planted in any entry answers an import the standard
    library tries and expects to fail (``subprocess`` tries ``msvcrt`` at every start). So
    each is protected like `install_paths` when it lies in a writable root (an editable
    install's source directory, ``PYTHONPATH``, the directory of the script that started
    dsh, where ``python -m`` ran), whether it exists yet or not. An entry reached through a
    symbolic link brings the directory holding that link too: a command that could write
    there could point the link, and with it the entry, elsewhere.
    """
    found: dict[Path, None] = {}
    entries: list[object] = list(sys.path)  # a program may put anything there
    for entry in entries:
        if isinstance(entry, str):
            found.update(dict.fromkeys(_held(os.path.abspath(entry or os.curdir))))
    return tuple(found)


def _held(path: str) -> tuple[Path, ...]:
    """The absolute *path* where it really is, then the directories holding the symbolic links
    met on the way (a command that could write one could point its link elsewhere).

    Fails closed: a path that cannot be resolved (a symlink loop, a parent that cannot be
    searched) is held as spelled, with the links met before that, so that a command cannot
    replace the loop with a directory of its own for the next start to import from.
    """
    links: list[str] = []
    try:
        real = resolve_abs(path, links=links)
    except OSError:
        real = os.path.normpath(path)
    return (Path(real), *(Path(os.path.dirname(link)) for link in links))


def _config_in_roots(policy: SandboxPolicy, roots: tuple[Path, ...]) -> Path | None:
    if policy.config_file is None:
        return None
    config = Path(resolve_abs(str(policy.config_file)))
    return config if any(within(str(config), str(root)) for root in roots) else None


def config_warning(policy: SandboxPolicy) -> str | None:
    """A warning for the start of a run when a tool could rewrite the policy of the next one,
    or when a whole writable root is read-only because the next run executes code from it.

    That is the case when the config in use is ``[tool.dsh]`` in a ``pyproject.toml`` inside a
    writable root: the file is not locked (agents edit it legitimately), so a tool may change
    the ``[tool.dsh]`` table the next run reads.
    """
    roots = writable_roots(policy)
    if roots == (Path("/"),):
        return None
    read_only = _read_only_root(policy, roots)
    if read_only is not None:
        return read_only
    config = _config_in_roots(policy, roots)
    if config is None or config.name != "pyproject.toml" or policy.config_files:
        return None
    return (
        f"the config in use is [tool.dsh] in {config}, inside a writable root: a tool (write_file, "
        "edit_file, bash) can change it, and with it the sandbox policy of the next run. Move the "
        "[tool.dsh] table to a dsh.toml (protected from every tool), or point DSH_CONFIG at a "
        "file outside the workspace"
    )


def danger_warning(policy: SandboxPolicy) -> str | None:
    """A warning for every start whose policy confines nothing or protects nothing, naming
    the file that says so: a project's ``dsh.toml`` (one cloned with the code) is read like
    the user's own, and this is the line that shows it."""
    where = f" ({policy.config_file})" if policy.config_file is not None else ""
    if policy.mode == "danger-full-access":
        return (
            f"mode = danger-full-access{where}: commands run unconfined, with your user's rights, "
            "and no path is protected; if you did not choose this (a project's dsh.toml), "
            "remove it, or pin your own file with --config or DSH_CONFIG"
        )
    if writable_roots(policy) == (Path("/"),):
        return (
            f"writable_roots holds /{where}: every path is writable to tools and commands and "
            "none stays protected, the config file in use included, so a tool can rewrite the "
            "next run's policy; name the directories the agent needs instead"
        )
    return None


def _read_only_root(policy: SandboxPolicy, roots: tuple[Path, ...]) -> str | None:
    """Why a writable root is read-only as a whole (a protected path holds it), if one is."""
    code = install_in_roots(policy, roots)
    protected = protected_paths(policy)
    for root in roots:
        for path in protected:
            if not within(str(root), str(path)):
                continue
            where = "is" if root == path else f"lies in {path}, which is"
            if path not in code:
                return (
                    f"the writable root {root} is read-only to every tool and command: it "
                    f"{where} protected (a [plugin.sandbox] protected entry, or where a "
                    "protected name such as .git, .claude, dsh.toml or a config file the next "
                    "run reads is a symbolic link, which a command could point elsewhere). "
                    "Replace such a link with what it points to, or keep that name out of the "
                    "writable roots"
                )
            return (
                f"the writable root {root} is read-only to every tool and command: it {where} "
                "where the next dsh start loads code from (dsh's installation, a plugin's, or a "
                "directory on Python's import path: the directory of the script that started "
                "dsh, where python -m or -c ran, PYTHONPATH, an editable install), so a module "
                "planted there would run unconfined. Start the script with python -P (python -P "
                "-m dsh_host), keep PYTHONPATH and editable installs of the workspace out of "
                "dsh's environment, or set [plugin.sandbox] protect_install = false to let the "
                "agent write there"
            )
    return None
