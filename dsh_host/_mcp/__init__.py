"""`dsh mcp serve`: the gated tools served to MCP clients over stdio or HTTP, through the official
SDK, with the wire read and checked by dsh first.

A face: it sits on top of the core and uses only its public names. Its one entry is
`run_serve_command`, which the command line (the layer above) calls for ``dsh mcp serve``;
nothing else of the face is imported from outside it.
"""

from ._service import run_serve_command

__all__ = ["run_serve_command"]
