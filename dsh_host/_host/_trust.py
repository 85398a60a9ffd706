"""Which config files found in a working directory the user trusts (``dsh config trust``).

A ``dsh.toml`` (or ``[tool.dsh]`` table) found where dsh starts was written by whoever made that
directory: in a cloned project, its author, and a tool or command could have planted or edited
it. It can run commands of its own (``hook_commands``, an unconfined MCP server) and widen
what the model may do (allow rules, ``danger-full-access``). So a found file is read only
while what it holds now is what the user trusted, as direnv reads an ``.envrc`` only after
``direnv allow``: a record of the file's real path and a SHA-256 digest of the table dsh reads
from it (comments, layout and a ``pyproject.toml``'s other tables are not part of it), and of
each file its plugins name (``dsh_config_files``: an imported policy, a settings file whose
hooks run), since what a config refers to decides as much as what it says.

The records live in ``trusted-configs.json`` in dsh's state directory, which the sandbox hides
from every command. A record file (or its directory) that another user owns, or that others
may write, is not read at all: nothing is trusted then. Every write replaces the file whole.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, final

from .._model._errors import ConfigError
from ._configfile import read_named, read_table
from ._trustfile import Files, RecordFile, default_records, digest, file_digest, real_key

__all__ = ["TrustState", "TrustedConfigs"]

T = TypeVar("T")
TrustState = Literal["trusted", "changed", "untrusted"]


@final
class TrustedConfigs:
    """The config files the user trusts dsh to read when it finds them in a working directory.

    *records* is the JSON file that holds them; by default ``trusted-configs.json`` in dsh's
    state directory (``$XDG_STATE_HOME/dsh``). A file named by the user (``--config``,
    ``DSH_CONFIG``, ``Host.from_config(path)``) needs no record; one found in the working
    directory does (see ``Host.from_config``).

    A record holds the file's table and each file its plugins name (``dsh_config_files``):
    `state` and `trust` load the plugins to ask (without starting them), as
    ``Host.from_config`` would with the same *plugins*, *load_entrypoints*, *environ* and
    *disable*.

    Example::

        trust = TrustedConfigs()
        if trust.state("dsh.toml") != "trusted":
            print(open("dsh.toml").read())   # read it first
            trust.trust("dsh.toml")
    """

    __slots__ = ("records",)

    def __init__(self, records: str | os.PathLike[str] | None = None) -> None:
        self.records: Path | None = Path(records) if records is not None else default_records()
        """The record file; ``None`` when there is no state directory (nothing is trusted)."""

    @property
    def _file(self) -> RecordFile:
        return RecordFile(self.records)

    def __repr__(self) -> str:
        return f"TrustedConfigs(records={self.records!r})"

    def state(
        self,
        path: str | os.PathLike[str],
        *,
        plugins: Iterable[object] = (),
        load_entrypoints: bool = True,
        environ: Mapping[str, str] | None = None,
        disable: Iterable[str] = (),
        cwd: str | os.PathLike[str] | None = None,
    ) -> TrustState:
        """``"trusted"``, ``"changed"`` (trusted once; the file, or a file its plugins name
        in *cwd* as in `trust`, holds something else now) or ``"untrusted"``.

        Raises:
            ConfigError: the file cannot be read, is not valid TOML, or its configuration is
                wrong (its plugins cannot be asked which files it names).
        """
        key, table = real_key(Path(path)), _table(Path(path))
        records = self._file.read(key)[0]
        if key not in records.configs:
            return "untrusted"
        if records.configs[key] != digest(table):
            return "changed"
        named = _named_now(Path(path), table, (plugins, load_entrypoints, environ, disable), cwd)
        recorded = records.files.get(key, {})
        same = all(real in recorded and recorded[real] == d for real, d in named.items())
        return "trusted" if same else "changed"

    def trust(
        self,
        path: str | os.PathLike[str],
        *,
        plugins: Iterable[object] = (),
        load_entrypoints: bool = True,
        environ: Mapping[str, str] | None = None,
        disable: Iterable[str] = (),
        cwd: str | os.PathLike[str] | None = None,
    ) -> dict[str, str | None]:
        """Trust what the config file at *path*, and each file its plugins name, hold now;
        returns those files (real path to SHA-256, ``None`` for one that does not exist).

        The files are those a start in *cwd* would read (default: the file's own directory,
        where it is found; a config without ``[host] workspace`` takes the directory dsh
        starts in). A config trusted again with the same table keeps the files it named in
        other directories (one ``DSH_CONFIG`` for several projects, each with its own
        ``.claude/settings.json``).

        Raises:
            ConfigError: the file cannot be read or is not valid TOML, its configuration is
                wrong, a file it names cannot be read, or the record cannot be written (no
                state directory, or it is not the user's own).
        """
        key, table = real_key(Path(path)), _table(Path(path))
        named = _named_now(Path(path), table, (plugins, load_entrypoints, environ, disable), cwd)
        with self._file.locked():
            records = self._file.read_or_fail()
            files = named
            if records.configs.get(key) == digest(table):  # trusted from another directory
                files = {**records.files.get(key, {}), **named}
            self._file.write({**records.configs, key: digest(table)}, {**records.files, key: files})
        return named

    def retrust(self, path: str | os.PathLike[str], change: Callable[[], T]) -> tuple[T, bool]:
        """Run *change*, which rewrites the config file at *path* (an ``allow`` rule the user
        just gave), and trust the result if the file was trusted before: the files its plugins
        name keep their record. Returns what *change* returned, and whether the file is
        trusted now. Nothing else can record the file in between (the records stay locked).

        Raises:
            ConfigError: the records cannot be locked or written (*change* did not run, or
                its file is not trusted).
        """
        key = real_key(Path(path))
        records, problem = self._file.read(key)
        if problem is not None or key not in records.configs:
            return change(), False
        with self._file.locked():
            records = self._file.read_or_fail()
            try:
                before = digest(_table(Path(path)))
            except ConfigError:
                before = None
            outcome = change()
            if before is None or records.configs.get(key) != before:
                return outcome, False
            try:
                after = digest(_table(Path(path)))
            except ConfigError:  # *change* left it unreadable: not what anyone trusted
                return outcome, False
            self._file.write({**records.configs, key: after}, records.files)
        return outcome, True

    def revoke(self, path: str | os.PathLike[str]) -> bool:
        """Forget the record of *path*; ``False`` when there was none."""
        key = real_key(Path(path))
        with self._file.locked():
            records = self._file.read_or_fail()
            if records.configs.pop(key, None) is None:
                return False
            records.files.pop(key, None)
            self._file.write(records.configs, records.files)
        return True

    def items(self) -> dict[str, str]:
        """Every record: real path to the digest of its table (empty when there is no record
        file)."""
        return self._file.read()[0].configs

    def files(self, path: str | os.PathLike[str]) -> dict[str, str | None]:
        """The files recorded with the config file at *path* (real path to SHA-256, ``None``
        for one that did not exist); empty when there is no record."""
        return self._file.read()[0].files.get(real_key(Path(path)), {})

    def changed_files(self, path: str | os.PathLike[str]) -> list[str]:
        """The files recorded with the config file at *path* that hold something else now:
        made, gone, rewritten, or no longer a regular file that can be read."""
        changed = []
        for named, held in self.files(path).items():
            try:
                now = file_digest(read_named(named))
            except ConfigError:
                now = ""  # (no digest is empty)
            if now != held:
                changed.append(named)
        return changed


def _named_now(
    path: Path,
    table: Mapping[str, Any],
    loading: tuple[Iterable[object], bool, Mapping[str, str] | None, Iterable[str]],
    cwd: str | os.PathLike[str] | None,
) -> Files:
    """The files the plugins of *table* name in a start in *cwd* (default: the directory of
    *path*), each with the SHA-256 of what it holds now; *loading* is `Host.from_config`'s
    plugins, load_entrypoints, environ and disable. The plugins are loaded and configured,
    not started (no server, no command runs).

    A configuration that cannot be loaded here (a plugin it enables is not installed in this
    environment, a workspace that does not exist) names nothing: its start fails on that
    error, or on a file it names there that was not recorded, which is never trusted."""
    from ._config import config_from
    from ._host import Host

    host_table = table.get("host")
    if not isinstance(host_table, Mapping) or "workspace" not in host_table:
        start = os.path.abspath(cwd if cwd is not None else os.path.dirname(os.path.abspath(path)))
        given = host_table if isinstance(host_table, Mapping) else {}
        table = {**table, "host": {**given, "workspace": start}}  # as a start there would
    host = Host.__new__(Host)
    try:
        host._load(config_from(table, str(path)), *loading)
    except ConfigError:
        return {}
    reals = {os.path.realpath(named) for named in host.config_files}
    return {real: file_digest(read_named(real)) for real in sorted(reals)}


def _table(path: Path) -> Mapping[str, Any]:
    return read_table(path)
