"""The value model: errors, JSON freezing, text, values, decisions, the abort signal, views,
outcomes and traces.

The bottom layer. It owns every frozen value a call is made of and imports nothing of dsh.
"""
