"""Which config files found in a working directory the user trusts (``dsh config trust``).

A ``dsh.toml`` (or ``[tool.dsh]`` table) found where dsh starts was written by whoever made that
directory: in a cloned project, its author, and a tool or command could have planted or edited
it. It can run commands of its own (``hook_commands``, an unconfined MCP server) and widen
what the model may do (allow rules, ``danger-full-access``). So a found file is read only
while what it holds now is what the user trusted, as direnv reads an ``.envrc`` only after
``direnv allow``: a record of the file's real path and a SHA-256 digest of the table dsh reads
from it (comments, layout and a ``pyproject.toml``'s other tables are not part of it).

The records live in ``trusted-configs.json`` in dsh's state directory, which the sandbox hides
from every command. A record file (or its directory) that another user owns, or that others
may write, is not read at all: nothing is trusted then. Every write replaces the file whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, final

from .._model._errors import ConfigError
from ._configfile import read_table
from ._statedir import state_dir

__all__ = ["TrustedConfigs", "digest", "require_trust"]

RECORDS = "trusted-configs.json"

TrustState = Literal["trusted", "changed", "untrusted"]


def digest(table: Mapping[str, Any]) -> str:
    """The SHA-256 of *table* written canonically: keys sorted, each value with its type."""
    text = repr(_canonical(table)).encode("utf-8", "backslashreplace")
    hexdigest: str = _sha256()(text).hexdigest()
    return hexdigest


def _sha256() -> Any:
    """CPython's own SHA-256 (``_sha2``, ``_sha256`` before 3.12): importing `hashlib` loads
    OpenSSL, 2.5 ms of the start of a ``dsh hook claude`` that finds its config (issue 27)."""
    try:
        from _sha2 import sha256  # type: ignore[import-not-found,unused-ignore]  # 3.12+
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found,unused-ignore]  # 3.11
        except ImportError:  # another implementation, or a build without them
            from hashlib import sha256
    return sha256


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(key): _canonical(value[key]) for key in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return value  # str, int, float, bool, a date or time: repr says which


def _default_records() -> Path | None:
    state = state_dir()
    return Path(state, RECORDS) if state is not None and os.path.isabs(state) else None


@final
class TrustedConfigs:
    """The config files the user trusts dsh to read when it finds them in a working directory.

    *records* is the JSON file that holds them; by default ``trusted-configs.json`` in dsh's
    state directory (``$XDG_STATE_HOME/dsh``). A file named by the user (``--config``,
    ``DSH_CONFIG``, ``Host.from_config(path)``) needs no record; one found in the working
    directory does (see ``Host.from_config``).

    Example::

        trust = TrustedConfigs()
        if trust.state("dsh.toml") != "trusted":
            print(open("dsh.toml").read())   # read it first
            trust.trust("dsh.toml")
    """

    __slots__ = ("records",)

    def __init__(self, records: str | os.PathLike[str] | None = None) -> None:
        self.records: Path | None = Path(records) if records is not None else _default_records()
        """The record file; ``None`` when there is no state directory (nothing is trusted)."""

    def __repr__(self) -> str:
        return f"TrustedConfigs(records={self.records!r})"

    def state(self, path: str | os.PathLike[str]) -> TrustState:
        """``"trusted"``, ``"changed"`` (trusted once, holding something else now) or
        ``"untrusted"``.

        Raises:
            ConfigError: the file cannot be read or is not valid TOML.
        """
        return self._state(Path(path), _table(Path(path)))

    def trust(self, path: str | os.PathLike[str]) -> str:
        """Trust what the config file at *path* holds now; returns the digest recorded.

        Raises:
            ConfigError: the file cannot be read or is not valid TOML, or the record cannot be
                written (no state directory, or it is not the user's own).
        """
        key, value = _key(Path(path)), digest(_table(Path(path)))
        with self._locked():
            self._write({**self._read_or_fail(), key: value})
        return value

    def revoke(self, path: str | os.PathLike[str]) -> bool:
        """Forget the record of *path*; ``False`` when there was none."""
        with self._locked():
            records = self._read_or_fail()
            if records.pop(_key(Path(path)), None) is None:
                return False
            self._write(records)
        return True

    def items(self) -> dict[str, str]:
        """Every record: real path to digest (empty when there is no record file)."""
        return self._read()[0]

    # -- internals ------------------------------------------------------------------------

    def _state(self, path: Path, table: Mapping[str, Any]) -> TrustState:
        key = _key(path)
        recorded = self._read(key)[0].get(key)
        if recorded is None:
            return "untrusted"
        return "trusted" if recorded == digest(table) else "changed"

    def _read(self, vouching_for: str | None = None) -> tuple[dict[str, str], str | None]:
        """The records, and why none were read (``None``: read, or there are none yet).

        Records kept in the directory of the file *vouching_for* (a real path), or below it,
        are not believed: a project would ship its own (``XDG_STATE_HOME`` is set by a
        project's Claude Code settings for its hooks)."""
        if self.records is None:
            return {}, "dsh has no state directory here (set XDG_STATE_HOME or HOME)"
        if vouching_for is not None and _inside(self.records, os.path.dirname(vouching_for)):
            return {}, f"{self.records} lies inside the directory of the file it would vouch for"
        try:
            fd = os.open(self.records, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}, None
        except OSError as exc:
            return {}, f"{self.records} cannot be read ({exc.strerror or exc})"
        with open(fd, encoding="utf-8") as file:
            try:
                unsafe = _unsafe(os.fstat(file.fileno()), self.records) or _unsafe(
                    os.stat(self.records.parent), self.records.parent
                )
                if unsafe is not None:
                    return {}, unsafe
                data = json.load(file)
            except OSError as exc:
                return {}, f"{self.records} cannot be read ({exc.strerror or exc})"
            except (ValueError, UnicodeDecodeError):
                return {}, f"{self.records} is not valid JSON"
        configs = data.get("configs") if isinstance(data, dict) else None
        if not isinstance(configs, dict):
            return {}, f'{self.records} holds no "configs" object'
        return {k: v for k, v in configs.items() if isinstance(v, str)}, None

    def _read_or_fail(self) -> dict[str, str]:
        records, problem = self._read()
        if problem is not None and (self.records is None or "valid JSON" not in problem):
            raise ConfigError(f"cannot record which config files you trust: {problem}")
        return records  # an unreadable JSON file is replaced: losing records trusts less

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold ``trusted-configs.lock`` beside the records while they are read and written
        again: two ``dsh config trust`` at once would otherwise keep only one record."""
        import fcntl

        if self.records is None:
            raise ConfigError(f"cannot record which config files you trust: {self._read()[1]}")
        try:
            self.records.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(
                self.records.with_suffix(".lock"),
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
        except OSError as exc:
            raise ConfigError(
                f"cannot record which config files you trust: {exc.strerror or exc}",
                path=str(self.records),
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # the lock goes with it

    def _write(self, records: Mapping[str, str]) -> None:
        import tempfile  # `dsh config trust` only

        assert self.records is not None  # `_read_or_fail` refused otherwise
        directory = self.records.parent
        try:
            fd, temporary = tempfile.mkstemp(prefix=".trusted-", dir=directory)
            try:
                with open(fd, "w", encoding="utf-8") as file:
                    json.dump({"version": 1, "configs": dict(sorted(records.items()))}, file,
                              indent=1, ensure_ascii=True)  # fmt: skip
                    file.write("\n")
                os.replace(temporary, self.records)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        except OSError as exc:
            raise ConfigError(
                f"cannot record which config files you trust: {exc.strerror or exc}",
                path=str(self.records),
            ) from None


def _inside(records: Path, directory: str) -> bool:
    """Whether *records* lies in *directory* or below it, *directory* not being the user's
    home (as the password database has it: a project's settings can set ``HOME``), where
    ``~/dsh.toml`` and ``~/.local/state/dsh`` both are."""
    import pwd

    try:
        home = os.path.realpath(pwd.getpwuid(os.geteuid()).pw_dir)
    except KeyError:  # a user the password database does not know
        home = None
    real = os.path.realpath(directory)
    return real != home and os.path.realpath(records).startswith(real.rstrip("/") + "/")


def _key(path: Path) -> str:
    return os.path.realpath(path)


def _table(path: Path) -> Mapping[str, Any]:
    return read_table(path)


def _unsafe(st: os.stat_result, path: Path) -> str | None:
    """Why a record file or its directory may not be believed: another user could write it."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"{path} belongs to another user (uid {st.st_uid}), so it is not read"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.S_IMODE(st.st_mode)
        return f"{path} may be written by other users (mode {mode:o}; chmod go-w it), so it is not read"
    return None


def require_trust(path: Path, table: Mapping[str, Any], how: str) -> None:
    """Refuse *path*, found *how*, unless the user trusts what it holds now.

    Raises:
        ConfigError: naming the file and saying what to do.
    """
    trust = TrustedConfigs()
    state = trust._state(path, table)
    if state == "trusted":
        return
    named = os.path.realpath(path)
    if state == "changed":
        message = (
            f"changed since you trusted it ({how}); dsh reads a config it finds only as you "
            f"trusted it. Read the change, then run `dsh config trust {named}` again"
        )
    else:
        problem = trust._read(named)[1]
        because = f" (no record could be read: {problem})" if problem else ""
        message = (
            f"not trusted{because}: {how}, it holds what whoever made this directory wrote, "
            "and it may run commands and widen what the model may do. Read it, then run "
            f"`dsh config trust {named}`, or pass a config of your own with --config"
        )
    raise ConfigError(message, path=str(path))
