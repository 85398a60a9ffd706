"""``python -m dsh_host``: the ``dsh`` command line."""

from __future__ import annotations

from ._cli._entry import command

command()
