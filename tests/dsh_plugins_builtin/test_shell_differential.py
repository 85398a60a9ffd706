"""The allow view of a command line checked against bash itself.

Random lines built from shell metacharacters and harmless words are read by `parse_command`;
whenever it calls a line a plain list of simple commands (what an allow rule may cover), the line
is run by a real ``bash`` in a scratch directory with a DEBUG trap that logs every simple command
bash runs. Bash must run no command the reading did not list. This found tree-sitter-bash reading
a newline before a backslash as a blank (``echo hi \\n\\touch pwned``), now caught.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from dsh_plugins_builtin._rules._shell import DYNAMIC, parse_command
from tests.conftest import soak_size

ATOMS = [
    "echo", "true", ":", "a", "b", " ", " ", ";", "&", "|", "'", '"', "$", "\\", "#", "(", ")",
    "{", "}", "<", ">", "\n", "\t", "=", "`", "!", "*", ",", "[", "]", "$'", "\\n", "x=1", "&&",
    "||", "2>", "/dev/null", ">&", "1", "-", "\r", "\\\n", "$(", "<<", "~", "%", "@", "?",
    "\x0b", "\u00a0",
]  # fmt: skip


def bash_ran(line: str, cwd: Path) -> list[str] | None:
    """The source text of every simple command bash ran for *line* (``None``: it hung)."""
    log = cwd.with_suffix(".log")  # outside cwd, so no `*` in the line expands to it
    trap = f'trap \'printf "%s\\0" "$BASH_COMMAND" >> {log}\' DEBUG\n'
    try:
        subprocess.run(
            ["bash", "--norc", "--noprofile", "-c", trap + line], cwd=cwd, capture_output=True,
            timeout=5, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    if not log.exists():
        return []
    return [c for c in log.read_bytes().decode("utf-8", "replace").split("\0") if c]


@pytest.mark.soak
def test_bash_runs_no_command_the_allow_view_did_not_list(tmp_path):
    assert shutil.which("bash"), "bash is needed to check the reading against it"
    rnd = random.Random(20261202)
    checked = 0
    for i in range(soak_size(200, 40_000)):
        line = "echo " + "".join(rnd.choice(ATOMS) for _ in range(rnd.randint(1, 8)))
        parsed = parse_command(line)
        if parsed.simple is None:
            continue
        scratch = tmp_path / str(i)
        scratch.mkdir()
        ran = bash_ran(line, scratch)
        if ran is None:
            continue
        checked += 1
        listed = set(parsed.simple)
        for source in ran:
            words = parse_command(source).simple
            why = f"bash ran {source!r} for {line!r}, read as {parsed.simple}"
            assert words is not None, why
            assert words[0] in listed, why
        shutil.rmtree(scratch)
    assert checked > 15


@pytest.mark.soak
def test_bash_runs_no_command_the_deny_view_did_not_see(tmp_path):
    """Deny and ask rules see every command of a line that is not flagged dynamic."""
    rnd = random.Random(20261203)
    checked = 0
    for i in range(soak_size(200, 40_000)):
        start = rnd.choice(["echo ", "true ", ""])
        line = start + "".join(rnd.choice(ATOMS) for _ in range(rnd.randint(1, 8)))
        parsed = parse_command(line)
        if parsed.dynamic is not None:
            continue
        scratch = tmp_path / str(i)
        scratch.mkdir()
        ran = bash_ran(line, scratch)
        if ran is None:
            continue
        checked += 1
        seen = {words[0] for words in parsed.commands}
        for source in ran:
            # BASH_COMMAND is bash's own rendering: its first word, or the grammar's reading of it
            if "\x01" in source or "\x7f" in source:
                continue  # bash's internal quoting marks show in BASH_COMMAND: not comparable
            heads = [words[0] for words in parse_command(source).commands]
            first = source.split(maxsplit=1)[0] if source.split() else ""
            if heads and DYNAMIC not in heads[0]:
                assert heads[0] in seen or first in seen, (
                    f"bash ran {source!r} for {line!r}, seen {seen}"
                )
        shutil.rmtree(scratch)
    assert checked > 15
