"""The built-in tools: file tools, bash, glob and grep (ripgrep), directory walking, and the
presenters that turn calls and results into views.

Helpers of the ``tools`` plugin; import ``_sandbox``, ``_common`` and public ``dsh_host`` names.
"""
