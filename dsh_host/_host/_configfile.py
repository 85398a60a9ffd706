"""Finding the config file that applies in a working directory, and reading its table.

Lookup order: ``$DSH_CONFIG``, then ``dsh.toml`` in the working directory, then ``[tool.dsh]``
in ``pyproject.toml`` there (an explicit path, ``--config`` or ``Host.from_config(path)``,
comes before all of them and is not looked up). A file found here is read only once its user
trusted it (`dsh_host._host._trust`).
"""

from __future__ import annotations

import os
import pathlib
import stat
from collections.abc import Mapping
from typing import Any

from .._model._errors import ConfigError

__all__ = ["find_config", "read_named", "read_table"]

NAMED_LIMIT = 16 * 1024 * 1024
"""The largest file a plugin's configuration may name (`read_named`): settings are small."""


def find_config(
    cwd: pathlib.Path | None = None, environ: Mapping[str, str] | None = None
) -> pathlib.Path | None:
    """The config file that applies in *cwd*: ``$DSH_CONFIG``, ``dsh.toml``, or a
    ``pyproject.toml`` with a ``[tool.dsh]`` table, or one that cannot be read (it may hold
    one: loading it says what is wrong); ``None`` if there is none.

    Raises:
        ConfigError: ``$DSH_CONFIG`` names a file that does not exist.
    """
    environ = os.environ if environ is None else environ
    cwd = pathlib.Path.cwd() if cwd is None else cwd
    if environ.get("DSH_CONFIG"):
        named = pathlib.Path(environ["DSH_CONFIG"])
        if not named.is_file():
            raise ConfigError(
                "no such config file; it is named by the DSH_CONFIG environment variable "
                "(unset it or point it at a TOML file)",
                path=str(named),
            )
        return named
    candidate = cwd / "dsh.toml"
    if candidate.is_file():
        return candidate
    pyproject = cwd / "pyproject.toml"
    if pyproject.is_file():
        import tomllib  # only when there is a file to read (issue 27)

        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError):
            # It may hold [tool.dsh] (deny rules, say): reading it says what is wrong, rather
            # than starting silently with the built-in defaults.
            return pyproject
        if isinstance(data.get("tool"), dict) and "dsh" in data["tool"]:
            return pyproject
    return None


def _beside(path: pathlib.Path) -> str:
    if path.name != "pyproject.toml":
        return ""
    return (
        "; dsh reads its [tool.dsh] table, so it will not start without it: fix the file, or "
        "put dsh's config in a dsh.toml beside it (read first)"
    )


def read_table(path: pathlib.Path) -> Mapping[str, Any]:
    """The table dsh reads from the config file *path*: the whole file, or a ``pyproject.toml``'s
    ``[tool.dsh]``.

    Raises:
        ConfigError: the file cannot be read, is not valid TOML, or its table is not a table.
    """
    import tomllib  # only when there is a file to read (issue 27)

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            "no such config file; check the path given by --config or DSH_CONFIG", path=str(path)
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read the config file: {exc}{_beside(path)}", path=str(path)
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"is not valid TOML: {exc}{_beside(path)}", path=str(path)) from None
    except RecursionError:
        raise ConfigError(
            "is nested too deeply (arrays or tables inside one another hundreds of levels "
            "deep); a dsh config needs a few levels at most",
            path=str(path),
        ) from None
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        dsh = tool.get("dsh", {}) if isinstance(tool, dict) else {}
        if not isinstance(dsh, dict):
            raise ConfigError("[tool.dsh] must be a table", path=str(path), key="tool.dsh")
        return dsh
    return data


def read_named(path: str) -> bytes | None:
    """The bytes of *path*, a file a plugin's configuration names (``dsh_config_files``);
    ``None`` when there is no such file.

    Only a regular file is opened for reading, and at most `NAMED_LIMIT` bytes are read. The
    path is first opened without reading (``O_PATH``: no FIFO or device is opened, so none
    blocks, starts or rewinds, even through a link a project committed), then the very file
    it found is opened again through ``/proc/self/fd``.

    Raises:
        ConfigError: the path is not a regular file, cannot be read, or is too large.
    """
    try:
        where = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read it: {exc.strerror or exc}", path=path) from None
    try:
        st = os.fstat(where)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError("is not a regular file; name a file here", path=path)
        if st.st_size > NAMED_LIMIT:
            raise ConfigError(f"is larger than {NAMED_LIMIT} bytes; name a smaller file", path=path)
        try:
            with open(f"/proc/self/fd/{where}", "rb") as file:  # the same file, now readable
                data = file.read(NAMED_LIMIT + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read it: {exc.strerror or exc}", path=path) from None
    finally:
        os.close(where)
    if len(data) > NAMED_LIMIT:
        raise ConfigError(f"is larger than {NAMED_LIMIT} bytes; name a smaller file", path=path)
    return data
