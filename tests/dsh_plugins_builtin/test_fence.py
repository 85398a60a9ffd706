"""The file fence: every escape is denied and nothing lands outside the roots."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest

from dsh_plugins_builtin._sandbox import _fence, _open
from dsh_plugins_builtin._sandbox._fence import (
    FenceDenied,
    SandboxPolicy,
    atomic_write_text,
    check_read,
    check_write,
    resolve_target,
    writable_roots,
)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    return path


@pytest.fixture
def policy(ws: Path) -> SandboxPolicy:
    # tmp_path lives under /tmp, a default writable root: pin the roots to the workspace so
    # that the sibling "outside" directory really is outside.
    return SandboxPolicy("workspace-write", ws, writable_roots=(ws,))


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_write_inside_creates_parents_and_lands(ws: Path, policy: SandboxPolicy) -> None:
    assert check_write("a/b/c.txt", policy) == ws / "a/b/c.txt"
    atomic_write_text("a/b/c.txt", "hello", policy)
    assert (ws / "a/b/c.txt").read_text() == "hello"
    assert _tree(ws) == ["a", "a/b", "a/b/c.txt"]  # no temp file left behind


def test_dotdot_traversal_denied(ws: Path, outside: Path, policy: SandboxPolicy) -> None:
    with pytest.raises(FenceDenied) as info:
        check_write("../outside/x.txt", policy)
    assert str(outside / "x.txt") in str(info.value)
    assert "workspace-write mode" in str(info.value)
    assert info.value.path == "../outside/x.txt"
    assert info.value.mode == "workspace-write"
    with pytest.raises(FenceDenied):
        atomic_write_text("../outside/x.txt", "pwned", policy)
    with pytest.raises(FenceDenied):
        atomic_write_text("a/../../outside/new/x.txt", "pwned", policy)
    assert _tree(outside) == []
    assert _tree(ws) == []


def test_dotdot_that_stays_inside_is_allowed(ws: Path, policy: SandboxPolicy) -> None:
    atomic_write_text("missing/../b.txt", "ok", policy)
    assert (ws / "b.txt").read_text() == "ok"


def test_absolute_path_outside_denied(ws: Path, outside: Path, policy: SandboxPolicy) -> None:
    passwd = Path("/etc/passwd").read_bytes()
    with pytest.raises(FenceDenied) as info:
        atomic_write_text("/etc/passwd", "pwned", policy)
    assert str(info.value) == (
        f'write to "/etc/passwd" denied: outside the writable roots ({ws}) '
        "under workspace-write mode"
    )
    assert Path("/etc/passwd").read_bytes() == passwd
    with pytest.raises(FenceDenied):
        atomic_write_text(outside / "abs.txt", "pwned", policy)
    assert not (outside / "abs.txt").exists()


def test_unrelated_prefix_is_not_contained(tmp_path: Path, policy: SandboxPolicy) -> None:
    sibling = tmp_path / "ws2"
    sibling.mkdir()
    with pytest.raises(FenceDenied):
        atomic_write_text(sibling / "x.txt", "pwned", policy)
    assert not (sibling / "x.txt").exists()


def test_symlink_inside_pointing_at_etc_denied(ws: Path, policy: SandboxPolicy) -> None:
    (ws / "passwd").symlink_to("/etc/passwd")
    (ws / "etc").symlink_to("/etc")
    before = Path("/etc/passwd").read_bytes()
    with pytest.raises(FenceDenied) as info:
        atomic_write_text("passwd", "pwned", policy)
    assert '"passwd" (resolves to "/etc/passwd")' in str(info.value)
    with pytest.raises(FenceDenied):
        atomic_write_text("etc/dsh-fence-escape", "pwned", policy)
    assert Path("/etc/passwd").read_bytes() == before
    assert not Path("/etc/dsh-fence-escape").exists()
    assert (ws / "passwd").is_symlink()


def test_symlinked_file_outside_denied(ws: Path, outside: Path, policy: SandboxPolicy) -> None:
    secret = outside / "secret.txt"
    secret.write_text("original")
    (ws / "link").symlink_to(secret)
    with pytest.raises(FenceDenied):
        atomic_write_text("link", "pwned", policy)
    assert secret.read_text() == "original"


def test_dangling_symlink_pointing_outside_denied(
    ws: Path, outside: Path, policy: SandboxPolicy
) -> None:
    (ws / "dangling").symlink_to(outside / "new.txt")
    with pytest.raises(FenceDenied):
        atomic_write_text("dangling", "pwned", policy)
    assert not (outside / "new.txt").exists()


def test_symlinked_directory_outside_denied(ws: Path, outside: Path, policy: SandboxPolicy) -> None:
    (ws / "d").symlink_to(outside, target_is_directory=True)
    with pytest.raises(FenceDenied):
        atomic_write_text("d/f.txt", "pwned", policy)
    assert _tree(outside) == []


def test_new_nested_file_under_symlinked_directory_denied(
    ws: Path, outside: Path, policy: SandboxPolicy
) -> None:
    (ws / "d").symlink_to(outside, target_is_directory=True)
    with pytest.raises(FenceDenied) as info:
        atomic_write_text("d/newdir/deep.txt", "pwned", policy)
    assert str(outside / "newdir/deep.txt") in str(info.value)
    assert not (outside / "newdir").exists()


def test_missing_component_then_dotdot_into_symlink_denied(
    ws: Path, outside: Path, policy: SandboxPolicy
) -> None:
    (ws / "d").symlink_to(outside, target_is_directory=True)
    assert resolve_target("missing/../d/x", ws) == outside / "x"
    with pytest.raises(FenceDenied):
        atomic_write_text("missing/../d/x", "pwned", policy)
    assert _tree(outside) == []


def test_symlink_swapped_in_after_the_check(ws: Path, outside: Path, policy: SandboxPolicy) -> None:
    (ws / "sub").mkdir()
    assert check_write("sub/f.txt", policy) == ws / "sub/f.txt"  # the tool's own check passes
    (ws / "sub").rename(ws / "sub.old")
    (ws / "sub").symlink_to(outside, target_is_directory=True)
    with pytest.raises(FenceDenied):
        atomic_write_text("sub/f.txt", "pwned", policy)  # re-checks: now it points out
    assert _tree(outside) == []


def test_directory_swapped_for_symlink_during_the_write(
    ws: Path, outside: Path, policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "sub").mkdir()

    def swap(target: Path) -> None:
        (ws / "sub").rename(ws / "sub.old")
        (ws / "sub").symlink_to(outside, target_is_directory=True)

    monkeypatch.setattr(_fence, "_before_replace", swap)
    with pytest.raises(FenceDenied):
        atomic_write_text("sub/f.txt", "pwned", policy)
    assert _tree(outside) == []
    assert _tree(ws / "sub.old") == []  # the temp file was removed


def test_target_swapped_for_symlink_during_the_write(
    ws: Path, outside: Path, policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = outside / "victim.txt"
    victim.write_text("original")
    (ws / "f.txt").write_text("mine")

    def swap(target: Path) -> None:
        (ws / "f.txt").unlink()
        (ws / "f.txt").symlink_to(victim)

    monkeypatch.setattr(_fence, "_before_replace", swap)
    with pytest.raises(FenceDenied):
        atomic_write_text("f.txt", "pwned", policy)
    assert victim.read_text() == "original"
    assert _tree(ws) == ["f.txt"]  # only the swapped-in link; the temp file is gone
    assert _tree(outside) == ["victim.txt"]


def test_read_only_denies_every_write(ws: Path) -> None:
    policy = SandboxPolicy("read-only", ws)
    (ws / "existing.txt").write_text("original")
    for target in ("new.txt", "existing.txt", "dir/new.txt"):
        with pytest.raises(FenceDenied) as info:
            atomic_write_text(target, "pwned", policy)
        assert f'write to "{target}"' in str(info.value)
        assert "under read-only mode" in str(info.value)
    assert (ws / "existing.txt").read_text() == "original"
    assert _tree(ws) == ["existing.txt"]
    assert writable_roots(policy) == ()


def test_reads_outside_denied(ws: Path, outside: Path, policy: SandboxPolicy) -> None:
    (ws / "in.txt").write_text("in")
    (outside / "secret.txt").write_text("secret")
    (ws / "leak").symlink_to(outside / "secret.txt")
    assert check_read("in.txt", policy) == ws / "in.txt"
    for target in ("../outside/secret.txt", "/etc/passwd", "leak"):
        with pytest.raises(FenceDenied) as info:
            check_read(target, policy)
        assert f'read of "{target}"' in str(info.value)
        assert "workspace-write mode" in str(info.value)
    read_only = SandboxPolicy("read-only", ws, writable_roots=(ws,))
    with pytest.raises(FenceDenied, match="read-only mode"):
        check_read("/etc/passwd", read_only)


def test_read_roots_and_danger_allow_reads(ws: Path, outside: Path) -> None:
    (outside / "doc.txt").write_text("doc")
    extra = SandboxPolicy("read-only", ws, writable_roots=(ws,), read_roots=(outside,))
    assert check_read(outside / "doc.txt", extra) == outside / "doc.txt"
    danger = SandboxPolicy("danger-full-access", ws)
    assert check_read("/etc/passwd", danger) == Path("/etc/passwd")


def test_danger_full_access_writes_anywhere(ws: Path, outside: Path) -> None:
    policy = SandboxPolicy("danger-full-access", ws)
    atomic_write_text(outside / "new/f.txt", "free", policy)
    assert (outside / "new/f.txt").read_text() == "free"


def test_nul_byte_rejected(ws: Path, policy: SandboxPolicy) -> None:
    with pytest.raises(ValueError, match="NUL"):
        resolve_target("a\0b", ws)
    with pytest.raises(FenceDenied, match="NUL byte"):
        check_write("a\0/../../etc/passwd", policy)
    with pytest.raises(FenceDenied, match="NUL byte"):
        check_read("a\0b", policy)


def test_symlink_loop_denied(ws: Path, policy: SandboxPolicy) -> None:
    (ws / "loop").symlink_to(ws / "loop")
    with pytest.raises(FenceDenied, match="cannot resolve"):
        atomic_write_text("loop/x", "x", policy)


def test_existing_mode_is_preserved(ws: Path, policy: SandboxPolicy) -> None:
    target = ws / "script.sh"
    target.write_text("old")
    target.chmod(0o751)
    atomic_write_text("script.sh", "new", policy)
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o751


def test_new_file_gets_umask_mode(ws: Path, policy: SandboxPolicy) -> None:
    mask = os.umask(0o022)
    try:
        atomic_write_text("new.txt", "x", policy)
    finally:
        os.umask(mask)
    assert stat.S_IMODE((ws / "new.txt").stat().st_mode) == 0o644


def test_file_used_as_directory_fails_without_writing(ws: Path, policy: SandboxPolicy) -> None:
    (ws / "file.txt").write_text("x")
    with pytest.raises(NotADirectoryError):
        atomic_write_text("file.txt/child", "x", policy)
    assert _tree(ws) == ["file.txt"]


def test_writing_the_root_itself_fails_without_touching_its_parent(
    tmp_path: Path, ws: Path, policy: SandboxPolicy
) -> None:
    before = _tree(tmp_path)
    with pytest.raises(IsADirectoryError):
        atomic_write_text(".", "x", policy)
    assert _tree(tmp_path) == before


def test_default_writable_roots(ws: Path) -> None:
    policy = SandboxPolicy("workspace-write", ws)
    expected = {ws, Path("/tmp"), Path(tempfile.gettempdir())}
    assert set(policy.writable_roots) == expected
    assert len(policy.writable_roots) == len(expected)
    assert policy.network is False
    assert policy.read_roots == ()


def test_unknown_mode_rejected(ws: Path) -> None:
    with pytest.raises(ValueError, match="mode"):
        SandboxPolicy("full", ws)  # type: ignore[arg-type]


# -- pinned roots and protected paths ------------------------------------------------------------


def test_a_root_replaced_by_a_symlink_or_another_directory_fails_the_pin_check(tmp_path):
    from dsh_plugins_builtin._sandbox._fence import RootReplaced, check_pinned, pin_roots

    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    policy = pin_roots(SandboxPolicy("workspace-write", ws, writable_roots=(ws,)))
    check_pinned(policy)  # control: nothing changed
    ws.rename(tmp_path / "away")
    ws.symlink_to(outside)
    with pytest.raises(RootReplaced, match="now a symbolic link"):
        check_pinned(policy)
    ws.unlink()
    ws.mkdir()
    with pytest.raises(RootReplaced, match="now another directory"):
        check_pinned(policy)


def test_protected_paths_lie_under_every_writable_root_with_the_config_file(tmp_path):
    from dsh_plugins_builtin._sandbox._fence import protected_paths

    ws = tmp_path / "ws"
    ws.mkdir()
    other = tmp_path / "other"
    other.mkdir()
    config = ws / "dsh.toml"
    policy = SandboxPolicy(
        "workspace-write", ws, writable_roots=(ws, other), config_file=config,
        protected=(".git", "/etc/abs"),
    )  # fmt: skip
    assert set(protected_paths(policy)) == {
        ws / ".git", other / ".git", Path("/etc/abs"), config,
    }  # fmt: skip
    outside_config = attrs.evolve(policy, config_file=tmp_path / "dsh.toml")
    assert tmp_path / "dsh.toml" not in protected_paths(outside_config)
    assert protected_paths(attrs.evolve(policy, mode="read-only")) == ()
    assert protected_paths(attrs.evolve(policy, mode="danger-full-access")) == ()


def test_pinned_roots_and_protected_paths_are_computed_once_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh_plugins_builtin._sandbox._fence import pin_roots, protected_paths, readable_roots

    ws = tmp_path / "ws"
    ws.mkdir()
    policy = pin_roots(SandboxPolicy("workspace-write", ws, writable_roots=(ws,)))
    expected = (readable_roots(policy), writable_roots(policy), protected_paths(policy))
    assert expected == ((ws,), (ws,), (ws / ".git", ws / ".claude", ws / ".dsh", ws / "dsh.toml"))

    def no_filesystem(*args: object, **kwargs: object) -> None:
        raise AssertionError("the roots were canonicalised again")

    monkeypatch.setattr(_fence.os, "lstat", no_filesystem)
    assert (readable_roots(policy), writable_roots(policy), protected_paths(policy)) == expected


def test_the_sandbox_write_refuses_protected_paths_and_the_config_file(tmp_path: Path) -> None:
    from dsh_plugins_builtin._sandbox._fence import pin_roots

    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    config = ws / "dsh.toml"
    config.write_text("")
    policy = pin_roots(
        SandboxPolicy("workspace-write", ws, writable_roots=(ws,), config_file=config)
    )
    for target in (".git/config", ".git", ".claude/hooks/x.sh", "dsh.toml", "./.dsh/../.dsh/a"):
        with pytest.raises(FenceDenied, match=r"\[plugin\.sandbox\] protected"):
            atomic_write_text(target, "pwned", policy)
    assert config.read_text() == ""
    assert _tree(ws) == [".git", "dsh.toml"]
    atomic_write_text("git-notes.txt", "fine", policy)  # the control: a neighbour is writable
    assert (ws / "git-notes.txt").read_text() == "fine"


def test_a_pyproject_config_is_not_protected_but_warned_about(tmp_path: Path) -> None:
    from dsh_plugins_builtin._sandbox._fence import config_warning, protected_paths

    ws = tmp_path / "ws"
    ws.mkdir()
    pyproject = SandboxPolicy(
        "workspace-write", ws, writable_roots=(ws,), config_file=ws / "pyproject.toml"
    )
    assert ws / "pyproject.toml" not in protected_paths(pyproject)
    warning = config_warning(pyproject)
    assert warning is not None
    assert "pyproject.toml" in warning
    assert "DSH_CONFIG" in warning
    assert config_warning(attrs.evolve(pyproject, config_file=ws / "dsh.toml")) is None
    assert config_warning(attrs.evolve(pyproject, config_file=tmp_path / "pyproject.toml")) is None
    assert config_warning(attrs.evolve(pyproject, mode="danger-full-access")) is None


def test_a_root_on_the_import_path_is_read_only_and_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh_plugins_builtin._sandbox._config import SandboxConfig, build_policy
    from dsh_plugins_builtin._sandbox._fence import config_warning, import_paths

    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.chdir(ws)
    monkeypatch.syspath_prepend("")  # ``python -m`` or ``-c`` run in the workspace
    assert ws in import_paths()
    policy = build_policy(SandboxConfig(), ws, imports=import_paths())
    warning = config_warning(policy)
    assert warning is not None
    assert f"the writable root {ws} is read-only to every tool and command: it is where" in warning
    assert "python -P" in warning
    with pytest.raises(FenceDenied, match="a directory on Python's import path"):
        atomic_write_text("msvcrt.py", "import os", policy)
    # the control: without it on the import path, or with protect_install off, nothing to say
    assert config_warning(build_policy(SandboxConfig(), ws, imports=())) is None
    exposed = build_policy(SandboxConfig(protect_install=False), ws, imports=import_paths())
    assert config_warning(exposed) is None
    atomic_write_text("msvcrt.py", "import os", exposed)


def test_an_import_path_entry_reached_through_a_symlink_keeps_the_link_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh_plugins_builtin._sandbox._config import SandboxConfig, build_policy
    from dsh_plugins_builtin._sandbox._fence import import_paths

    ws = tmp_path / "ws"
    (ws / "lib" / "real").mkdir(parents=True)
    (ws / "lib" / "link").symlink_to("real")
    monkeypatch.syspath_prepend(str(ws / "lib" / "link"))
    assert {ws / "lib" / "real", ws / "lib"} <= set(import_paths())
    policy = build_policy(SandboxConfig(), ws, imports=import_paths())
    with pytest.raises(FenceDenied, match="import path"):  # the link could be pointed elsewhere
        atomic_write_text("lib/evil/msvcrt.py", "import os", policy)
    atomic_write_text("notes.txt", "fine", policy)  # the control: the rest of the root


def test_a_protected_name_that_is_a_symlink_keeps_its_directory_and_says_why(
    tmp_path: Path,
) -> None:
    from dsh_plugins_builtin._sandbox._config import SandboxConfig, build_policy
    from dsh_plugins_builtin._sandbox._fence import config_warning, protected_paths

    ws = tmp_path / "ws"
    (ws / "sub" / "realgit").mkdir(parents=True)
    (ws / "sub" / ".git").symlink_to("realgit")
    policy = build_policy(SandboxConfig(protected=("sub/.git",)), ws)
    assert {ws / "sub" / "realgit", ws / "sub"} <= set(protected_paths(policy))
    with pytest.raises(FenceDenied, match="protected"):
        atomic_write_text("sub/.git", "gitdir: elsewhere", policy)
    assert config_warning(policy) is None  # the root itself stays writable
    atomic_write_text("elsewhere.txt", "fine", policy)
    (ws / ".git").symlink_to("sub/realgit")  # a link at the root: the root is held read-only
    policy = build_policy(SandboxConfig(protected=(".git",)), ws)
    warning = config_warning(policy)
    assert warning is not None
    assert "is a symbolic link" in warning


def test_install_paths_name_the_environment_and_the_code_of_dsh_and_its_plugins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys
    import sysconfig
    import types

    import dsh_host
    import dsh_plugins_builtin
    from dsh_plugins_builtin._sandbox._fence import install_paths

    package = tmp_path / "plugpkg"
    package.mkdir()
    monkeypatch.setitem(sys.modules, "plugpkg", types.SimpleNamespace(__path__=[str(package)]))
    single = tmp_path / "single.py"
    monkeypatch.setitem(sys.modules, "single", types.SimpleNamespace(__file__=str(single)))
    found = install_paths(["plugpkg.sub", "single", "__main__", "not_imported"])
    assert Path(dsh_host.__file__).parent in found
    assert Path(dsh_plugins_builtin.__file__).parent in found
    assert Path(sysconfig.get_path("purelib")) in found
    assert package in found  # the top-level package of plugpkg.sub
    assert single in found
    if sys.prefix != sys.base_prefix:
        assert Path(sys.prefix) in found  # the virtual environment, scripts and all


def test_install_paths_name_the_bytecode_prefix_when_one_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``PYTHONPYCACHEPREFIX``, dsh's bytecode (and the console script's compiled attrs
    code) lie there: a command that could write it would run code in the next ``dsh``."""
    import sys

    from dsh_plugins_builtin._sandbox._fence import install_paths

    prefix = tmp_path / "pycache"
    monkeypatch.setattr(sys, "pycache_prefix", str(prefix))
    assert prefix in install_paths()
    monkeypatch.setattr(sys, "pycache_prefix", None)
    assert prefix not in install_paths()


def test_install_paths_are_protected_only_inside_writable_roots(tmp_path: Path) -> None:
    from dsh_plugins_builtin._sandbox._fence import install_in_roots, protected_paths

    ws = tmp_path / "ws"
    venv = ws / ".venv"
    site = venv / "lib" / "site-packages"
    outside = tmp_path / "elsewhere"
    site.mkdir(parents=True)
    policy = SandboxPolicy(
        "workspace-write", ws, writable_roots=(ws,), protected=(), install=(site, venv, outside)
    )
    assert install_in_roots(policy, (ws,)) == (venv,)  # the outermost, inside the roots
    assert protected_paths(policy) == (venv,)
    with pytest.raises(_fence.FenceDenied, match="holds code the next dsh run executes"):
        check_write(".venv/lib/site-packages/evil.pth", policy)
    with pytest.raises(_fence.FenceDenied, match="protect_install = false"):
        check_write(".venv/bin/dsh", policy)
    assert check_write("notes.txt", policy) == ws / "notes.txt"  # the control
    assert protected_paths(attrs.evolve(policy, install=())) == ()


@pytest.mark.parametrize("pinned", [False, True], ids=["unpinned", "pinned"])
def test_open_read_refuses_a_symlink_swapped_in_after_the_check(
    ws: Path, outside: Path, policy: SandboxPolicy, monkeypatch: pytest.MonkeyPatch, pinned: bool
) -> None:
    """The check saw a directory; by the open it is a symlink out: the open must fail."""
    from dsh_plugins_builtin._sandbox._fence import open_read, pin_roots

    if pinned:  # roots pinned: the path is first opened as spelled, unresolved
        policy = pin_roots(policy)
        assert _open._lexical_key("d/f.txt", policy, False) is not None
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("inside")
    (outside / "f.txt").write_text("OUTSIDE")
    real_check = _open.read_key

    def check_then_swap(
        path: str, policy: SandboxPolicy, pins_checked: bool = False
    ) -> tuple[str, str | None]:
        key = real_check(path, policy, pins_checked)
        if (ws / "d").is_dir() and not (ws / "d").is_symlink():
            (ws / "d").rename(ws / "parked")
            (ws / "d").symlink_to(outside)
        return key

    monkeypatch.setattr(_open, "read_key", check_then_swap)
    # Where the path needs no resolving it is first opened as spelled: swap before that too.
    lexical = _open._lexical_key

    def lexical_then_swap(path: str, policy: SandboxPolicy, pins_checked: bool) -> str | None:
        key = lexical(path, policy, pins_checked)
        check_then_swap(path, policy)
        return key

    monkeypatch.setattr(_open, "_lexical_key", lexical_then_swap)
    with pytest.raises(FenceDenied):  # the retry judges the path again: now it points out
        open_read("d/f.txt", policy)


def test_a_policy_derived_from_a_pinned_one_does_not_keep_its_resolved_roots(
    tmp_path: Path,
) -> None:
    from dsh_plugins_builtin._sandbox._fence import pin_roots

    ws, other = tmp_path / "ws", tmp_path / "other"
    ws.mkdir()
    other.mkdir()
    policy = pin_roots(SandboxPolicy("workspace-write", ws, writable_roots=(ws,)))
    wider = attrs.evolve(policy, writable_roots=(ws, other))
    assert writable_roots(wider) == (ws, other)


def test_a_policy_built_without_naming_the_import_path_protects_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`build_policy`'s callers all pass `import_paths`; one that forgot would have left the
    import path open: the default is this process's import path, not none."""
    from dsh_plugins_builtin._sandbox._config import SandboxConfig, build_policy

    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(ws / "src"))
    with pytest.raises(FenceDenied, match="import path"):
        atomic_write_text("src/msvcrt.py", "import os", build_policy(SandboxConfig(), ws))
    atomic_write_text("src/msvcrt.py", "x", build_policy(SandboxConfig(), ws, imports=()))


def test_an_import_path_entry_that_cannot_be_resolved_is_protected_all_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``sys.path`` entry that is a symlink loop at start (``PYTHONPATH=lib``, with ``lib``
    pointing at itself) is held as spelled, with the directory of the links met: a command
    could otherwise replace the loop with a directory and plant a module for the next start."""
    from dsh_plugins_builtin._sandbox._config import SandboxConfig, build_policy
    from dsh_plugins_builtin._sandbox._fence import import_paths

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "lib").symlink_to("lib")
    monkeypatch.syspath_prepend(str(ws / "lib"))
    assert {ws / "lib", ws} <= set(import_paths())
    policy = build_policy(SandboxConfig(), ws, imports=import_paths())
    with pytest.raises(FenceDenied, match="import path"):
        atomic_write_text("lib2/msvcrt.py", "import os", policy)


def test_a_protected_name_that_cannot_be_resolved_is_protected_not_a_crash(
    tmp_path: Path,
) -> None:
    from dsh_plugins_builtin._sandbox._config import SandboxConfig, build_policy
    from dsh_plugins_builtin._sandbox._fence import protected_paths

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "sub").mkdir()
    (ws / "sub" / ".git").symlink_to(".git")  # a loop
    policy = build_policy(SandboxConfig(protected=("sub/.git",)), ws)
    assert {ws / "sub" / ".git", ws / "sub"} <= set(protected_paths(policy))
    with pytest.raises(FenceDenied, match="protected"):
        atomic_write_text("sub/config", "x", policy)  # the loop could become a directory
    atomic_write_text("elsewhere.txt", "fine", policy)  # the control: the rest of the root


@pytest.mark.parametrize("bad", ["\0", "\ud800"])
def test_a_spelling_no_file_has_is_refused_before_tmp_is_read(
    tmp_path: Path, ws: Path, bad: str
) -> None:
    """``/tmp/<NUL>/../..`` climbs out of the private tmp, lexically: the NUL (or lone
    surrogate) is refused first, not normalised away into a clean path."""
    from dsh_plugins_builtin._sandbox._fence import open_read, pin_roots

    (ws / "a.txt").write_text("secret\n")
    private = tmp_path / "ptmp"
    private.mkdir()
    plain = SandboxPolicy("workspace-write", ws, writable_roots=(ws,), tmp=private)
    for policy in (plain, pin_roots(plain)):
        assert check_read(f"/tmp/x/../..{ws}/a.txt", policy) == ws / "a.txt"  # the control
        for spelled in (f"/tmp/{bad}/../..{ws}/a.txt", f"/tmp/{bad}/../../etc/hostname"):
            with pytest.raises(FenceDenied, match=r"NUL byte|lone surrogate"):
                check_read(spelled, policy)
            with pytest.raises(FenceDenied, match=r"NUL byte|lone surrogate"):
                open_read(spelled, policy)
        with pytest.raises(FenceDenied, match=r"NUL byte|lone surrogate"):
            check_write(f"/tmp/{bad}/../..{ws}/b.txt", policy)


def test_all_of_proc_is_refused_but_a_root_that_lies_in_dev_is_read(ws: Path) -> None:
    """No file tool reads the host's ``/proc`` (``kallsyms``, ``keys``, not only processes),
    even when a writable root is ``/``; a read root that itself lies in ``/dev`` is read."""
    from dsh_plugins_builtin._sandbox._fence import open_read, pin_roots

    everywhere = SandboxPolicy("workspace-write", ws, writable_roots=(Path("/"),))
    for path in ("/proc/version", "/proc/kallsyms", "/proc/self/environ", "/proc"):
        with pytest.raises(FenceDenied, match="in /proc, the processes and kernel"):
            check_read(path, everywhere)
    shm = Path(tempfile.mkdtemp(prefix="dsh-test-", dir="/dev/shm"))
    try:
        (shm / "a.txt").write_text("hello\n")
        plain = SandboxPolicy("workspace-write", ws, writable_roots=(ws,), read_roots=(shm,))
        for policy in (plain, pin_roots(plain)):
            assert check_read(shm / "a.txt", policy) == shm / "a.txt"
            fd, key = open_read(shm / "a.txt", policy)
            os.close(fd)
            assert key == str(shm / "a.txt")
            with pytest.raises(FenceDenied, match="a device of this machine"):
                check_read("/dev/zero", policy)  # the rest of /dev stays out of reach
        on_root = SandboxPolicy(
            "workspace-write", ws, writable_roots=(ws,), read_roots=(Path("/"),)
        )
        with pytest.raises(FenceDenied, match="a device of this machine"):
            check_read(shm / "a.txt", on_root)  # "/" merely holds /dev: not a root in it
    finally:
        (shm / "a.txt").unlink()
        shm.rmdir()


def test_a_policy_that_confines_or_protects_nothing_is_said_at_every_start(
    make_host: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A cloned project's dsh.toml with danger-full-access, or writable_roots = ["/"] (which
    # left even the config file in use writable), ran with no word about it.
    from dsh_plugins_builtin._sandbox._protected import danger_warning
    from dsh_plugins_builtin.sandbox import SandboxPlugin
    from dsh_plugins_builtin.tools import ToolsPlugin

    ws = tmp_path / "ws"
    ws.mkdir()
    config = ws / "dsh.toml"
    danger = SandboxPolicy("danger-full-access", ws, config_file=config)
    warning = danger_warning(danger)
    assert warning is not None
    assert "danger-full-access" in warning
    assert str(config) in warning
    everything = SandboxPolicy(
        "workspace-write", ws, writable_roots=(Path("/"),), config_file=config
    )
    assert "writable_roots holds /" in (danger_warning(everything) or "")
    assert danger_warning(SandboxPolicy("workspace-write", ws, writable_roots=(ws,))) is None
    with caplog.at_level("WARNING"):
        host_config = {
            "host": {"workspace": str(ws)},
            "plugin": {"sandbox": {"mode": "danger-full-access"}},
        }
        make_host(SandboxPlugin(), ToolsPlugin(), config=host_config)
    assert "mode = danger-full-access" in caplog.text
