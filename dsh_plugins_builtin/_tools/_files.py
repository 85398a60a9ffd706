"""The file tools: ``read_file``, ``write_file``, ``edit_file`` and ``list_dir``.

They touch paths only through the `Sandbox` their plugin hands out: every read is fenced and
opened beneath its root following no symlink, every write is fenced twice (once up front for a
clean error, once right before the atomic rename) and published by a rename in the held parent
directory.

``read_file`` is an async body that fences, opens and reads a small file (at most
`INLINE_READ_BYTES`, by ``fstat``) right on the event loop: a few syscalls on a descriptor
opened beneath a pinned root cost less than a worker-thread round trip, and a FIFO or device
is refused before any read (it is not a regular file; opened ``O_NONBLOCK``). A larger file
(or one that grew past the limit while it was read) is read again, fenced afresh, in a worker
thread, in chunks. ``list_dir`` is a synchronous body (the host runs it in a worker thread).
``write_file`` and ``edit_file`` are async bodies around a worker thread, so that:

* writes to one resolved path are serialised inside the host (``env.path_lock``), whichever
  entry point the calls came through;
* ``edit_file`` replaces the file only if it is still the one it read (device, inode, size,
  mtime and ctime): an edit from another process in between is ``EDIT_CONFLICT``;
* a write is either committed, and its result says so even when a deadline passed meanwhile
  (`dsh_plugins_builtin._common._commit`), or not made at all when the call reports an error.
"""

from __future__ import annotations

from dsh_host import ToolDefinition
from dsh_plugins_builtin._tools._listing import list_dir_tool
from dsh_plugins_builtin._tools._read import INLINE_READ_BYTES, read_file_tool
from dsh_plugins_builtin._tools._support import ToolEnv
from dsh_plugins_builtin._tools._write import edit_file_tool, write_file_tool

__all__ = ["INLINE_READ_BYTES", "make_file_tools"]


def make_file_tools(env: ToolEnv) -> list[ToolDefinition]:
    """The four file tools, bound to ``env`` (the ``tools`` plugin)."""
    return [read_file_tool(env), write_file_tool(env), edit_file_tool(env), list_dir_tool(env)]
