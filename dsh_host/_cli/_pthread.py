"""trio's import without the ``ldconfig -p`` process it starts (issue 27).

trio names its worker threads through ``pthread_setname_np``, and finds the library that holds
it when it is imported, with ``ctypes.util.find_library("pthread")``: on Linux that runs
``/sbin/ldconfig -p`` and reads its whole output, a process (about a millisecond, more on a
loaded machine) in every ``dsh`` start, whether a thread is ever started or not. Since glibc
2.34 ``libpthread.so.0`` is an empty stub and every pthread function is in ``libc.so.6``, which
the interpreter has loaded already: there the console script (`answered`) answers that one
question, while it imports trio, with ``libc.so.6``, so trio names its threads as before. Any other name, another C
library or an older glibc asks ``ldconfig`` as usual. Only the console script installs it;
``dsh_host`` imported as a library never does.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Final

__all__ = ["LIBC", "answered", "pthread_in_libc"]

LIBC: Final = "libc.so.6"


def pthread_in_libc(version: str | None) -> bool:
    """Whether the C library *version* (``os.confstr("CS_GNU_LIBC_VERSION")``) is a glibc
    that holds the pthread functions itself (2.34 and later)."""
    name, _, number = (version or "").partition(" ")
    parts = number.split(".")
    if name != "glibc" or len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return False
    return (int(parts[0]), int(parts[1])) >= (2, 34)


@contextlib.contextmanager
def answered() -> Iterator[bool]:
    """While in the block, ``find_library("pthread")`` is answered with ``libc.so.6`` where that
    is where it is (whether it is, the value); the real function is put back after it, so
    nothing but trio's import (in the block) is ever answered so."""
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        version = None
    if not pthread_in_libc(version):
        yield False
        return
    import ctypes.util

    real = ctypes.util.find_library

    def find_library(name: str) -> str | None:
        return LIBC if name == "pthread" else real(name)

    ctypes.util.find_library = find_library
    try:
        yield True
    finally:
        ctypes.util.find_library = real
