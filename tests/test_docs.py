"""Docs that are executed: every ``console`` example in README.md, docs/tutorial.md and
docs/guides/*.md is run, and its shown output is compared with the real one.

The conventions, for whoever writes docs:

* Only fenced blocks tagged ```` ```console ```` are run. An illustrative block that is not meant
  to run (a sketch, a command needing a terminal or a network, a long-running server) is fenced
  ```` ```sh ```` (commands) or ```` ```text ```` (output); those are never executed.
* In a console block, a line starting with ``$ `` is a command; the lines after it, up to the
  next command, are what it prints (stdout and stderr together, as a terminal shows them, with
  ``NO_COLOR=1``). A line holding only ``...`` stands for any number of lines. A command
  followed by no lines must print nothing.
* ``<!-- file: NAME -->`` on the line before a fenced block (toml, json, ...) writes the block
  to ``NAME`` in the working directory when the page reaches it, as a reader would save it.
* Each page runs in its own fresh environment: a temporary working directory holding a copy of
  ``README.md`` and ``examples/``, a clean environment (no ``DSH_*`` variables, a private
  ``HOME`` and XDG directories), this interpreter, whose only ``dsh.plugins`` distribution is
  dsh-host itself (the built-ins), and an empty site directory on ``PYTHONPATH`` that the page's
  own ``pip install`` commands install into (``--no-deps --target``). Blocks run in page order,
  each starting in the working directory; ``cd`` lasts to the end of its block.
* Set-up steps a reader needs but this test's interpreter already is are recognised and not
  re-run: ``python3 -m venv .venv``, ``. .venv/bin/activate``, ``pip install -e .`` (or
  ``'.[test]'``) of this repository, and the README's ``python -m pytest`` (the suite running
  this very test; ``.ci/run`` runs it from scratch).
* Before comparing, both sides are normalised: the working directory reads ``/work/project``,
  durations ``(0.03 ms)`` read ``(N ms)`` and pytest's ``in 0.05s`` reads ``in Ns``, call ids ``call-1f2e3d4c-1`` read ``call-N``.
  Everything else must match exactly.
"""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator

import attrs
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "tutorial.md",
    *sorted((ROOT / "docs" / "guides").glob("*.md")),
]
SHOWN_DIR = "/work/project"
BIN = pathlib.Path(sys.executable).parent


@attrs.frozen
class Command:
    line: int
    text: str
    expected: tuple[str, ...]


@attrs.frozen
class Block:
    line: int
    commands: tuple[Command, ...] = ()
    file: str | None = None
    content: str = ""


_FENCE = re.compile(r"^(`{3,})(.*)$")
_FILE = re.compile(r"^<!-- file: (\S+) -->$")


def blocks(text: str) -> list[Block]:
    """The page's console blocks and file blocks, in order."""
    out: list[Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        marker, info = fence.group(1), fence.group(2).strip()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == marker)
        body = lines[i + 1 : end]
        named = _FILE.match(lines[i - 1].strip()) if i else None
        if named is not None:
            out.append(Block(i + 1, file=named.group(1), content="\n".join(body) + "\n"))
        elif info == "console":
            commands: list[Command] = []
            for k, line in enumerate(body):
                if line.startswith("$ "):
                    commands.append(Command(i + 2 + k, line[2:], ()))
                elif commands:
                    last = commands[-1]
                    commands[-1] = attrs.evolve(last, expected=(*last.expected, line))
                else:
                    raise AssertionError(f"line {i + 2 + k}: console output before any command")
            out.append(Block(i + 1, commands=tuple(commands)))
        i = end + 1
    return out


def test_the_parser_reads_commands_outputs_and_files():
    page = "x\n<!-- file: a.toml -->\n```toml\nk = 1\n```\n```console\n$ a\nout\n...\n$ b\n```\n"
    page += "```sh\n$ never\n```\n"
    assert blocks(page) == [
        Block(3, file="a.toml", content="k = 1\n"),
        Block(6, commands=(Command(7, "a", ("out", "...")), Command(10, "b", ()))),
    ]


# -- running ---------------------------------------------------------------------------------

_SETUP = (
    re.compile(r"^python3? -m venv \.venv$"),
    re.compile(r"^(\.|source) \.venv/bin/activate$"),
)
_SETUP_IN_THE_REPOSITORY = (  # only in the working directory, the copy of this repository
    re.compile(r"^pip install (-e )?(\.|'\.\[test\]')$"),
    re.compile(r"^python -m pytest$"),
)


def _segment(segment: str, site: pathlib.Path, at_root: bool) -> str | None:
    """The shell text to run for one ``&&`` segment; ``None`` for a recognised set-up step."""
    if any(p.match(segment) for p in _SETUP):
        return None
    if at_root and any(p.match(segment) for p in _SETUP_IN_THE_REPOSITORY):
        return None
    if segment.startswith("pip install "):
        words = shlex.split(segment)
        paths = [re.sub(r"\[.*\]$", "", w) for w in words[2:] if not w.startswith("-")]
        quoted = " ".join(shlex.quote(p) for p in paths)
        target, log = shlex.quote(str(site)), shlex.quote(str(site.parent / "pip.log"))
        # pip's own notices (index warnings) are this machine's, not the page's: kept out.
        return (
            f"python -m pip install -q --no-deps --target {target} {quoted} > {log} 2>&1 "
            f"|| (cat {log}; false)"
        )
    return segment


def normalise(text: str, work: pathlib.Path) -> str:
    text = text.replace(str(work.resolve()), SHOWN_DIR).replace(str(work), SHOWN_DIR)
    text = re.sub(r"\(\d+(\.\d+)? ms\)", "(N ms)", text)
    text = re.sub(r" in \d+\.\d+s\b", " in Ns", text)  # pytest's summary line
    return re.sub(r"\bcall-[0-9a-f]+-\d+\b", "call-N", text)


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line by line; an expected ``...`` line matches any number of actual lines."""
    if not expected:
        return not actual
    if expected[0].strip() == "...":
        return any(matches(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and expected[0] == actual[0] and matches(expected[1:], actual[1:])


def environment(home: pathlib.Path, site: pathlib.Path) -> dict[str, str]:
    env = {
        "PATH": f"{BIN}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(home),
        "PYTHONPATH": str(site),
        "NO_COLOR": "1",
        "COLUMNS": "100",
        "LANG": "C.UTF-8",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        # A fresh install has no pytest-asyncio (dsh's test extra has it, for tests/loops); here
        # it would print its unset-loop-scope deprecation in the example project's pytest run.
        "PYTEST_ADDOPTS": "-p no:asyncio",
    }
    for name in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        env[name] = str(home / name.lower())
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONFIG_FILE"):
        if name in os.environ:  # where this machine's packages come from, for pip's builds
            env[name] = os.environ[name]
    return env


def run_page(page: pathlib.Path, tmp: pathlib.Path, home: pathlib.Path) -> list[str]:
    """Run every block of *page*; one message per command whose output differs."""
    work, site = tmp / "project", tmp / "site"
    for path in (work, site):
        path.mkdir()
    shutil.copy(ROOT / "README.md", work / "README.md")
    shutil.copytree(ROOT / "examples", work / "examples", ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", ".pytest_cache", "build", "dist"
    ))  # fmt: skip
    env = environment(home, site)
    problems = []
    name = page.relative_to(ROOT)
    for block in blocks(page.read_text(encoding="utf-8")):
        if block.file is not None:
            (work / block.file).write_text(block.content, encoding="utf-8")
            continue
        cwd = work
        for command in block.commands:
            script = []
            for segment in command.text.split(" && "):
                segment = segment.strip()
                if segment.startswith("cd "):
                    cwd = (cwd / shlex.split(segment)[1]).resolve()
                    continue
                shell = _segment(segment, site, cwd == work)
                if shell is not None:
                    script.append(shell)
            actual: list[str] = []
            if script:
                done = subprocess.run(
                    ["bash", "-c", " && ".join(script)], cwd=cwd, env=env, text=True,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False, timeout=300,
                )  # fmt: skip
                actual = normalise(done.stdout, work).rstrip("\n").split("\n")
                actual = [] if actual == [""] else actual
            expected = [normalise(line, work) for line in command.expected]
            if not matches(expected, actual):
                shown = "\n".join(f"    {line}" for line in actual)
                problems.append(f"{name}:{command.line}: $ {command.text}\n  real output:\n{shown}")
    return problems


def _other_plugin_distributions() -> set[str]:
    eps = importlib.metadata.entry_points(group="dsh.plugins")
    return {ep.dist.name for ep in eps if ep.dist is not None} - {"dsh-host"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_console_examples_print_what_the_page_shows(page, tmp_path, home):
    others = _other_plugin_distributions()
    assert not others, (
        f"the docs show a fresh install, but this environment also has {sorted(others)}; "
        "uninstall them to run this test"
    )
    problems = run_page(page, tmp_path, home)
    assert not problems, "\n\n".join(problems)


@pytest.fixture
def home() -> Iterator[pathlib.Path]:
    """A private HOME outside /tmp: /tmp is one of the sandbox's default writable roots, and a
    user's state directory (the audit database) inside one is warned about, as it should be."""
    parent = pathlib.Path("/var/tmp")
    if not (parent.is_dir() and os.access(parent, os.W_OK)):
        parent = pathlib.Path.home()
    path = pathlib.Path(tempfile.mkdtemp(prefix="dsh-docs-home-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- every python block runs, every table parses (issue 26, rows 6, 7 and 13) --------------------

ALL_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FRAGMENT = "<!-- fragment -->"
"""On the line before a ```` ```python ```` block: a piece of a larger program (a value shown, a
call with ``...`` in it, a script run as a hook), shown but not run."""

_DRIVER = """
import inspect, json, sys, traceback, trio
namespace = {"__name__": "__docs__"}
for line, code in json.loads(sys.stdin.read()):
    try:
        exec(compile(code, f"block at line {line}", "exec"), namespace)
        for name, test in list(namespace.items()):
            if name.startswith("test_") and callable(test) and not inspect.signature(test).parameters:
                del namespace[name]
                trio.run(test) if inspect.iscoroutinefunction(test) else test()
    except BaseException:
        print(f"line {line}:", traceback.format_exc(limit=-3), file=sys.stderr)
        sys.exit(1)
"""


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line, code) of every ```` ```python ```` block not marked a fragment, in page order."""
    lines = text.split("\n")
    found = []
    for i, line in enumerate(lines):
        if line.strip() == "```python" and (i == 0 or lines[i - 1].strip() != _FRAGMENT):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            found.append((i + 1, "\n".join(lines[i + 1 : end])))
    return found


@pytest.mark.parametrize(
    "page",
    [p for p in ALL_PAGES if python_blocks(p.read_text(encoding="utf-8"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_python_blocks_run(page, tmp_path, home):
    """Each page's python blocks run in order in one namespace (in a fresh directory, with a
    private HOME); a ``test_*`` function without parameters that a block defines is called."""
    import json

    done = subprocess.run(
        [sys.executable, "-c", _DRIVER], input=json.dumps(python_blocks(page.read_text())),
        cwd=tmp_path, env=environment(home, tmp_path), text=True, capture_output=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{page.relative_to(ROOT)}: {done.stderr}"


def _cells(row: str) -> list[str]:
    """The cells of a Markdown table row: ``|`` splits, except escaped or inside backticks."""
    cells, cell, code = [], "", False
    text = row.strip()
    text = text[1:] if text.startswith("|") else text
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cell += text[i : i + 2]
            i += 2
            continue
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += ch
        i += 1
    if cell.strip():
        cells.append(cell.strip())
    return cells


def table_problems(text: str) -> list[str]:
    """Every table must be a header, a ``|---|`` line and rows of as many cells, ended by a blank
    line (a line of text inside a table is what a paste into it looks like)."""
    problems: list[str] = []
    lines = text.split("\n")
    fenced, i = False, 0
    while i < len(lines):
        if lines[i].startswith("```"):
            fenced = not fenced
        if fenced or not lines[i].startswith("|"):
            i += 1
            continue
        start, width = i + 1, len(_cells(lines[i]))
        if i + 1 >= len(lines) or not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip()):
            problems.append(f"line {start}: a table needs a |---| line under its header")
        while i < len(lines) and lines[i].strip():
            if not lines[i].startswith("|"):
                problems.append(f"line {i + 1}: text inside the table of line {start}")
            elif len(_cells(lines[i])) != width:
                got = len(_cells(lines[i]))
                problems.append(
                    f"line {i + 1}: {got} cells, the header of line {start} has {width}"
                )
            i += 1
    return problems


@pytest.mark.parametrize("page", ALL_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_parses(page):
    problems = table_problems(page.read_text(encoding="utf-8"))
    assert not problems, f"{page.relative_to(ROOT)}:\n" + "\n".join(problems)


def test_the_table_check_finds_a_paste_inside_a_table():
    broken = "| a | b |\n|---|---|\n| `x \\| y` | 1 |\n| one\n: pasted\n\ntext | 2 |\n"
    assert table_problems(broken) == [
        "line 4: 1 cells, the header of line 1 has 2",
        "line 5: text inside the table of line 1",
    ]
    assert table_problems("| a | b |\n|---|:--:|\n| `|` | 2 |\n") == []


def test_the_python_block_reader_skips_fragments():
    page = "```python\nx = 1\n```\n<!-- fragment -->\n```python\n...\n```\n"
    assert python_blocks(page) == [(1, "x = 1")]


def test_the_api_and_hook_references_are_generated_and_current():
    """Issue 26, row 12: docs/reference/*.md are Markdown made from the docstrings (readable in
    the repository); this fails while they are stale: run ``python docs/reference/_generate.py``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_generate", ROOT / "docs/reference/_generate.py")
    assert spec is not None
    assert spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    import dsh_host

    for name, build in generate.PAGES.items():
        page = (ROOT / "docs" / "reference" / name).read_text(encoding="utf-8")
        assert page == build(), (
            f"docs/reference/{name} is stale: run python docs/reference/_generate.py"
        )
        assert "{eval-rst}" not in page
    api = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    for name in dsh_host.__all__:
        assert f"`{name}" in api, f"{name} is public but not in the API reference"


def test_the_readme_and_the_default_stack_name_every_built_in_plugin():
    """Each entry point of ``dsh.plugins`` in pyproject.toml is named in the README's list of
    built-in plugins and has a row in docs/plugins/defaults.md (``mcp`` and ``otel`` had none)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = sorted(project["project"]["entry-points"]["dsh.plugins"])
    readme = (ROOT / "README.md").read_text()
    listed = readme[readme.index("The built-in plugins") :].split("\n\n")[0]
    defaults = (ROOT / "docs" / "plugins" / "defaults.md").read_text()
    for name in names:
        assert f"`{name}`" in listed, f"README.md: the built-in plugins omit `{name}`"
        assert re.search(rf"^\| \[`{name}`\]\(", defaults, re.M), f"defaults.md: no `{name}` row"
