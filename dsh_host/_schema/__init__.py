"""Schemas: the parameter DSL, attrs parameters, the structured-output subset, validation and
``ToolDefinition``.

Owns what a tool *is* and how its arguments are checked (compiled once per tool). May import
``_model`` only.
"""
