"""The value model: errors, JSON freezing, text, content and results, decisions, scopes and calls,
the abort signal, views, outcomes and traces.

The bottom layer. It owns every frozen value a call is made of and imports nothing of dsh; where a
value refers to something above (a tool), it names a protocol (``ToolLike``).
"""
