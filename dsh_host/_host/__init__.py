"""The composition root: configuration (``_config``, ``_checking``), plugin selection and loading
(``_plugins``, ``_loading``, the entry-point cache ``_entrypoints``), presenters (``_present``),
the public ``ToolRegistry`` (``_registry``: it builds the pipeline and hands it the tool table)
and ``Host``.

May import every layer below it (``_pipeline``, ``_registry``, ``_schema``, ``_model``).
"""
