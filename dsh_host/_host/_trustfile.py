"""The records of which config files the user trusts (``trusted-configs.json``), and the checks
a found config passes before the host reads it (`require_trust`) and starts its plugins
(`check_named`). `dsh_host._host._trust` is the public face (`TrustedConfigs`)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from .._model._errors import ConfigError
from ._configfile import read_named
from ._statedir import state_dir

__all__ = [
    "RECORDS", "Files", "RecordFile", "Records", "check_named", "default_records", "digest",
    "file_digest", "real_key", "require_trust",
]  # fmt: skip

RECORDS = "trusted-configs.json"

Files = dict[str, str | None]  # real path of a named file -> SHA-256 of its bytes; None: absent


@attrs.frozen
class Records:
    """What the record file holds."""

    configs: dict[str, str]  # real path of a config file -> `digest` of its table
    files: dict[str, Files]  # real path of a config file -> the files its plugins name


def digest(table: Mapping[str, Any]) -> str:
    """The SHA-256 of *table* written canonically: keys sorted, each value with its type."""
    text = repr(_canonical(table)).encode("utf-8", "backslashreplace")
    hexdigest: str = _sha256()(text).hexdigest()
    return hexdigest


def file_digest(data: bytes | None) -> str | None:
    return None if data is None else str(_sha256()(data).hexdigest())


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


def default_records() -> Path | None:
    state = state_dir()
    return Path(state, RECORDS) if state is not None and os.path.isabs(state) else None


@attrs.frozen
class RecordFile:
    """The record file at *path* (``None``: there is no state directory), read and written."""

    path: Path | None

    def read(self, vouching_for: str | None = None) -> tuple[Records, str | None]:
        """The records, and why none were read (``None``: read, or there are none yet).

        Records kept in the directory of the file *vouching_for* (a real path), or below it,
        are not believed: a project would ship its own (``XDG_STATE_HOME`` is set by a
        project's Claude Code settings for its hooks)."""
        none = Records({}, {})
        if self.path is None:
            return none, "dsh has no state directory here (set XDG_STATE_HOME or HOME)"
        if vouching_for is not None and _inside(self.path, os.path.dirname(vouching_for)):
            return none, f"{self.path} lies inside the directory of the file it would vouch for"
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return none, None
        except OSError as exc:
            return none, f"{self.path} cannot be read ({exc.strerror or exc})"
        with open(fd, encoding="utf-8") as file:
            try:
                unsafe = _unsafe(os.fstat(file.fileno()), self.path) or _unsafe(
                    os.stat(self.path.parent), self.path.parent
                )
                if unsafe is not None:
                    return none, unsafe
                data = json.load(file)
            except OSError as exc:
                return none, f"{self.path} cannot be read ({exc.strerror or exc})"
            except (ValueError, UnicodeDecodeError):
                return none, f"{self.path} is not valid JSON"
        configs = data.get("configs") if isinstance(data, dict) else None
        if not isinstance(configs, dict):
            return none, f'{self.path} holds no "configs" object'
        files = data.get("files")
        return Records(
            {k: v for k, v in configs.items() if isinstance(v, str)},
            {k: _files(v) for k, v in files.items()} if isinstance(files, dict) else {},
        ), None

    def read_or_fail(self) -> Records:
        records, problem = self.read()
        if problem is not None and (self.path is None or "valid JSON" not in problem):
            raise ConfigError(f"cannot record which config files you trust: {problem}")
        return records  # an unreadable JSON file is replaced: losing records trusts less

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold ``trusted-configs.lock`` beside the records while they are read and written
        again: two ``dsh config trust`` at once would otherwise keep only one record."""
        import fcntl

        if self.path is None:
            raise ConfigError(f"cannot record which config files you trust: {self.read()[1]}")
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(
                self.path.with_suffix(".lock"),
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
        except OSError as exc:
            raise ConfigError(
                f"cannot record which config files you trust: {exc.strerror or exc}",
                path=str(self.path),
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # the lock goes with it

    def write(self, configs: Mapping[str, str], files: Mapping[str, Files]) -> None:
        import tempfile  # `dsh config trust` only

        assert self.path is not None  # `_read_or_fail` refused otherwise
        document = {
            "version": 1,
            "configs": dict(sorted(configs.items())),
            "files": {k: dict(sorted(v.items())) for k, v in sorted(files.items()) if k in configs},
        }
        try:
            fd, temporary = tempfile.mkstemp(prefix=".trusted-", dir=self.path.parent)
            try:
                with open(fd, "w", encoding="utf-8") as file:
                    json.dump(document, file, indent=1, ensure_ascii=True)
                    file.write("\n")
                os.replace(temporary, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        except OSError as exc:
            raise ConfigError(
                f"cannot record which config files you trust: {exc.strerror or exc}",
                path=str(self.path),
            ) from None


def _files(value: Any) -> Files:
    """A record's files, as stored; what is not shaped like one is no file at all."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str | None)}


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


def real_key(path: Path) -> str:
    return os.path.realpath(path)


def _unsafe(st: os.stat_result, path: Path) -> str | None:
    """Why a record file or its directory may not be believed: another user could write it."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"{path} belongs to another user (uid {st.st_uid}), so it is not read"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.S_IMODE(st.st_mode)
        return f"{path} may be written by other users (mode {mode:o}; chmod go-w it), so it is not read"
    return None


def require_trust(path: Path, table: Mapping[str, Any], how: str) -> Files:
    """Refuse *path*, found *how*, unless the user trusts the table it holds now; the files
    its record holds (`check_named` compares them once the plugins named theirs).

    Raises:
        ConfigError: naming the file and saying what to do.
    """
    named = os.path.realpath(path)
    records, problem = RecordFile(default_records()).read(named)
    recorded = records.configs.get(named)
    if recorded is not None and recorded == digest(table):
        return records.files.get(named, {})
    if recorded is not None:
        message = (
            f"changed since you trusted it ({how}); dsh reads a config it finds only as you "
            f"trusted it. Read the change, then run `dsh config trust {named}` again"
        )
    else:
        because = f" (no record could be read: {problem})" if problem else ""
        message = (
            f"not trusted{because}: {how}, it holds what whoever made this directory wrote, "
            "and it may run commands and widen what the model may do. Read it, then run "
            f"`dsh config trust {named}`, or pass a config of your own with --config"
        )
    raise ConfigError(message, path=str(path))


def check_named(
    path: Path, recorded: Mapping[str, str | None], how: str, named: Mapping[Path, str]
) -> dict[str, bytes | None]:
    """What each file the plugins *named* (path -> plugin) holds, by real path, once each
    holds what the trusted config *path* (found *how*) recorded for it.

    Raises:
        ConfigError: naming the first file that differs, the plugin that names it, and the
            command that trusts the config again; or a named file that cannot be read.
    """
    read: dict[str, bytes | None] = {}
    for shown, plugin in named.items():
        real = os.path.realpath(shown)
        if real in read:
            continue
        read[real] = data = read_named(real)
        if real in recorded and recorded[real] == file_digest(data):
            continue
        if real not in recorded:
            what = "was not part of what you trusted with the config that names it"
        elif data is None:
            what = "is gone since you trusted the config that names it"
        elif recorded[real] is None:
            what = "did not exist when you trusted the config that names it"
        else:
            what = "changed since you trusted the config that names it"
        config = os.path.realpath(path)
        raise ConfigError(
            f"{what} ({config}, {how}); dsh reads a config it finds, and the files it names, "
            f"only as you trusted them. Read it, then run `dsh config trust {config}` again",
            path=str(shown),
            plugin=plugin,
        )
    return read
