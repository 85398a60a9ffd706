"""The file fence: which paths the file tools may read and write under a sandbox policy.

This is a *policy fence*, not a kernel boundary: trusted code checks a model-controlled path
before touching it. A path is judged by its **real** location: every symlink and ``..`` is
resolved component by component (as ``chdir`` would), and for a path that does not exist yet
the real path of its deepest existing ancestor is taken and the missing suffix re-appended.

* ``danger-full-access``: nothing is fenced.
* ``workspace-write``: writes must land under a writable root (by default the workspace,
  ``/tmp`` and the platform temp dir); reads under the workspace, a writable root or an extra
  read root.
* ``read-only``: every write is denied; reads as for ``workspace-write``.

Inside writable roots, the `protected_paths` (``.git``, ``.claude``, ``.dsh``, ``dsh.toml``,
the config file in use and dsh's own installation, by default) stay read-only: `check_write`
refuses them and everything under them.

The fence decides *which* real path a call may touch; `open_read` and `atomic_write_text` then
open it race-free: the root is opened from ``/`` without following symlinks and compared with
its pin, and the rest of the path is opened beneath that root descriptor with ``openat2``
(``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``; see `dsh_plugins_builtin._sandbox._beneath`). A symlink
swapped in after the check makes the call fail (after a short retry), never read or write
outside. Symlinks that stay inside a root keep working: the fence resolves them first, and
the descriptor walk follows the canonical path they lead to.

`atomic_write_text` publishes a write through a temp file created in the held parent
directory and ``renameat`` there, so a hard link to a file outside is never written through
and the rename can never follow a symlink out. The caller may pass an ``expect`` stamp (the
file's device, inode, size, mtime and ctime when it was read: a compare-and-swap, so an edit
from another process is a `WriteConflict`) and a ``commit`` context manager held around the
final check and the rename (the tools use it to decide atomically between "committed" and
"the call gave up"). A file replaced in place within one timestamp tick and with the same
size, or between the check and the ``rename`` syscall, is a residual race POSIX offers no
compare-and-rename to close.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import site
import stat
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Literal

import attrs

from dsh_plugins_builtin._sandbox._beneath import (
    DIR_FLAGS,
    HAVE_OPENAT2,
    mkdir_beneath,
    open_absolute,
    open_beneath,
    open_dir_nofollow,
)

__all__ = [
    "SANDBOX_MODES",
    "FenceDenied",
    "FileStamp",
    "RootPin",
    "RootReplaced",
    "SandboxMode",
    "SandboxPolicy",
    "WriteConflict",
    "atomic_write_text",
    "check_pinned",
    "check_read",
    "check_write",
    "config_warning",
    "install_in_roots",
    "install_paths",
    "open_read",
    "pin_roots",
    "protected_paths",
    "readable_roots",
    "resolve_target",
    "stamp",
    "writable_roots",
]

SandboxMode = Literal["read-only", "workspace-write", "danger-full-access"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("read-only", "workspace-write", "danger-full-access")

_MAX_SYMLINKS = 40  # the Linux MAXSYMLINKS

PathArg = str | os.PathLike[str]


class FenceDenied(Exception):
    """A file operation was refused by the fence.

    Attributes:
        path: The path as the caller spelled it.
        mode: The sandbox mode that denied it.
    """

    def __init__(self, reason: str, *, path: str = "", mode: str = "") -> None:
        """Build the denial.

        Args:
            reason: The full human-readable message (names the path and the mode).
            path: The path as the caller spelled it.
            mode: The sandbox mode in force.
        """
        super().__init__(reason)
        self.reason = reason
        self.path = path
        self.mode = mode


def _abs_path(value: PathArg) -> Path:
    return Path(os.path.abspath(os.fspath(value)))


def _abs_paths(values: Iterable[PathArg]) -> tuple[Path, ...]:
    seen: dict[Path, None] = {}
    for value in values:
        seen.setdefault(_abs_path(value), None)
    return tuple(seen)


def _default_writable_roots(policy: SandboxPolicy) -> tuple[Path, ...]:
    return (policy.workspace, Path("/tmp"), Path(tempfile.gettempdir()))


@attrs.frozen
class SandboxPolicy:
    """The per-call sandbox policy shared by the file fence and process confinement.

    Attributes:
        mode: ``read-only``, ``workspace-write`` or ``danger-full-access``.
        workspace: The workspace root; relative paths resolve against it.
        writable_roots: Where ``workspace-write`` may write. Defaults to the workspace, ``/tmp``
            and ``tempfile.gettempdir()`` (deduplicated). Ignored by the other modes.
        read_roots: Extra roots the file tools may read besides the workspace and the writable
            roots (process confinement never restricts reads).
        network: Whether a confined process may use the network.
        protected: Read-only inside the writable roots (see `protected_paths`).
        config_file: The config file the host was started with (protected in a writable root).
        install: Where the next ``dsh`` run executes code from (`install_paths`): protected in
            a writable root, so that no tool can change the policy host itself.
    """

    mode: SandboxMode = attrs.field(validator=attrs.validators.in_(SANDBOX_MODES))
    workspace: Path = attrs.field(converter=_abs_path)
    writable_roots: tuple[Path, ...] = attrs.field(
        converter=_abs_paths,
        default=attrs.Factory(_default_writable_roots, takes_self=True),
    )
    read_roots: tuple[Path, ...] = attrs.field(converter=_abs_paths, default=())
    network: bool = False
    protected: tuple[str, ...] = (".git", ".claude", ".dsh", "dsh.toml")
    config_file: Path | None = attrs.field(
        default=None, converter=attrs.converters.optional(_abs_path)
    )
    install: tuple[Path, ...] = attrs.field(converter=_abs_paths, default=())
    pins: tuple[RootPin, ...] = ()
    resolved: _Resolved | None = attrs.field(default=None, init=False, eq=False, repr=False)
    """The canonical roots and protected paths, computed once by `pin_roots` (else per call).

    Not an ``__init__`` argument, so ``attrs.evolve`` never carries it over to a changed policy.
    """


@attrs.frozen
class _Resolved:
    """What `pin_roots` computes once so that a call does no path work on the roots."""

    readable: tuple[Path, ...]
    writable: tuple[Path, ...]
    protected: tuple[Path, ...]
    readable_text: tuple[str, ...]
    writable_text: tuple[str, ...]
    pins: dict[str, RootPin]  # by canonical path
    prefixes: tuple[tuple[str, RootPin], ...]  # canonical pinned roots + "/", deepest first
    canonical: tuple[tuple[str, RootPin], ...]  # pins whose path is canonical, with it as text
    others: tuple[RootPin, ...]  # pins spelled through a symlink (checked the long way)


@attrs.frozen
class RootPin:
    """A root as it was when the host started: its canonical path and its device and inode."""

    path: Path
    real: Path
    dev: int
    ino: int


class RootReplaced(Exception):
    """A pinned root was replaced (moved, swapped for a symlink) after the host started."""

    def __init__(self, pin: RootPin, now: str) -> None:
        super().__init__(
            f'the sandbox root "{pin.path}" was replaced after the host started ({now}); '
            "refusing to run: restart dsh if the move was intended"
        )
        self.pin = pin


def pin_roots(policy: SandboxPolicy) -> SandboxPolicy:
    """Return *policy* with every root it names (workspace, writable and read roots) pinned.

    Each existing root is resolved once, here, and its device and inode recorded; `check_pinned`
    later refuses a call whose root has since been replaced. Missing roots are not pinned (they
    match nothing, as before). The canonical readable, writable and protected paths are
    computed here too, once: a call never canonicalises a root again.
    """
    pins: dict[Path, RootPin] = {}
    for root in (policy.workspace, *policy.writable_roots, *policy.read_roots):
        if root in pins:
            continue
        try:
            real = Path(_resolve_abs(str(root)))
            st = os.stat(real, follow_symlinks=False)
        except (OSError, ValueError):
            continue
        if stat.S_ISDIR(st.st_mode):
            pins[root] = RootPin(root, real, st.st_dev, st.st_ino)
    pinned = attrs.evolve(policy, pins=tuple(pins.values()))
    readable, writable = readable_roots(pinned), writable_roots(pinned)
    by_real = {str(pin.real): pin for pin in pinned.pins}
    canonical = [
        (str(pin.real) + "/", pin)
        for pin in pinned.pins
        if pin.path == pin.real and str(pin.real) != "/"
    ]
    canonical.sort(key=lambda item: len(item[0]), reverse=True)
    resolved = _Resolved(
        readable,
        writable,
        protected_paths(pinned),
        tuple(str(root) for root in readable),
        tuple(str(root) for root in writable),
        by_real,
        tuple(canonical),
        tuple((str(pin.real), pin) for pin in pinned.pins if pin.path == pin.real),
        tuple(pin for pin in pinned.pins if pin.path != pin.real),
    )
    object.__setattr__(pinned, "resolved", resolved)  # frozen: set once, right after creation
    return pinned


def _pin_holds(pin: RootPin, real: str | None = None) -> bool:
    """Whether the root's canonical path (``real``) still leads to the pinned directory.

    One ``lstat``. A symlink at the root itself fails; so does another directory. A symlinked
    directory *above* it that still leads to the very same directory (device and inode)
    passes: it is the same tree (and a file is opened by its canonical path following no
    symlink anywhere on it, so such a read fails closed).
    """
    try:
        st = os.stat(pin.real if real is None else real, follow_symlinks=False)
    except (OSError, ValueError):
        return False
    return not stat.S_ISLNK(st.st_mode) and (st.st_dev, st.st_ino) == (pin.dev, pin.ino)


def check_pinned(policy: SandboxPolicy) -> None:
    """Raise `RootReplaced` if a pinned root's path no longer leads to the same directory.

    The check looks at each root path without following a final symlink: a root that is now a
    symlink, or a directory with another device or inode, fails. It costs one ``lstat`` per
    canonical root (`_pin_holds`); the roots are never resolved again.
    """
    resolved = policy.resolved
    if resolved is not None and not resolved.others:
        for real, pin in resolved.canonical:
            if not _pin_holds(pin, real):
                break  # replaced: the loop below says how
        else:
            return
    for pin in policy.pins:
        if pin.path == pin.real:
            if _pin_holds(pin):
                continue
            # Replaced: open it following no symlink to say how.
            try:
                fd = open_dir_nofollow(str(pin.real))
            except OSError as exc:
                raise RootReplaced(pin, _gone(exc)) from None
            try:
                st = os.fstat(fd)
            finally:
                os.close(fd)
            if (st.st_dev, st.st_ino) != (pin.dev, pin.ino):
                raise RootReplaced(pin, "it is now another directory")
            continue
        try:
            real = _resolve_abs(str(pin.path))
            st = os.stat(pin.path, follow_symlinks=False)
        except (OSError, ValueError) as exc:
            raise RootReplaced(pin, f"it cannot be inspected: {exc}") from None
        if stat.S_ISLNK(st.st_mode):
            raise RootReplaced(pin, "it is now a symbolic link")
        if real != str(pin.real) or (st.st_dev, st.st_ino) != (pin.dev, pin.ino):
            raise RootReplaced(pin, "it is now another directory")


def _gone(exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
        return "it, or a directory above it, is now a symbolic link"
    if exc.errno == errno.ENOENT:
        return "it no longer exists"
    return f"it cannot be opened: {exc.strerror or exc}"


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
    for entry in policy.protected:
        if os.path.isabs(entry):
            out.setdefault(Path(_resolve_abs(os.path.normpath(entry))), None)
            continue
        for root in roots:
            out.setdefault(Path(_resolve_abs(os.path.join(str(root), entry))), None)
    config = _config_in_roots(policy, roots)
    if config is not None and config.name != "pyproject.toml":
        # A pyproject.toml is edited legitimately; `config_warning` says what that risks.
        out.setdefault(config, None)
    for path in install_in_roots(policy, roots):
        out.setdefault(path, None)
    return tuple(out)


def install_in_roots(policy: SandboxPolicy, roots: tuple[Path, ...]) -> tuple[Path, ...]:
    """The canonical ``install`` paths of *policy* that lie inside one of *roots*."""
    found: dict[Path, None] = {}
    for path in policy.install:
        real = Path(_resolve_abs(str(path)))
        if any(_within(str(real), str(root)) for root in roots):
            found.setdefault(real, None)
    # the outermost only (a virtual environment holds its site-packages)
    return tuple(p for p in found if not any(o != p and _within(str(p), str(o)) for o in found))


def install_paths(modules: Iterable[str] = ()) -> tuple[Path, ...]:
    """Where the next ``dsh`` run executes code from, whether or not it lies in a writable root.

    The virtual environment dsh runs in (``sys.prefix``: its site-packages, where a new
    ``.pth`` file or a ``dsh.plugins`` entry point would run at the next start, and its scripts,
    ``dsh`` among them), the interpreter's site-packages and the user's, the directories of
    dsh's own packages (an editable install keeps them in a source tree), and those of
    *modules* (the top-level packages or files of the plugins the host loaded).
    """
    found: dict[Path, None] = {}
    if sys.prefix != sys.base_prefix:  # a virtual environment: all of it
        found.setdefault(Path(sys.prefix), None)
    for key in ("purelib", "platlib"):
        found.setdefault(Path(sysconfig.get_path(key)), None)
    if site.ENABLE_USER_SITE:
        found.setdefault(Path(site.getusersitepackages()), None)
    for name in ("dsh_host", "dsh_plugins_builtin", *modules):
        module = sys.modules.get(name.partition(".")[0])
        if module is None or name.startswith("__main__"):
            continue
        places = list(getattr(module, "__path__", ()))  # a package: its directories
        if not places and getattr(module, "__file__", None):
            places = [module.__file__]  # a module of its own: its file
        for place in places:
            found.setdefault(Path(os.path.abspath(place)), None)
    return _abs_paths(found)


def _config_in_roots(policy: SandboxPolicy, roots: tuple[Path, ...]) -> Path | None:
    if policy.config_file is None:
        return None
    config = Path(_resolve_abs(str(policy.config_file)))
    return config if any(_within(str(config), str(root)) for root in roots) else None


def config_warning(policy: SandboxPolicy) -> str | None:
    """A warning for the start of a run when a tool could rewrite the policy of the next one.

    That is the case when the config in use is ``[tool.dsh]`` in a ``pyproject.toml`` inside a
    writable root: the file is not locked (agents edit it legitimately), so a tool may change
    the ``[tool.dsh]`` table the next run reads.
    """
    roots = writable_roots(policy)
    if roots == (Path("/"),):
        return None
    config = _config_in_roots(policy, roots)
    if config is None or config.name != "pyproject.toml":
        return None
    return (
        f"the config in use is [tool.dsh] in {config}, inside a writable root: a tool (write_file, "
        "edit_file, bash) can change it, and with it the sandbox policy of the next run. Move the "
        "[tool.dsh] table to a dsh.toml (protected from every tool), or point DSH_CONFIG at a "
        "file outside the workspace"
    )


def _resolve_abs(path: str, start: str = "/") -> str:
    """Resolve an absolute path component by component; missing components stay literal.

    With ``start`` (a real directory), ``path`` is taken relative to it.
    """
    pending = list(reversed(path.split("/")))
    resolved = start
    hops = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            # ``resolved`` is always real (or a real prefix plus missing names), so its lexical
            # parent is its real parent.
            resolved = os.path.dirname(resolved)
            continue
        candidate = os.path.join(resolved, name)
        try:
            st = os.lstat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            resolved = candidate  # missing (or a file used as a directory): keep it literal
            continue
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > _MAX_SYMLINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = "/"
            pending.extend(reversed(target.split("/")))
        else:
            resolved = candidate
    return resolved


def resolve_target(path: PathArg, workspace: Path) -> Path:
    """Return the real location a path designates.

    Relative paths are taken relative to ``workspace``. Symlinks and ``..`` are resolved component
    by component; for a path that does not exist yet the result is the real path of its deepest
    existing ancestor plus the missing suffix.

    Args:
        path: The path as the model spelled it.
        workspace: The directory relative paths are resolved against.

    Returns:
        The canonical absolute path.

    Raises:
        ValueError: The path contains a NUL byte, or a lone surrogate it cannot be encoded with.
        OSError: A symlink loop, or an ancestor that cannot be inspected.
    """
    spelled = os.fspath(path)
    if "\0" in spelled:
        raise ValueError("path contains a NUL byte")
    try:
        os.fsencode(spelled)
    except UnicodeEncodeError as exc:
        char = spelled[exc.start]
        raise ValueError(
            f"the path holds a lone surrogate (U+{ord(char):04X} at character {exc.start}), "
            "which no file name can hold"
        ) from None
    joined = os.path.join(os.path.abspath(os.fspath(workspace)), spelled)
    return Path(_resolve_abs(joined))


def _resolve_in(
    spelled: str, policy: SandboxPolicy, pins_checked: bool = False
) -> tuple[str, str | None]:
    """`resolve_target` against the policy's workspace, starting below a pinned root.

    When the path lies lexically under a canonical pinned root that still holds
    (`_pin_holds`, or ``pins_checked``: the caller ran `check_pinned` just now), only the
    components below the root are resolved: the root's own were resolved once, by `pin_roots`.

    Returns:
        The canonical path, and the pinned root whose pin was just checked (else ``None``).
    """
    resolved = policy.resolved
    if resolved is not None and resolved.prefixes and "\0" not in spelled:
        joined = spelled if spelled.startswith("/") else f"{policy.workspace}/{spelled}"
        for prefix, pin in resolved.prefixes:
            if joined.startswith(prefix):
                if not (pins_checked or _pin_holds(pin)):
                    break
                try:
                    os.fsencode(spelled)
                except UnicodeEncodeError:
                    break  # resolve_target explains it
                root = prefix[:-1]
                return _resolve_abs(joined[len(prefix) :], root), root
    return str(resolve_target(spelled, policy.workspace)), None


def _within(key: str, root: str) -> bool:
    return root == "/" or key == root or key.startswith(root + "/")


def _canonical_roots(roots: Iterable[Path]) -> tuple[Path, ...]:
    seen: dict[Path, None] = {}
    for root in roots:
        try:
            canonical = Path(_resolve_abs(str(root)))
        except OSError:
            continue
        if canonical.is_dir():  # a missing root matches nothing until it exists
            seen.setdefault(canonical, None)
    return tuple(seen)


def writable_roots(policy: SandboxPolicy) -> tuple[Path, ...]:
    """Return the canonical, existing, deduplicated roots a policy lets anything write under.

    Both the fence and the process confinement derive their writable set from this function.

    Args:
        policy: The sandbox policy.

    Returns:
        ``()`` for ``read-only``, ``(Path("/"),)`` for ``danger-full-access``, else the roots.
    """
    if policy.mode == "danger-full-access":
        return (Path("/"),)
    if policy.mode == "read-only":
        return ()
    if policy.resolved is not None:
        return policy.resolved.writable
    return _canonical_roots(policy.writable_roots)


def readable_roots(policy: SandboxPolicy) -> tuple[Path, ...]:
    """Return the canonical roots the file tools may read under.

    Args:
        policy: The sandbox policy.

    Returns:
        ``(Path("/"),)`` for ``danger-full-access``; else the workspace, the configured writable
        roots and the extra read roots.
    """
    if policy.mode == "danger-full-access":
        return (Path("/"),)
    if policy.resolved is not None:
        return policy.resolved.readable
    return _canonical_roots((policy.workspace, *policy.writable_roots, *policy.read_roots))


def _describe(spelled: str, key: Path | str | None) -> str:
    if key is None or spelled == str(key):
        return f'"{spelled}"'
    return f'"{spelled}" (resolves to "{key}")'


def _resolve_or_deny(path: PathArg, policy: SandboxPolicy, verb: str) -> Path:
    return Path(_resolve_text_or_deny(os.fspath(path), policy, verb)[0])


def _resolve_text_or_deny(
    spelled: str, policy: SandboxPolicy, verb: str, pins_checked: bool = False
) -> tuple[str, str | None]:
    try:
        return _resolve_in(spelled, policy, pins_checked)
    except ValueError as exc:
        shown = spelled.replace("\0", "\\0")
        raise FenceDenied(
            f'{verb} "{shown}" denied: {exc} under {policy.mode} mode',
            path=spelled,
            mode=policy.mode,
        ) from None
    except OSError as exc:
        raise FenceDenied(
            f"{verb} {_describe(spelled, None)} denied: cannot resolve the path "
            f"({exc.strerror or exc}) under {policy.mode} mode",
            path=spelled,
            mode=policy.mode,
        ) from None


def _roots_text(roots: Iterable[Path]) -> str:
    return ", ".join(str(r) for r in roots) or "none"


def check_read(path: PathArg, policy: SandboxPolicy) -> Path:
    """Fence a read.

    Args:
        path: The path as spelled (relative paths resolve against the workspace).
        policy: The sandbox policy.

    Returns:
        The canonical path to read.

    Raises:
        FenceDenied: The real path lies outside the workspace, the writable roots and the read
            roots (never under ``danger-full-access``).
    """
    return Path(_read_key(os.fspath(path), policy)[0])


def _read_key(
    spelled: str, policy: SandboxPolicy, pins_checked: bool = False
) -> tuple[str, str | None]:
    """`check_read` as text, with the pinned root checked on the way (`_resolve_in`)."""
    key, checked = _resolve_text_or_deny(spelled, policy, "read of", pins_checked)
    resolved = policy.resolved
    if resolved is not None and any(_within(key, root) for root in resolved.readable_text):
        return key, checked
    roots = readable_roots(policy)
    if any(_within(key, str(root)) for root in roots):
        return key, checked
    raise FenceDenied(
        f"read of {_describe(spelled, key)} denied: outside the workspace and read roots "
        f"({_roots_text(roots)}) under {policy.mode} mode",
        path=spelled,
        mode=policy.mode,
    )


def check_write(path: PathArg, policy: SandboxPolicy) -> Path:
    """Fence a write.

    Args:
        path: The path as spelled (relative paths resolve against the workspace).
        policy: The sandbox policy.

    Returns:
        The fresh canonical target to write.

    Raises:
        FenceDenied: ``read-only`` mode, or the real path lies outside every writable root.
    """
    spelled = os.fspath(path)
    key = _resolve_or_deny(spelled, policy, "write to")
    if policy.mode == "danger-full-access":
        return key
    if policy.mode == "read-only":
        raise FenceDenied(
            f"write to {_describe(spelled, key)} denied: file access denied under read-only mode",
            path=spelled,
            mode=policy.mode,
        )
    roots = writable_roots(policy)
    if any(_within(str(key), str(root)) for root in roots):
        _check_protected(spelled, key, policy)
        return key
    raise FenceDenied(
        f"write to {_describe(spelled, key)} denied: outside the writable roots "
        f"({_roots_text(roots)}) under {policy.mode} mode",
        path=spelled,
        mode=policy.mode,
    )


def _check_protected(spelled: str, key: Path, policy: SandboxPolicy) -> None:
    """Refuse a write at or under a protected path (judged by real and by spelled location)."""
    protected = protected_paths(policy)
    if not protected:
        return
    lexical = os.path.normpath(os.path.join(str(policy.workspace), spelled))
    for path in protected:
        text = str(path)
        if not (_within(str(key), text) or _within(lexical, text)):
            continue
        if path in install_in_roots(policy, writable_roots(policy)):
            raise FenceDenied(
                f'write to {_describe(spelled, key)} denied: "{path}" holds code the next dsh '
                "run executes (its own installation or a plugin's), and is read-only to every "
                "tool inside the writable roots. Install dsh and its plugins outside the "
                "workspace (pipx, or a virtual environment elsewhere), or set [plugin.sandbox] "
                "protect_install = false if the agent must write there",
                path=spelled,
                mode=policy.mode,
            )
        what = (
            "the config file in use"
            if policy.config_file is not None
            and path == Path(_resolve_abs(str(policy.config_file)))
            else "protected"
        )
        raise FenceDenied(
            f'write to {_describe(spelled, key)} denied: "{path}" is {what} and read-only to '
            f"every tool inside the writable roots (key [plugin.sandbox] protected, which "
            f"adds the config file in use). Edit it yourself outside the agent, or change "
            f"[plugin.sandbox] protected if the agent must write there",
            path=spelled,
            mode=policy.mode,
        )


def _before_replace(target: Path) -> None:
    """Test seam: runs after the temp file is written and before the final re-check."""


def _changed(spelled: str, policy: SandboxPolicy, what: str) -> FenceDenied:
    return FenceDenied(
        f"write to {_describe(spelled, None)} denied: {what} changed during the write "
        f"under {policy.mode} mode",
        path=spelled,
        mode=policy.mode,
    )


# -- race-free opening -----------------------------------------------------------------------

_RACED = (errno.ELOOP, errno.EXDEV)
_RETRIES = 3


def _root_of(key: Path, roots: tuple[Path, ...]) -> Path:
    """The deepest root ``key`` lies under (the caller has checked that one does)."""
    best = Path("/")
    for root in roots:
        if _within(str(key), str(root)) and len(str(root)) > len(str(best)):
            best = root
    return best


def _root_text(key: str, roots: tuple[str, ...]) -> str | None:
    """The deepest of ``roots`` (canonical, as text) that ``key`` lies under, or ``None``."""
    best: str | None = None
    for root in roots:
        if _within(key, root) and (best is None or len(root) > len(best)):
            best = root
    return best


def _open_root(root: str, policy: SandboxPolicy) -> int:
    """Open a canonical root from ``/`` following no symlink; compare it with its pin."""
    resolved = policy.resolved
    if resolved is not None:
        pin = resolved.pins.get(root)
    else:
        pin = next((p for p in policy.pins if str(p.real) == root), None)
    if pin is not None:
        # A pinned root: opened by its path and accepted only if it is the pinned directory
        # (device and inode), so no walk is needed; a mismatch takes the strict open below,
        # which says what changed.
        with contextlib.suppress(OSError):
            fd = os.open(root, DIR_FLAGS)
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == (pin.dev, pin.ino):
                return fd
            os.close(fd)
    try:
        fd = open_dir_nofollow(root)
    except OSError as exc:
        if pin is not None:
            raise RootReplaced(pin, _gone(exc)) from None
        raise
    if pin is not None:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (pin.dev, pin.ino):
            os.close(fd)
            raise RootReplaced(pin, "it is now another directory")
    return fd


def _relative(key: Path, root: Path) -> str:
    """``key`` below ``root`` (both canonical, ``key`` under ``root``), as a relative path."""
    return _relative_text(str(key), str(root))


def _relative_text(text: str, base: str) -> str:
    if text == base:
        return "."
    return text[len(base) :].lstrip("/")


def _lexical_key(spelled: str, policy: SandboxPolicy, pins_checked: bool) -> str | None:
    """The path as spelled, normalised, when it can be opened without resolving it first.

    That is: ASCII, no ``..`` component, and inside a readable root that is a canonical pinned
    root which still holds (`_pin_holds`, or ``pins_checked``). ``None`` otherwise (and where
    ``openat2`` is missing): the caller resolves and fences it the long way.
    """
    resolved = policy.resolved
    if resolved is None or not HAVE_OPENAT2 or not spelled.isascii() or "\0" in spelled:
        return None
    joined = spelled if spelled.startswith("/") else f"{policy.workspace}/{spelled}"
    parts = [part for part in joined.split("/") if part and part != "."]
    if ".." in parts:
        return None  # ".." after a symlink climbs from where the symlink leads
    key = "/" + "/".join(parts)
    root = _root_text(key, resolved.readable_text)
    pin = None if root is None else resolved.pins.get(root)
    if pin is None or not (pins_checked or _pin_holds(pin, root)):
        return None
    return key


def open_read(
    path: PathArg, policy: SandboxPolicy, *, directory: bool = False, pins_checked: bool = False
) -> tuple[int, str]:
    """Fence a read, then open it beneath its root without following any symlink.

    Args:
        path: As spelled (relative paths resolve against the workspace).
        policy: The sandbox policy.
        directory: Open a directory (for listing) instead of a file.
        pins_checked: The caller ran `check_pinned` on this policy just now (the roots are
            not looked at again; the opened file is still beneath its root).

    Returns:
        A new read-only descriptor (``O_NONBLOCK``: a FIFO does not hang the call) and the
        canonical path it is (text: a ``Path`` costs more than the read of a small file).

    Raises:
        FenceDenied: As `check_read`.
        RootReplaced: The root the path lies under was replaced since the host started.
        OSError: As ``open`` would; ``ELOOP`` when the path kept changing under the call.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | (os.O_DIRECTORY if directory else 0)
    spelled = os.fspath(path)
    resolved = policy.resolved
    lexical = _lexical_key(spelled, policy, pins_checked)
    if lexical is not None:
        # No symlink may be met anywhere on the path: if the open succeeds, the path as
        # spelled (normalised, no "..") is the canonical path, inside a pinned root that still
        # holds. A symlink on it (ELOOP) is resolved and judged the long way, below.
        try:
            return open_absolute(lexical, flags), lexical
        except OSError as exc:
            if exc.errno not in _RACED:
                raise
    for attempt in range(_RETRIES):
        key, checked = _read_key(spelled, policy, pins_checked)
        pin = None
        if resolved is not None:
            root = _root_text(key, resolved.readable_text) or "/"
            if HAVE_OPENAT2:
                pin = resolved.pins.get(root)
        else:
            root = str(_root_of(Path(key), readable_roots(policy)))
        try:
            if pin is not None and (checked == root or _pin_holds(pin)):
                # The root is its pinned directory (one lstat, just now) and no component of
                # the canonical path may be a symlink: one openat2 from "/" opens the file the
                # fence judged, inside the root. (A directory put in the root's place in
                # between lies where the root did, so inside a writable root: nothing the
                # fence would not let this call read.)
                return open_absolute(key, flags), key
            root_fd = _open_root(root, policy)  # a replaced root raises RootReplaced
            try:
                return open_beneath(root_fd, _relative_text(key, root), flags), key
            finally:
                os.close(root_fd)
        except OSError as exc:
            # A symlink raced in after the check: judge the path again (never follow it).
            if exc.errno not in _RACED or attempt == _RETRIES - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


@attrs.frozen
class FileStamp:
    """What identifies one version of a file: device, inode, size, mtime and ctime (ns)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int


def stamp(st: os.stat_result) -> FileStamp:
    """The `FileStamp` of a ``stat`` result."""
    return FileStamp(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class WriteConflict(Exception):
    """The file changed since the caller read it (`atomic_write_text`'s ``expect``)."""


# -- atomic writes -----------------------------------------------------------------------------


def _same_dir(fd: int, path: Path) -> bool:
    try:
        held = os.fstat(fd)
        now = os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def _open_parent(key: Path, spelled: str, policy: SandboxPolicy) -> int:
    """Open (creating missing levels) the parent of ``key`` beneath its writable root."""
    roots = writable_roots(policy)
    root = _root_of(key, roots)
    root_fd = _open_root(str(root), policy)
    try:
        return mkdir_beneath(root_fd, _relative(key.parent, root))
    except OSError as exc:
        if exc.errno in _RACED:
            raise _changed(spelled, policy, "a directory on the way") from None
        if exc.errno == errno.ENOTDIR:
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), spelled) from None
        raise
    finally:
        os.close(root_fd)


def _check_expected(dir_fd: int, name: str, expect: FileStamp, spelled: str) -> None:
    try:
        now = stamp(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
    except FileNotFoundError:
        raise WriteConflict(f'"{spelled}" was deleted since it was read') from None
    if now != expect:
        raise WriteConflict(f'"{spelled}" was changed by someone else since it was read')


def atomic_write_text(
    target: PathArg,
    content: str,
    policy: SandboxPolicy,
    *,
    encoding: str = "utf-8",
    expect: FileStamp | None = None,
    commit: Callable[[], AbstractContextManager[object]] | None = None,
) -> None:
    """Write ``content`` to ``target`` atomically, fencing it under ``policy``.

    The text goes to a temp file created in the target's directory (held by a descriptor
    opened beneath the writable root), the fence is re-checked right before the rename, and
    the temp file is removed on any failure. Missing parent directories are created. An
    existing target's permission bits are preserved. A symlink or hard link at the target is
    replaced, never written through.

    Args:
        target: The path as spelled (relative paths resolve against the workspace).
        content: The text to write.
        policy: The sandbox policy.
        encoding: The text encoding.
        expect: The stamp of the file as the caller read it; the write happens only if the
            file is still that one (else `WriteConflict`).
        commit: A context manager entered around the ``expect`` check and the rename; raising
            from it cancels the write.

    Raises:
        FenceDenied: The write is outside the policy (or protected), now or at the re-check.
        RootReplaced: The root was replaced since the host started.
        WriteConflict: ``expect`` no longer matches.
        OSError: The write itself failed (e.g. the target is a directory).
    """
    spelled = os.fspath(target)
    data = content.encode(encoding)
    key = check_write(spelled, policy)
    name = key.name
    if not name or key in writable_roots(policy):
        # A root is a directory; never create a temp file in its (unfenced) parent.
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(key))
    dir_fd = _open_parent(key, spelled, policy)
    tmp_name: str | None = None
    try:
        old_mode: int | None = None
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                old_mode = stat.S_IMODE(st.st_mode)
        except FileNotFoundError:
            pass
        tmp_name = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp_name, flags, 0o666, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if old_mode is not None:
                os.fchmod(handle.fileno(), old_mode)
            os.fsync(handle.fileno())
        _before_replace(key)
        fresh = check_write(spelled, policy)  # raises FenceDenied if it now points out
        if fresh != key or not _same_dir(dir_fd, key.parent):
            raise _changed(spelled, policy, "the target")
        with commit() if commit is not None else contextlib.nullcontext():
            if expect is not None:
                _check_expected(dir_fd, name, expect, spelled)
            os.replace(tmp_name, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            tmp_name = None
        with contextlib.suppress(OSError):  # make the rename durable; best effort
            sync_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                os.fsync(sync_fd)
            finally:
                os.close(sync_fd)
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name, dir_fd=dir_fd)
        os.close(dir_fd)
