"""Start a mounted stdio server under the sandbox's Landlock backend (where bubblewrap fails).

The sandbox confines a command with Landlock between ``fork`` and ``exec``: in its fork server
(whose commands get no standard input and one pipe for stdout and stderr, while a stdio server
needs a pipe each way) or in a child forked from the host. A mounted server is started from
the mount loop's thread instead, as this small launcher, run by dsh's own interpreter in
isolated mode (``-I``: nothing imported from the working directory or the environment)::

    python -I -m dsh_plugins_builtin._mcp._landlock_exec FD ABI PROGRAM PLAN -- ARGV...

*FD* is the sandbox's prepared Landlock ruleset (inherited), *ABI* the kernel's, *PROGRAM* the
seccomp filter (hex) and *PLAN* the mount plan (JSON), all from `landlock_prepared`. It applies
them exactly as the sandbox's ``preexec_fn`` does (`_landlock.Prepared.preexec`: a supervisor
that kills every descendant when the server ends or on ``SIGTERM``; the server in new PID, IPC
and mount namespaces, with Landlock, no capabilities, ``no_new_privs`` and the seccomp
filter), then starts (``exec``) the server. It never runs the server unconfined: a failure to
confine exits 125 with one ``landlock-run:`` line on stderr.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

__all__ = ["command"]


def command(prepared: object, argv: list[str], fd: int) -> list[str]:
    """The launcher's command line for *argv* under *prepared* (its ruleset inherited as *fd*)."""
    plan = json.dumps(getattr(prepared, "plan", ()))
    program = getattr(prepared, "program_hex", "")
    abi = str(getattr(prepared, "abi", 0))
    module = "dsh_plugins_builtin._mcp._landlock_exec"
    return [sys.executable, "-I", "-m", module, str(fd), abi, program, plan, "--", *argv]


def _tuples(value: object) -> object:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def main(args: list[str]) -> None:
    from dsh_plugins_builtin._sandbox._landlock import EXIT_RUNNER_FAILURE, PREFIX, Prepared

    try:
        split = args.index("--")
        fd, abi, program, plan = args[:split]
        argv = args[split + 1 :]
        steps: Any = _tuples(json.loads(plan))
        prepared = Prepared(int(fd), bytes.fromhex(program), int(abi), steps)
        prepared.host_pid = os.getppid()  # it runs `preexec` itself: its parent is the host
    except (ValueError, TypeError) as exc:
        os.write(2, f"{PREFIX}bad launcher arguments: {exc}\n".encode())
        os._exit(EXIT_RUNNER_FAILURE)
    prepared.preexec()  # returns only in the confined grandchild; the supervisor never returns
    os.close(int(fd))
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"{PREFIX}exec {argv[0]!r} failed: {exc}\n".encode())
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
