"""The environment a confined command gets: an allowlist (``[plugin.sandbox.env]``).

``inherit = "core"`` (the default) passes only `CORE` names, ``"all"`` every name, ``"none"``
nothing; then ``include`` globs are added and ``exclude`` globs removed. Whatever the table
says, a command never inherits:

* ``DSH_*`` names and the names of host sockets (`SOCKET_NAMES`: ``TMUX``, ``SSH_AUTH_SOCK``,
  ``DBUS_SESSION_BUS_ADDRESS``, ``DISPLAY`` ...), which would lead it out of the sandbox;
* a value that looks like a secret (`looks_secret`: a URL with a password, a known token
  format, a long random string), unless ``include`` names it exactly; under
  ``inherit = "all"`` names with ``KEY``, ``TOKEN``, ``SECRET`` or ``PASSWORD`` too.

Then ``NO_COLOR=1``, ``TERM=dumb``, ``PAGER=cat``, ``GIT_PAGER=cat``, ``TMPDIR`` (the private
tmp) and the ``set`` table are set.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

import attrs

__all__ = ["CORE", "SOCKET_NAMES", "EnvConfig", "command_env", "looks_secret", "scrub_env"]

CORE: Final = ("PATH", "HOME", "LANG", "LC_*", "TERM", "USER", "LOGNAME", "SHELL", "TZ", "PWD")
SOCKET_NAMES: Final = frozenset(
    {
        "TMUX",
        "TMUX_PANE",
        "STY",
        "SSH_AUTH_SOCK",
        "SSH_AGENT_PID",
        "GPG_AGENT_INFO",
        "DBUS_SESSION_BUS_ADDRESS",
        "DBUS_SYSTEM_BUS_ADDRESS",
        "WAYLAND_DISPLAY",
        "DISPLAY",
        "XAUTHORITY",
        "XDG_RUNTIME_DIR",
        "DOCKER_HOST",
        "PULSE_SERVER",
    }
)
_SECRET_MARKERS: Final = ("KEY", "TOKEN", "SECRET", "PASSWORD")
_FORCED_ENV: Final = {"NO_COLOR": "1", "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat"}


@functools.cache
def _secret_patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """A URL with a password, a known token prefix, a long random-looking string: compiled
    with the first command's environment (about 0.5 ms a start that runs none, issue 27)."""
    return (
        re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@"),
        re.compile(
            r"(?:gh[pousr]_|github_pat_|glpat-|xox[abposr]-|sk-|sk_live_|rk_live_|npm_|pypi-|hf_|"
            r"AKIA|ASIA|AIza|-----BEGIN)"
            r"|^eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\."
        ),
        re.compile(r"^[A-Za-z0-9_+/=-]{32,}$"),
    )


def looks_secret(value: str) -> bool:
    """Whether *value* looks like a credential: a URL with a password, a known token prefix
    (``ghp_``, ``github_pat_``, ``sk-``, ``AKIA`` ...), a JWT, a PEM block, or a long string
    mixing upper case, lower case and digits with no path in it."""
    url_password, token, random = _secret_patterns()
    if url_password.search(value) or token.search(value):
        return True
    if random.match(value) and "/" not in value:
        kinds = sum(bool(re.search(p, value)) for p in ("[a-z]", "[A-Z]", "[0-9]"))
        return kinds == 3
    return False


def _check_globs(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    for item in value:
        if not item or "=" in item or "\0" in item:
            raise ValueError(f"[plugin.sandbox.env] {attribute.name}: bad name {item!r}")


@attrs.frozen
class EnvConfig:
    """``[plugin.sandbox.env]``: what environment a command gets (see the module docstring).

    Attributes:
        inherit: ``core`` (`CORE` names), ``all`` or ``none``.
        include: Name globs added to what is inherited (an exact name also lets a
            secret-looking value through).
        exclude: Name globs removed, whatever else says.
        set: ``set = {NAME = "value"}``: set last, as given.
    """

    inherit: Literal["core", "all", "none"] = "core"
    include: tuple[str, ...] = attrs.field(default=(), validator=_check_globs)
    exclude: tuple[str, ...] = attrs.field(default=(), validator=_check_globs)
    set: dict[str, str] = attrs.field(factory=dict)


def _matches(name: str, globs: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, glob) for glob in globs)


def _inherited(name: str, value: str, config: EnvConfig, exact: frozenset[str]) -> bool:
    upper = name.upper()
    if upper.startswith("DSH_") or name in SOCKET_NAMES or _matches(name, config.exclude):
        return False
    if name in exact:
        return True
    if looks_secret(value):
        return False
    if _matches(name, config.include):
        return True
    if config.inherit == "all":
        return not any(marker in upper for marker in _SECRET_MARKERS)
    return config.inherit == "core" and _matches(name, CORE)


def command_env(
    environ: Mapping[str, str],
    config: EnvConfig | None = None,
    *,
    allow: Iterable[str] = (),
    tmpdir: str | None = None,
) -> dict[str, str]:
    """The environment of a command.

    Args:
        environ: The host's environment (usually ``os.environ``).
        config: ``[plugin.sandbox.env]`` (default: ``inherit = "core"``).
        allow: Exact names let through like an exact ``include`` (``env_allow``).
        tmpdir: ``TMPDIR`` (and ``TMP``, ``TEMP``) for the command, if any.
    """
    snapshot = dict(environ)
    allowed = tuple(allow)
    key = (id(config), allowed, tmpdir)
    memo = _MEMO.get(key)
    if memo is not None and memo[0] is config and memo[1] == snapshot and memo[2] == _set(config):
        return dict(memo[3])  # the same table over the same environment: the same answer
    config_ = config if config is not None else EnvConfig()
    exact = frozenset((*allowed, *(n for n in config_.include if not any(c in n for c in "*?["))))
    env = {n: v for n, v in snapshot.items() if _inherited(n, v, config_, exact)}
    env.update(_FORCED_ENV)
    if tmpdir is not None:
        env.update(TMPDIR=tmpdir, TMP=tmpdir, TEMP=tmpdir)
    env.update(config_.set)
    if len(_MEMO) >= 16:
        _MEMO.clear()
    _MEMO[key] = (config, snapshot, _set(config), dict(env))
    return env


# The last answers, by table (its identity), allow-list and TMPDIR, with the environment they
# were computed from: a command costs a copy and a comparison of the environment, not its filter.
_MEMO: dict[tuple[int, tuple[str, ...], str | None], tuple[Any, dict[str, str], Any, Any]] = {}


def _set(config: EnvConfig | None) -> dict[str, str] | None:
    return None if config is None else dict(config.set)


_INHERIT_ALL = EnvConfig(inherit="all")  # one table, so its answers are memoised too


def scrub_env(environ: Mapping[str, str], allow: Iterable[str] = ()) -> dict[str, str]:
    """`command_env` with ``inherit = "all"`` (what probes and the old name heuristic used)."""
    return command_env(environ, _INHERIT_ALL, allow=allow)
