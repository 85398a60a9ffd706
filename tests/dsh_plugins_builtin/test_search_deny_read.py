"""The search tools' `Policy` asks a sandbox plugin that is not dsh's (no ``policy``) about
``deny_read`` through its ``check_read``; dsh's own through its policy's entries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsh_plugins_builtin._sandbox._errors import SandboxDeniedError
from dsh_plugins_builtin._sandbox._policy import SandboxPolicy
from dsh_plugins_builtin._tools._search_support import read_denied


class OtherSandbox:
    """A sandbox plugin of someone else's: it refuses reads under /secret."""

    def check_read(self, path: str) -> Path:
        if path.startswith("/secret/"):
            raise SandboxDeniedError(f"{path} is secret", by="other")
        return Path(path)


class OwnSandbox:
    def __init__(self, policy: SandboxPolicy) -> None:
        self.policy = policy

    def check_read(self, path: str) -> Any:
        raise AssertionError("dsh's own sandbox is asked through its policy, not check_read")


def test_another_sandbox_plugin_is_asked_through_check_read() -> None:
    denied = read_denied(OtherSandbox())  # type: ignore[arg-type]
    assert denied("/secret/key")
    assert not denied("/ws/a.txt")


def test_dshs_own_sandbox_is_asked_through_its_deny_read(tmp_path: Path) -> None:
    policy = SandboxPolicy("workspace-write", tmp_path, deny_read=(tmp_path / ".ssh",))
    denied = read_denied(OwnSandbox(policy))  # type: ignore[arg-type]
    assert denied(str(tmp_path / ".ssh" / "id_rsa"))
    assert not denied(str(tmp_path / "a.txt"))
