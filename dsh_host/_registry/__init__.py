"""The registry: the plugin manager and hook implementations (``_hooks``), and the tools by
scope with their restrictions and guards (``_registry``).

May import ``_schema`` and ``_model``. It does not run calls: the pipeline does.
"""
