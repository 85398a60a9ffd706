"""pluggy's markers for project ``dsh`` and the names plugins are found by.

Its own module so `dsh_host.hookspecs` can import the ``hookspec`` marker without importing the
plugin manager that loads those specs (`._hooks`): the arrow runs one way.
"""

from __future__ import annotations

import pluggy

__all__ = ["ENTRY_POINT_GROUP", "IDLE_HOOKS", "LAST_LINKS", "PROJECT", "hookimpl", "hookspec"]

PROJECT = "dsh"
ENTRY_POINT_GROUP = "dsh.plugins"
IDLE_HOOKS = "dsh_idle_hooks"
"""A plugin attribute: names of its per-call hooks that its configuration turned off.

Set it in ``dsh_host_started`` (``self.dsh_idle_hooks = {"dsh_tool_post_execute"}``): the
pipeline then never calls those implementations, so a plugin configured off costs nothing per
call. It is read when the host collects the implementations (after start-up, and again whenever
a plugin is registered or unregistered).
"""

LAST_LINKS = "dsh_last_links"
"""A plugin attribute: hook name -> a plain function the host calls *instead of* the plugin's
waterfall link for that hook whenever no implementation of the hook is called after it.

Such a link's ``call_next`` can only answer the host's default (``Allow``, ``Accept``); a plugin
that knows what its link then returns offers it as a function of the hook's other arguments
(``{"dsh_tool_pre_execute": self.decide_alone}``: ``decide_alone(execution)``), which the
pipeline calls like any plain hook, with no ``call_next`` made. It must answer what the link
would: the same decision, or ``None`` where the link would pass the call on. Read when the host
collects the implementations, as `IDLE_HOOKS` is.
"""

hookspec = pluggy.HookspecMarker(PROJECT)
"""Marker for hook specifications (used by `dsh_host.hookspecs`)."""

hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marker for hook implementations: ``@hookimpl`` / ``@hookimpl(tryfirst=True)``."""
