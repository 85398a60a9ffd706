"""Mounting MCP servers: one session per configured server and its tools as dsh tools.

Helpers of the ``mcp`` plugin; import ``_hooks``, ``_sandbox`` and public ``dsh_host`` names.
"""
