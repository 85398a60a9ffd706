"""The process escape tests, again as an unprivileged user, so one ``python -m pytest`` covers both.

As root, `test_escape_tests_pass_as_an_unprivileged_user` re-runs `test_escapes_process.py` and `test_escapes_boundary.py` (and
the path-rule resolution test of `test_rules.py`) as ``nobody`` (``setpriv --reuid --regid --clear-groups``) in a temporary directory that user owns,
and asserts that run passes. The checkout and the interpreter must be reachable by that user;
``.ci/run`` makes their directories traversable (``chmod o+x``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULES = (
    "tests/dsh_plugins_builtin/test_escapes_process.py",
    "tests/dsh_plugins_builtin/test_escapes_boundary.py",  # issue 22: what lies next to it
    "tests/dsh_plugins_builtin/test_network_allowlist.py",  # issue 22.9: the relay's python
    "tests/dsh_plugins_builtin/test_escapes_locks.py",  # issue 22: dsh's locks out of reach
    "tests/dsh_plugins_builtin/test_escapes_machine.py",  # kernel settings, every init's limits
    "tests/dsh_plugins_builtin/test_views.py",  # kept bwrap views
    # a confined MCP server's sandbox, checked while it runs (its mount table is the user's)
    "tests/dsh_plugins_builtin/test_mcp_confined.py::"
    "test_a_confined_server_never_reads_what_the_host_put_where_a_hidden_path_was",
    "tests/dsh_plugins_builtin/test_mcp_confined.py::"
    "test_an_answer_read_after_the_hidden_path_moved_is_withheld",
    "tests/dsh_plugins_builtin/test_mcp_confined.py::"
    "test_a_server_is_stopped_when_a_hidden_path_moves_with_no_call_under_way",
    "tests/dsh_plugins_builtin/test_mcp_confined.py::"
    "test_a_move_is_found_by_the_directories_watched_without_reading_the_mount_table",
    "tests/dsh_plugins_builtin/test_mcp_confined.py::"
    "test_a_directory_that_cannot_be_watched_makes_every_check_exact",
    "tests/dsh_plugins_builtin/test_mcp_confined.py::"
    "test_a_host_socket_that_starts_listening_after_the_server_is_out_of_its_reach",
    "tests/dsh_plugins_builtin/test_mcp_confined.py::"
    "test_a_file_a_deny_read_glob_covers_made_after_the_start_is_never_read",
    # path rules resolve links as os.path.realpath does, unreadable directories included
    "tests/dsh_plugins_builtin/test_rules.py::test_path_targets_resolve_as_realpath_does",
    # a config found in the working directory is read only as its user trusted it
    "tests/dsh_host/host/test_trust.py",
    "tests/dsh_host/host/test_trust_files.py",
)
USER = "nobody"


@pytest.fixture(params=["/tmp", "/var/lib"])
def user_dir(request: pytest.FixtureRequest) -> Iterator[tuple[pwd.struct_passwd, Path]]:
    """A directory owned by the throwaway user (pytest's own tmp dir is 0700), its home and
    temporary directory: under the host's ``/tmp`` (then commands get a fresh ``/tmp`` each,
    the workspace bound into it, and no kept view), or outside it, as a user's home is (a
    private tmp, and kept views)."""
    entry = pwd.getpwnam(USER)
    path = Path(tempfile.mkdtemp(prefix="dsh-unprivileged-", dir=request.param))
    os.chown(path, entry.pw_uid, entry.pw_gid)
    try:
        yield entry, path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _as(entry: pwd.struct_passwd, *argv: str) -> list[str]:
    return [
        "setpriv",
        *(f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"),
        "--",
        *argv,
    ]


def test_escape_tests_pass_as_an_unprivileged_user(
    user_dir: tuple[pwd.struct_passwd, Path],
) -> None:
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: test_escapes_process.py ran as this very user")
    entry, home = user_dir
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "TMPDIR": str(home),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        **({"CI": os.environ["CI"]} if "CI" in os.environ else {}),
    }
    reach = subprocess.run(
        _as(entry, sys.executable, "-c", "import dsh_host, dsh_plugins_builtin, pyseccomp"),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert reach.returncode == 0, (
        f"user {USER!r} cannot run {sys.executable} on {REPO}: {reach.stderr.strip()[-400:]}; "
        "make every directory on the way traversable (chmod o+x; .ci/run does it)"
    )
    done = subprocess.run(
        _as(
            entry,
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"),
            *("--basetemp", str(home / "pytest"), *MODULES),
        ),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = (done.stdout + done.stderr)[-3000:]
    assert done.returncode == 0, report
    summary = done.stdout.strip().splitlines()[-1]
    assert " passed" in summary, report
    assert "failed" not in summary, report
    assert "error" not in summary, report
