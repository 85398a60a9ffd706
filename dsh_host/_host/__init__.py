"""The composition root: configuration, plugin loading, and ``Host``, which builds the pipeline
and hands it to the registry.

May import every layer below it (``_pipeline``, ``_registry``, ``_schema``, ``_model``).
"""
