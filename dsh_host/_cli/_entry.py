"""The ``dsh`` console script and ``python -m dsh_host``: `main`, then a quick exit.

Once a command is done, the interpreter's own teardown (module by module, every object
collected) costs a cold ``dsh`` tens of milliseconds, and hundreds on a loaded machine (issue
27), for nothing a finished command needs. So `command` registers, before anything else can, an
exit handler that runs last: after non-daemon threads were joined and every other exit handler
ran (the audit writer commits what is queued, finalizers remove temporary directories, the
sandbox's fork server stops), it flushes stdout and stderr and ends the process with the
command's status. If `main` did not return (an exception escaped it), the interpreter exits
the usual way. `main` itself, called in-process (tests, embedding), never exits the process.

The garbage collector is paused while the process starts (see `dsh_host._gc`), and the methods attrs
generates for each class are compiled once, not at every start (see `dsh_host._attrs_code`);
trio is imported without the ``ldconfig -p`` process it starts (see `dsh_host._cli._pthread`), and
the modules it imports for TLS, DTLS and child processes run on their first use (see
`dsh_host._cli._deferred`).
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn

from .. import _attrs_code
from .._gc import pause
from . import _deferred, _pthread

__all__ = ["command"]


def command() -> NoReturn:
    """Run ``dsh`` with `sys.argv` and exit with its status."""
    status: list[int | None] = [None]
    atexit.register(_exit_now, status)  # first registered: runs after every other handler
    pause()  # resumed once the host is built (`dsh_host._gc`)
    _attrs_code.install()  # if `dsh_host` did not already (`_attrs_code.console`)
    atexit.register(_attrs_code.save)  # runs before `_exit_now`
    # trio's TLS and process modules run on first use; trio asks `_pthread` when imported: no
    # ``ldconfig -p`` process
    with _deferred.deferred(), _pthread.answered():
        import trio  # noqa: F401  (what `dsh_host` imports first; only it is answered so)
    from ._main import main

    status[0] = main()
    sys.exit(status[0])


def _exit_now(status: list[int | None]) -> None:
    code = status[0]
    if code is None:
        return  # main raised: the interpreter reports it and exits as usual
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not stream.closed:  # as the interpreter skips it
                stream.flush()
        except Exception:
            code = 120  # what the interpreter exits with when it cannot flush at exit
    os._exit(code)
