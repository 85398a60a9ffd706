"""Keeping plugin faults inside their call: real interrupts, hung hooks, blocked event loops.

Three questions the pipeline asks whenever plugin code raised something:

- Is a `trio.Cancelled` (or a group of them) the caller's own cancellation? Only then does it
  propagate: `caller_cancelled` asks trio whether the calling context is cancelled, at a
  checkpoint. A ``Cancelled`` a plugin raised or leaked while nobody cancelled the call is a
  plugin failure like any other.
- Is a `KeyboardInterrupt` a real Ctrl-C? Under ``trio.run`` a real SIGINT is raised by trio's
  own signal handler or delivered by trio's run loop, so its innermost traceback frame is in
  trio itself (`real_interrupt`). One raised by a plugin (``raise KeyboardInterrupt``) has the
  plugin's frame there and is contained. A real one always propagates, so Ctrl-C stops the
  process cleanly.
- Is a synchronous hook blocking the event loop? It cannot be pre-empted, so one watchdog
  thread per process looks at what each pipeline is running synchronously and reports a hook
  still running past its bound on stderr, once per plugin and hook (`Watchdog`).

Hand-written because no library answers these for trio: they depend on trio's internals being
where the interrupt came from, and on the pipeline's own bookkeeping.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from typing import IO, final

import trio

from .._model._errors import PluginFailure

__all__ = [
    "HookTimeout",
    "Watchdog",
    "caller_cancelled",
    "is_cancellation",
    "real_interrupt",
    "seconds",
]

_TRIO_DIR = os.path.dirname(trio.__file__) + os.sep


class HookTimeout(Exception):
    """A hook did not answer within its bound; the message says which bound."""


def seconds(value: float) -> str:
    """``30 s``, ``0.5 s``: a bound as people read it."""
    return f"{value:g} s"


def _late(plugin: str, hook: str, limit: float) -> HookTimeout:
    return HookTimeout(f"{plugin} did not answer {hook} within {seconds(limit)}")


def is_cancellation(exc: BaseException) -> bool:
    """Whether *exc* is a `trio.Cancelled`, or a group made only of them."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(is_cancellation(inner) for inner in exc.exceptions)
    return False


async def caller_cancelled() -> bool:
    """Whether the calling context is cancelled (so a ``Cancelled`` seen now is genuine)."""
    try:
        await trio.lowlevel.checkpoint_if_cancelled()
    except trio.Cancelled:
        return True
    return False


def real_interrupt(exc: BaseException) -> bool:
    """Whether *exc* is (or holds) a `KeyboardInterrupt` that trio raised for a real SIGINT."""
    if isinstance(exc, BaseExceptionGroup):
        return any(real_interrupt(inner) for inner in exc.exceptions)
    if not isinstance(exc, KeyboardInterrupt):
        return False
    tb = exc.__traceback__
    if tb is None:
        return True  # raised by C code (Python's default handler): not a plugin's raise
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename.startswith(_TRIO_DIR)


async def genuine(exc: BaseException) -> bool:
    """Whether *exc*, raised out of plugin code, must propagate instead of being contained."""
    if real_interrupt(exc):
        return True
    return is_cancellation(exc) and await caller_cancelled()


@final
class Watchdog:
    """What one pipeline is running synchronously now, watched by a process-wide thread.

    The pipeline calls `enter` before a synchronous hook and `leave` after; `check` (run by the
    thread every fraction of a second) reports a hook still running after *bound* seconds.
    """

    def __init__(self, bound: float, stream: IO[str] | None = None) -> None:
        self.bound = bound
        self.stream = stream
        self.plugin: str | None = None
        self.hook = ""
        self.tool = ""
        self.started = 0.0
        self.reported: set[tuple[str, str]] = set()
        self.registered = False
        """Whether the watchdog thread watches this one (from the first `enter` on)."""

    def enter(self, plugin: str, hook: str, tool: str) -> None:
        self.plugin, self.hook, self.tool = plugin, hook, tool
        self.started = time.monotonic()
        if not self.registered:
            self.registered = True
            _THREAD.watched.add(self)
            _THREAD.start()

    def leave(self) -> float:
        """Mark the hook finished; return how long it ran, in seconds."""
        self.plugin = None
        return time.monotonic() - self.started

    def overran(self, plugin: str, hook: str, ran: float) -> PluginFailure:
        """*plugin*'s synchronous *hook* answered *ran* seconds after it started, past the bound:
        report it as the watching thread would have (it may have looked too seldom to see it;
        still once per plugin and hook), and the failure the hook ends with (fail closed)."""
        self.plugin = plugin
        try:
            self.check(self.started + ran)
        finally:
            self.plugin = None
        return PluginFailure(plugin, hook, _late(plugin, hook, self.bound))

    def check(self, now: float | None = None) -> str | None:
        """Report the running hook if it has run past the bound; return the report."""
        plugin = self.plugin
        if plugin is None:
            return None
        now = time.monotonic() if now is None else now
        ran = now - self.started
        if ran < self.bound or (plugin, self.hook) in self.reported:
            return None
        self.reported.add((plugin, self.hook))
        message = (
            f"dsh: warning: plugin {plugin!r} has blocked the event loop for {ran:.1f} s in "
            f'its synchronous {self.hook} (tool "{self.tool}"); nothing else runs meanwhile. '
            "Synchronous hooks must not block: make it async and move blocking work to "
            "trio.to_thread.run_sync."
        )
        stream = self.stream or sys.stderr
        try:
            stream.write(message + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass
        return message


@final
class _WatchThread:
    """The one daemon thread that checks every live `Watchdog`."""

    interval = 0.25

    def __init__(self) -> None:
        self.watched: weakref.WeakSet[Watchdog] = weakref.WeakSet()
        self.started = False
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self.started:
                return
            self.started = True
            threading.Thread(target=self._run, name="dsh-watchdog", daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            for watchdog in list(self.watched):
                watchdog.check()


_THREAD = _WatchThread()
