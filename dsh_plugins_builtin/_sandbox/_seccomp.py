"""The seccomp filter every confined command runs under (bwrap and Landlock alike).

The filter is compiled to classic BPF by libseccomp (through the ``pyseccomp`` ctypes binding),
once per ``network`` setting, and handed over as raw bytes: bwrap reads it from the file
descriptor given to ``--seccomp FD``; the Landlock backend loads it with
``prctl(PR_SET_SECCOMP)`` in the child between fork and exec.

It follows the container default profile where that applies to a shell command: the default
action is *allow*, and these calls fail with ``EPERM`` (``EAFNOSUPPORT`` for sockets):

* ``mount``, ``umount2``, ``pivot_root``, the new mount API (``open_tree``, ``move_mount``,
  ``fsopen``, ``fsconfig``, ``fsmount``, ``fspick``, ``mount_setattr``), ``chroot``;
* ``setns``, ``unshare`` and ``clone`` with any ``CLONE_NEW*`` flag; ``clone3`` fails with
  ``ENOSYS`` (its flags live in memory seccomp cannot read, so the C library falls back to
  ``clone``, which is checked);
* memory no address-space limit counts, held without a mapping (`_UNCOUNTED`):
  ``memfd_create`` and ``memfd_secret``, and System V IPC (``shmget``, ``msgget``,
  ``semget``: in the command's own IPC namespace nothing exists it did not make) fail with
  ``ENOSYS``, as on a kernel built without them;
* ``keyctl``, ``add_key``, ``request_key`` (the kernel keyring is not namespaced);
* ``ptrace``, ``process_vm_readv``, ``process_vm_writev``, ``kcmp``, ``pidfd_open``,
  ``pidfd_getfd``;
* on any process but the caller itself (a PID other than 0): ``prlimit64``,
  ``sched_setaffinity``, ``sched_setscheduler``, ``sched_setparam``, ``sched_setattr``,
  ``migrate_pages``, ``move_pages``; ``setpriority`` and ``ioprio_set`` of anything but the
  calling process (no process group, no user);
* ``mknod``/``mknodat`` of a character or block device (FIFOs and sockets stay allowed);
* ``ioctl(TIOCSTI)`` and ``ioctl(TIOCLINUX)`` (typing into or driving a terminal);
* kernel-wide knobs: module loading, ``kexec_*``, ``bpf``, ``perf_event_open``, ``userfaultfd``,
  ``open_by_handle_at``, ``name_to_handle_at``, ``acct``, ``swapon``/``swapoff``, ``reboot``,
  clock setting, ``iopl``/``ioperm``, ``quotactl``, ``io_uring_*`` (ring operations bypass the
  other rules);
* with ``network = false``: ``socket()`` of every family but ``AF_UNIX``; with a ``network``
  list (a private network namespace whose loopback leads only to the proxy relay), of every
  family but ``AF_UNIX``, ``AF_INET`` and ``AF_INET6``;
* without *unix* (a mounted MCP server, which runs as long as dsh does): ``socket(AF_UNIX)``
  too, with ``EACCES``. A host socket that starts listening after the server started is not
  covered in its view (`_hostsockets` covers those of each start), and ``connect`` needs a
  socket to connect; ``socketpair`` (pipes between the server's own processes) stays allowed.

A system call of a foreign architecture (32-bit calls on a 64-bit host) kills the process.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
import tempfile
from typing import Any, Final

__all__ = ["SeccompUnavailable", "filter_bpf"]

_EPERM_CALLS: Final = (
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "pidfd_open",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "open_by_handle_at",
    "name_to_handle_at",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "iopl",
    "ioperm",
    "quotactl",
    "lookup_dcookie",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)
_UNCOUNTED: Final = ("memfd_create", "shmget", "msgget", "semget")
"""Calls that hold memory outside every process's address space (``RLIMIT_AS``): without a
cgroup, nothing would bound it (a 4 GiB ``memfd`` under ``memory_mib = 256``)."""
_UNCOUNTED_NEWER: Final = ("memfd_secret",)
"""As `_UNCOUNTED`, but unknown to older libseccomp releases: refused where it knows them."""
# Every CLONE_NEW* flag: NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET.
_CLONE_NEW_MASK: Final = 0x80 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000
_CLONE_NEW_MASK_ALL: Final = _CLONE_NEW_MASK | 0x10000000 | 0x20000000 | 0x40000000
_TIOCSTI: Final = 0x5412
_TIOCLINUX: Final = 0x541C
_AF_UNIX: Final = 1
_AF_INET: Final = 2
_AF_INET6: Final = 10
_PRIO_PROCESS: Final = 0
_IOPRIO_WHO_PROCESS: Final = 1


class SeccompUnavailable(Exception):
    """libseccomp (or the ``pyseccomp`` binding) is missing, or it refused the filter."""


def _build(block_network: bool, inet: bool, unix: bool) -> bytes:
    try:
        import pyseccomp as sc  # type: ignore[import-untyped]  # loads libseccomp.so.2
    except Exception as exc:  # ImportError, OSError, or AttributeError without the library
        raise SeccompUnavailable(
            f"libseccomp is not usable ({exc}); install the Debian package libseccomp2"
        ) from None
    deny = sc.ERRNO(errno.EPERM)
    flt = sc.SyscallFilter(sc.ALLOW)
    for name in _EPERM_CALLS:
        flt.add_rule(deny, name)
    # Namespaces: none may be created from inside.
    for bit in _flag_bits(_CLONE_NEW_MASK_ALL):
        flt.add_rule(deny, "unshare", sc.Arg(0, sc.MASKED_EQ, bit, bit))
        flt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, bit, bit))
    nosys = sc.ERRNO(errno.ENOSYS)
    for name in ("clone3", *_UNCOUNTED):
        flt.add_rule(nosys, name)
    for name in _UNCOUNTED_NEWER:
        with contextlib.suppress(OSError, ValueError):
            flt.add_rule(nosys, name)
    # Devices and terminals.
    fmt = stat.S_IFMT(0o177777)
    for kind in (stat.S_IFCHR, stat.S_IFBLK):
        flt.add_rule(deny, "mknod", sc.Arg(1, sc.MASKED_EQ, fmt, kind))
        flt.add_rule(deny, "mknodat", sc.Arg(2, sc.MASKED_EQ, fmt, kind))
    for request in (_TIOCSTI, _TIOCLINUX):
        flt.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request))
    _self_only(sc, flt, deny)
    refuse = sc.ERRNO(errno.EAFNOSUPPORT)
    if block_network and inet:  # loopback of a network namespace: UNIX, INET, INET6 only
        for family in sorted(set(range(_AF_INET6)) - {_AF_UNIX, _AF_INET}):
            flt.add_rule(refuse, "socket", sc.Arg(0, sc.EQ, family))
        flt.add_rule(refuse, "socket", sc.Arg(0, sc.GT, _AF_INET6))
    elif block_network:
        flt.add_rule(refuse, "socket", sc.Arg(0, sc.NE, _AF_UNIX))
    if not unix:
        flt.add_rule(sc.ERRNO(errno.EACCES), "socket", sc.Arg(0, sc.EQ, _AF_UNIX))
    with tempfile.TemporaryFile() as out:
        flt.export_bpf(out)
        out.seek(0)
        return out.read()


def _self_only(sc: Any, flt: Any, deny: Any) -> None:
    """Calls that reach another process by its PID work on the caller only (PID 0): limits,
    priorities, CPU and I/O scheduling, memory placement. Otherwise a command could starve or
    cripple the host, its supervisor or the fork server (lower their open-file limit, say)."""
    for name in ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam"):
        flt.add_rule(deny, name, sc.Arg(0, sc.NE, 0))
    for name in ("sched_setattr", "migrate_pages", "move_pages"):
        flt.add_rule(deny, name, sc.Arg(0, sc.NE, 0))
    flt.add_rule(deny, "setpriority", sc.Arg(0, sc.NE, _PRIO_PROCESS))  # not a group or user
    flt.add_rule(deny, "setpriority", sc.Arg(1, sc.NE, 0))
    flt.add_rule(deny, "ioprio_set", sc.Arg(0, sc.NE, _IOPRIO_WHO_PROCESS))
    flt.add_rule(deny, "ioprio_set", sc.Arg(1, sc.NE, 0))


def _flag_bits(mask: int) -> list[int]:
    return [1 << i for i in range(mask.bit_length()) if mask >> i & 1]


@functools.cache
def filter_bpf(block_network: bool, *, inet: bool = False, unix: bool = True) -> bytes:
    """The filter as raw classic-BPF instructions (8 bytes each), built once per setting.

    Args:
        block_network: Also refuse ``socket()`` for every family but ``AF_UNIX``.
        inet: With *block_network*, let ``AF_INET`` and ``AF_INET6`` through too (a command
            in its own network namespace, whose loopback only leads to the proxy relay).
        unix: Let ``socket(AF_UNIX)`` through (``False``: a mounted MCP server's filter).

    Returns:
        The program, as ``bwrap --seccomp`` and ``PR_SET_SECCOMP`` take it.

    Raises:
        SeccompUnavailable: libseccomp cannot be loaded or refused a rule.
    """
    try:
        return _build(block_network, inet, unix)
    except OSError as exc:
        raise SeccompUnavailable(
            f"libseccomp refused the filter: {os.strerror(exc.errno or 0)}"
        ) from None
