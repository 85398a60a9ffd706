"""The registry: pluggy's markers (``_markers``), the plugin manager and per-call hook dispatch
(``_hooks``), and the tool table by scope with its restrictions and guards (``_registry``,
`ToolTable`).

May import ``_schema`` and ``_model``. It does not run calls: the public ``ToolRegistry`` (in
``_host``) is the table with the pipeline handed to it. The hook specifications are handed to
``make_plugin_manager`` by the host, not imported here.
"""
