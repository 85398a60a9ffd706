"""Claude Code hook commands: the payloads they read, how they are launched (confined) and how
their processes are supervised.

Helpers of the ``hook_commands`` and ``mcp`` plugins; import ``_sandbox`` and public ``dsh_host``
names.
"""
