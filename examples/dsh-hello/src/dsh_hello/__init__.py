"""dsh-hello: an example dsh plugin distribution (a tool plugin and a policy plugin)."""

from __future__ import annotations

__version__ = "0.1.0"
