"""Development sessions: ``nox -s tests``, ``lint``, ``typing``, ``docs``, ``bench``, ``soak``."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typing"]
nox.options.default_venv_backend = "venv"

PACKAGES = ["dsh_host", "dsh_plugins_builtin"]


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (what CI runs)."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def soak(session: nox.Session) -> None:
    """The load, fault and fuzz suite at full size (100,000 calls; minutes, not seconds)."""
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "soak", *session.posargs, env={"DSH_SOAK": "full"})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and format check; the import contract (``lint-imports``, pyproject.toml)."""
    session.install("ruff", "-e", ".[lint]")
    session.run("ruff", "check", *PACKAGES, "tests", "noxfile.py", "bench")
    session.run("ruff", "format", "--check", *PACKAGES, "tests", "noxfile.py", "bench")
    session.run("lint-imports")


@nox.session
def typing(session: nox.Session) -> None:
    """mypy --strict over both packages."""
    session.install("-e", ".[test]", "mypy")
    session.run("mypy")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the Sphinx docs, warnings as errors."""
    session.install("-e", ".[docs]")
    session.run("sphinx-build", "-W", "-b", "html", "docs", "docs/_build/html")


@nox.session
def bench(session: nox.Session) -> None:
    """The hot path, as ratios to a bare await, pluggy and peers; ``-- --check``: every bench
    script's figures against issue 27's targets, as one table (``bench/check.py``)."""
    session.install("-e", ".[bench]")
    session.run("python", "bench/check.py", *session.posargs)
