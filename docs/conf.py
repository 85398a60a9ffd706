"""Sphinx configuration: MyST Markdown pages, API and hook reference from docstrings."""

from __future__ import annotations

project = "dsh"
author = "dsh developers"
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]
source_suffix = {".md": "markdown"}
myst_enable_extensions = ["colon_fence", "deflist"]
exclude_patterns = ["_build"]
html_theme = "furo"
default_role = "py:obj"
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
# Builds run offline (no intersphinx inventories), so references to the standard library and
# to trio are plain text; `type` in a signature names the builtin, not a field called `type`.
suppress_warnings = ["ref.python"]
