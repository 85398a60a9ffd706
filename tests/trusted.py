"""Writing a config file as its user: written, then trusted (`dsh_host.TrustedConfigs`).

dsh reads a ``dsh.toml`` it finds in the working directory only once the user trusted what it
holds (``dsh config trust``); a test that plays the user writes its config with `write_config`.
A test that plays someone else (a cloned project's author, a tool that rewrites the file)
writes it plainly, and the file is then not read.
"""

from __future__ import annotations

import pathlib

from dsh_host import TrustedConfigs

__all__ = ["trust", "write_config"]


def write_config(path: pathlib.Path, text: str) -> pathlib.Path:
    """Write *text* to *path* and trust it; returns *path*."""
    path.write_text(text)
    return trust(path)


def trust(path: pathlib.Path) -> pathlib.Path:
    """Trust what *path* holds now; returns *path*."""
    TrustedConfigs().trust(path)
    return path
