"""Sphinx configuration: MyST Markdown pages, API and hook reference from docstrings."""

from __future__ import annotations

project = "dsh"
author = "dsh developers"
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
]
source_suffix = {".md": "markdown"}
myst_enable_extensions = ["colon_fence", "deflist"]
exclude_patterns = ["_build"]
html_theme = "furo"
default_role = "py:obj"
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
intersphinx_mapping = {
    "python": ("https://docs.python.org/3", None),
    "trio": ("https://trio.readthedocs.io/en/stable", None),
    "attrs": ("https://www.attrs.org/en/stable", None),
    "pluggy": ("https://pluggy.readthedocs.io/en/stable", None),
}
