"""The ``approval`` plugin: answers an ``Ask`` on the terminal, or with a fixed answer.

::

    [plugin.approval]
    mode = "auto"     # "terminal", "static", or "auto": terminal when stdin is a TTY, else static
    answer = "deny"   # the static answer: "allow" or "deny"

On a terminal it shows the tool, the asker's reason and every argument in full: one
``key: value`` per line, wrapped at the terminal's width and never cut, with control characters
and escape sequences shown escaped and long runs of spaces counted, so what a person approves is
what runs. Arguments longer than a screen are summarised ("N more characters, press v to view
all") and ``v`` shows them whole. It asks ``allow [o]nce / [a]lways / for this [r]un /
[d]eny``; an empty line or end of input denies. *Always* allows the call once and appends the
narrowest rules that cover it (``bash(ls:*)``, shown in the question) to ``[plugin.permissions]
allow`` of the config file the host was started with; they apply from the next start. It is
offered only when there is such a file and a rule narrower than the whole tool covers the call,
and refused, with the reason, and the question asked again, when that file is protected from
this user or is not a regular file. *Allow for this run* remembers the call's fingerprint, the tool name together with the
canonical JSON of its arguments, so the same call is allowed again without asking and a
changed argument asks again.

Its ``dsh_tool_approve`` is ``trylast``: approvers from other plugins are asked first. Under
``dsh mcp serve`` the MCP client is the approver: in ``terminal`` and ``auto`` modes this plugin
abstains there (stdin carries the protocol), so the person at the client is asked by
elicitation; only an explicit ``mode = "static"`` still answers for everyone.
"""

from __future__ import annotations

import shutil
import sys
import threading
from typing import Literal, Protocol, final

import attrs
import trio

from dsh_host import (
    ApprovalOutcome,
    ApprovalRequest,
    ConfigError,
    Host,
    TrustedConfigs,
    arguments_lines,
    canonical_json,
    hookimpl,
    printable,
)

from ._common._rulefile import RuleFileError, add_allow_rules

__all__ = [
    "ApprovalConfig",
    "ApprovalPlugin",
    "LineSource",
    "TextSink",
    "arguments_lines",
    "preview",
]

PREVIEW_CHARS = 200
"""How many characters of the arguments' JSON the prompt shows."""

MCP_CLIENT = "mcp_client"
"""The approver ``dsh mcp serve`` registers (the person at the MCP client, by elicitation). While
it is registered, ``terminal`` and ``auto`` modes yield to it: stdin carries the protocol."""

SCREEN_LINES = 20
"""How many lines of arguments the prompt shows before summarising the rest (``v`` shows all)."""
_ANSWERS = {
    "o": ApprovalOutcome.ALLOWED_ONCE,
    "once": ApprovalOutcome.ALLOWED_ONCE,
    "allow": ApprovalOutcome.ALLOWED_ONCE,
    "a": "always",
    "always": "always",
    "y": ApprovalOutcome.ALLOWED_ONCE,
    "yes": ApprovalOutcome.ALLOWED_ONCE,
    "r": "run",
    "run": "run",
    "v": "view",
    "view": "view",
    "d": ApprovalOutcome.REJECTED,
    "deny": ApprovalOutcome.REJECTED,
    "n": ApprovalOutcome.REJECTED,
    "no": ApprovalOutcome.REJECTED,
    "": ApprovalOutcome.REJECTED,
}


class LineSource(Protocol):
    """What the prompt reads answers from: ``sys.stdin``, or a fake in tests."""

    def readline(self) -> str: ...


class TextSink(Protocol):
    """What the prompt writes to: ``sys.stderr``, or a fake in tests."""

    def write(self, text: str, /) -> object: ...

    def flush(self) -> object: ...


@final
@attrs.frozen
class ApprovalConfig:
    """The ``[plugin.approval]`` table.

    Attributes:
        mode: ``terminal`` prompts on the terminal; ``static`` answers every ask with
            ``answer``; ``auto`` prompts when stdin is a TTY and is static otherwise.
        answer: the static answer, ``allow`` or ``deny``.
    """

    mode: Literal["auto", "terminal", "static"] = "auto"
    answer: Literal["allow", "deny"] = "deny"


@final
class _Slot:
    """One prompt's claim on the next line of input (shared with reader threads)."""

    def __init__(self) -> None:
        self.line: str | None = None
        self.closed = False
        self.ready = threading.Event()


@final
class _LineReader:
    """Hands lines of a blocking stream to prompts, one reader thread at a time.

    A prompt waits in a worker thread that trio may abandon (on abort). The abandoned thread
    stays blocked in ``readline``, so a later prompt does not start a second reader: the line
    goes to whichever prompt is showing when it arrives, and a line typed while no prompt is
    showing is dropped, so an answer is never applied to a call the user did not see.
    """

    def __init__(self, stream: LineSource) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._reading = False
        self._current: _Slot | None = None

    def claim(self) -> _Slot:
        slot = _Slot()
        with self._lock:
            self._current = slot
        return slot

    def release(self, slot: _Slot) -> None:
        with self._lock:
            slot.closed = True
            slot.ready.set()  # an abandoned waiter returns instead of waiting for ever
            if self._current is slot:
                self._current = None

    def wait(self, slot: _Slot) -> str:
        """Block (in a worker thread) until *slot* has a line; read it if nobody else is."""
        while True:
            with self._lock:
                if slot.line is not None:
                    return slot.line
                if slot.closed:
                    return ""
                read = not self._reading
                self._reading = True
            if not read:
                slot.ready.wait()
                continue
            try:
                line = self._stream.readline()
            except (OSError, ValueError):
                line = ""
            with self._lock:
                self._reading = False
                target = self._current
                if target is not None:
                    target.line = line
                    target.ready.set()


def preview(arguments: object, limit: int = PREVIEW_CHARS) -> str:
    """The whole canonical JSON of *arguments*, safe to print (nothing is cut)."""
    return printable(canonical_json(arguments))


@final
class ApprovalPlugin:
    """Answers ``dsh_tool_approve`` on a terminal or statically (see the module docstring).

    Args:
        stdin: where answers are read (default: ``sys.stdin`` at the time of the prompt).
        stdout: where prompts are written (default: ``sys.stderr``).
        isatty: override whether *stdin* is a terminal, for ``mode = "auto"``.
        width: the columns to wrap arguments at (default: the terminal's).
    """

    name = "approval"

    def __init__(
        self,
        stdin: LineSource | None = None,
        stdout: TextSink | None = None,
        *,
        isatty: bool | None = None,
        width: int | None = None,
    ) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self._isatty = isatty
        self._width = width
        self._config = ApprovalConfig()
        self._reader: _LineReader | None = None
        self._lock = trio.Lock()
        self._remembered: set[tuple[str, str]] = set()
        self._host: Host | None = None
        self._source: str | None = None  # the config file the host was started with

    @hookimpl
    def dsh_plugin_config(self) -> type[ApprovalConfig]:
        return ApprovalConfig

    @hookimpl
    def dsh_host_started(self, host: Host) -> None:
        self._config = host.config_for(self)
        self._host = host
        self._source = host.config.source

    def _client_approves(self) -> bool:
        """Whether ``dsh mcp serve`` put its MCP client in as the approver (`MCP_CLIENT`)."""
        host = self._host
        return host is not None and host.pm.get_plugin(MCP_CLIENT) is not None

    @property
    def mode(self) -> Literal["terminal", "static"]:
        """The mode in effect: ``auto`` resolved against whether stdin is a terminal."""
        if self._config.mode != "auto":
            return self._config.mode
        return "terminal" if self._stdin_is_tty() else "static"

    def _stdin_is_tty(self) -> bool:
        if self._isatty is not None:
            return self._isatty
        isatty = getattr(self._stdin or sys.stdin, "isatty", None)
        try:
            return callable(isatty) and bool(isatty())
        except (OSError, ValueError):  # e.g. a closed stream
            return False

    @hookimpl(trylast=True)
    async def dsh_tool_approve(self, request: ApprovalRequest) -> ApprovalOutcome | None:
        if request.signal.aborted:
            return ApprovalOutcome.CANCELLED
        allow = self._config.answer == "allow"
        if self._config.mode != "static" and self._client_approves():
            return None  # under `dsh mcp serve` the person at the client decides
        if self._config.mode == "static":
            return ApprovalOutcome.ALLOWED_ONCE if allow else ApprovalOutcome.REJECTED
        if not self._stdin_is_tty():
            # No terminal to ask on (CI, a pipe, the MCP transport): the ask is unavailable,
            # hence denied, unless the config answers it.
            return ApprovalOutcome.ALLOWED_ONCE if allow else ApprovalOutcome.UNAVAILABLE
        fingerprint = (request.tool, canonical_json(request.arguments))
        if fingerprint in self._remembered:
            out = self._stdout or sys.stderr
            out.write(f"dsh: tool {printable(request.tool)!r} allowed for this run (remembered)\n")
            return ApprovalOutcome.ALLOWED_ONCE
        outcome = ApprovalOutcome.CANCELLED
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                await request.signal.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            async with self._lock:  # one prompt at a time
                outcome = await self._prompt(request, fingerprint)
            nursery.cancel_scope.cancel()
        return outcome

    async def _prompt(
        self, request: ApprovalRequest, fingerprint: tuple[str, str]
    ) -> ApprovalOutcome:
        out = self._stdout or sys.stderr
        if fingerprint in self._remembered:  # answered while this one waited for its turn
            out.write(f"dsh: tool {printable(request.tool)!r} allowed for this run (remembered)\n")
            return ApprovalOutcome.ALLOWED_ONCE
        lines, shown = self._card(request)
        full = len(shown) <= SCREEN_LINES
        # "always" writes a rule to the config file: offered only when there is one to write
        # to and a rule narrower than the whole tool (else it could only be refused)
        rules = _narrowest(request) if self._source is not None else None
        always = f"[a]lways ({', '.join(printable(r) for r in rules)}) / " if rules else ""
        view = "" if full else " / [v]iew all"
        question = f"allow [o]nce / {always}for this [r]un / [d]eny{view} (default: deny): "
        letters = ("o, a, r" if rules else "o, r") + (" or d" if full else ", d or v")
        out.write("\n".join(lines) + "\n")
        if self._reader is None:
            self._reader = _LineReader(self._stdin or sys.stdin)
        reader = self._reader
        while True:
            out.write(question)
            out.flush()
            slot = reader.claim()
            try:
                line = await trio.to_thread.run_sync(reader.wait, slot, abandon_on_cancel=True)
            except trio.Cancelled:
                out.write("(cancelled)\n")
                raise
            finally:
                reader.release(slot)
            answer = _ANSWERS.get(line.strip().lower())
            if not line:  # end of input
                out.write("\n")
                answer = ApprovalOutcome.REJECTED
            if answer == "view":
                out.write("  arguments, in full:\n" + "\n".join(shown) + "\n")
                continue
            if answer == "always" and rules:
                if self._always(rules, out):
                    return ApprovalOutcome.ALLOWED_ONCE
                continue
            if answer == "run":
                self._remembered.add(fingerprint)
                out.write(f"dsh: tool {printable(request.tool)!r} allowed for this run\n")
                return ApprovalOutcome.ALLOWED_ONCE
            if isinstance(answer, ApprovalOutcome):
                return answer
            out.write(f"  please answer {letters}\n")

    def _card(self, request: ApprovalRequest) -> tuple[list[str], list[str]]:
        """The lines shown before the question (the arguments cut at a screen), and all of
        the arguments' lines (``v`` shows them)."""
        lines = [f"dsh: tool {printable(request.tool)!r} asks for approval"]
        if request.reason:
            asker = f" ({printable(request.asked_by)})" if request.asked_by else ""
            lines.append(f"  reason{asker}: {printable(request.reason)}")
        width = self._width or shutil.get_terminal_size((100, 24)).columns
        shown = arguments_lines(request.arguments, width)
        lines += ["  arguments:", *shown[:SCREEN_LINES]]
        if len(shown) > SCREEN_LINES:
            rest = sum(len(line) for line in shown[SCREEN_LINES:])
            lines.append(f"  … {rest} more characters, press v to view all")
        return lines, shown

    def _always(self, rules: tuple[str, ...], out: TextSink) -> bool:
        """Write *rules* to the config file; say what was done, or why not (then ``False``)."""
        source = self._source
        try:
            if source is None:
                added = add_allow_rules(source, rules)
            else:  # the rule is the user's own answer: a trusted file stays trusted
                added, _ = TrustedConfigs().retrust(source, lambda: add_allow_rules(source, rules))
        except (RuleFileError, OSError) as exc:
            out.write(f"  cannot always allow: {printable(str(exc))}\n")
            return False
        except ConfigError as exc:
            out.write(f"  cannot always allow: {printable(str(exc))}\n")
            return False
        shown = ", ".join(printable(rule) for rule in added) or "nothing new"
        out.write(
            f"dsh: allowed once; added {shown} to [plugin.permissions] allow in "
            f"{printable(str(self._source))} (applies from the next start)\n"
        )
        return True


def _narrowest(request: ApprovalRequest) -> tuple[str, ...] | None:
    """The narrowest rules that allow *request* (`narrowest_rules`; the rules parser is
    imported only when a person is asked)."""
    from ._rules._suggest import narrowest_rules

    return narrowest_rules(request.tool, request.arguments)
