"""Resource limits of a command (``[plugin.sandbox.limits]``), set as hard ``rlimit``\\ s.

They are set by the command's own shell before the command runs (``ulimit -H -S``, a builtin:
no extra process), inside the sandbox, where no capability is left to raise them again; a
limit above the host's own hard limit is lowered to it. `explain` names the limit a command
ran into, from how it ended and what it printed.

The kernel never applies ``RLIMIT_NPROC`` to uid 0: as root, ``processes`` bounds nothing but
is still reported by ``dsh sandbox check`` (docs/plugins/sandbox.md says what to do).
"""

from __future__ import annotations

import functools
import os
import resource
import signal
from typing import Any, Final

import attrs

__all__ = ["LimitsConfig", "explain", "rlimits", "ulimit_prefix"]

_MIB: Final = 1024 * 1024


def _physical_mib() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // _MIB
    except (OSError, ValueError):
        return 8192


def _positive(instance: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or value < 1):
        raise ValueError(
            f"[plugin.sandbox.limits] {attribute.name} must be a positive integer or left out, "
            f"got {value!r}"
        )


@attrs.frozen
class LimitsConfig:
    """``[plugin.sandbox.limits]``: per-command resource limits (``None``: not limited).

    Attributes:
        processes: Processes (and threads) of the command's user (``RLIMIT_NPROC``).
        memory_mib: Address space of each process, MiB (``RLIMIT_AS``); default half the RAM.
        file_size_mib: Largest file a command may write, MiB (``RLIMIT_FSIZE``).
        open_files: Open descriptors per process (``RLIMIT_NOFILE``).
        cpu_seconds: CPU time per process (``RLIMIT_CPU``); the wall time stays with
            ``timeout``.
    """

    processes: int | None = attrs.field(default=512, validator=_positive)
    memory_mib: int | None = attrs.field(
        default=attrs.Factory(lambda: max(_physical_mib() // 2, 256)), validator=_positive
    )
    file_size_mib: int | None = attrs.field(default=4096, validator=_positive)
    open_files: int | None = attrs.field(default=4096, validator=_positive)
    cpu_seconds: int | None = attrs.field(default=3600, validator=_positive)


# (config field, ulimit flag, rlimit, unit in bytes for the flag, unit of the field)
_TABLE: Final = (
    ("processes", "-u", resource.RLIMIT_NPROC, 1, 1),
    ("memory_mib", "-v", resource.RLIMIT_AS, 1024, _MIB),
    ("file_size_mib", "-f", resource.RLIMIT_FSIZE, 1024, _MIB),
    ("open_files", "-n", resource.RLIMIT_NOFILE, 1, 1),
    ("cpu_seconds", "-t", resource.RLIMIT_CPU, 1, 1),
)


_NO_CORE: Final = (resource.RLIMIT_CORE, 0)
"""Always set, whatever the configuration: no core dump, hard limit 0. Where the kernel's
``core_pattern`` is a pipe (systemd-coredump, apport, abrt), each dump a command made would
start that helper on the host, as root and outside every namespace, writing outside the
writable roots."""


@functools.lru_cache(maxsize=16)
def rlimits(limits: LimitsConfig | None) -> tuple[tuple[int, int], ...]:
    """``(RLIMIT_*, value)`` for each limit set, each at most the host's own hard limit (the
    host's, read once per configuration: work that depends on it alone is not per call); the
    core size always, 0 (`_NO_CORE`)."""
    if limits is None:
        return (_NO_CORE,)
    out = [_NO_CORE]
    for field, _, which, _, unit in _TABLE:
        value = getattr(limits, field)
        if value is None:
            continue
        wanted = value * unit
        hard = resource.getrlimit(which)[1]
        if hard != resource.RLIM_INFINITY:
            wanted = min(wanted, hard)
        out.append((which, wanted))
    return tuple(out)


@functools.lru_cache(maxsize=16)
def ulimit_prefix(limits: LimitsConfig | None) -> str:
    """``ulimit -H -S ...;`` for the command's shell (the core size at least: `_NO_CORE`)."""
    units = {which: (flag, flag_unit) for _, flag, which, flag_unit, _ in _TABLE}
    units[resource.RLIMIT_CORE] = ("-c", 1024)
    flags = [
        f"{units[which][0]} {max(value // units[which][1], 1) if value else 0}"
        for which, value in rlimits(limits)
    ]
    return f"ulimit -H -S {' '.join(flags)} || exit 125; "


def explain(limits: LimitsConfig | None, output: str, signal_number: int | None) -> str | None:
    """The limit a command most likely ran into (a sentence naming the key), or ``None``."""
    if limits is None:
        return None
    hit = None
    if signal_number == signal.SIGXFSZ or "File size limit exceeded" in output:
        hit = "file_size_mib"
    elif signal_number == signal.SIGXCPU or "CPU time limit exceeded" in output:
        hit = "cpu_seconds"
    elif "fork: retry" in output or "fork: Resource temporarily unavailable" in output:
        hit = "processes"
    elif "Cannot allocate memory" in output or "MemoryError" in output or "xmalloc" in output:
        hit = "memory_mib"
    elif "Too many open files" in output:
        hit = "open_files"
    if hit is None or getattr(limits, hit) is None:
        return None
    return (
        f"[sandbox: the command hit a resource limit: {hit} = {getattr(limits, hit)} "
        f"([plugin.sandbox.limits] {hit})]"
    )
