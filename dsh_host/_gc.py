"""The cyclic garbage collector, paused while a ``dsh`` process starts (issue 27).

Starting is imports and the host's start: objects that live as long as the process, which the
collector would scan again and again as they pile up (about a twentieth of a cold ``dsh``).
The console script pauses it before its first import (``dsh_host``'s ``__init__``, when
`~dsh_host._attrs_code.console` recognises the process, else `~dsh_host._cli._entry.command`);
the host's construction (``build_host``) and the delegated commands resume it: what exists
then is frozen (never scanned again, as `gc.freeze` does before a fork) and collection goes on
for the command itself, however long it runs (``dsh mcp serve``). `main` called in-process (tests,
embedding) never pauses it, so `resume` does nothing there.
"""

from __future__ import annotations

import gc

__all__ = ["pause", "resume"]

_paused = [False]  # `pause` stopped the collector and nothing resumed it yet


def pause() -> None:
    """Stop the collector until `resume` (if it runs: an embedder's choice is left alone)."""
    if gc.isenabled():
        gc.disable()
        _paused[0] = True


def resume() -> None:
    """Collect garbage again if `pause` stopped it, with what exists now frozen."""
    if _paused[0]:
        _paused[0] = False
        gc.freeze()
        gc.enable()
