"""The errors the sandbox ends a call with, and the confinement's own "nothing can confine"."""

from __future__ import annotations

from dsh_host import DshError

__all__ = ["SandboxDeniedError", "SandboxError", "SandboxUnavailable", "SandboxUnavailableError"]


class SandboxUnavailable(Exception):
    """No sandbox backend can confine the requested mode; nothing was run.

    Attributes:
        reason: Why each candidate backend cannot be used.
        mode: The sandbox mode that was requested.
    """

    def __init__(self, reason: str, *, mode: str = "") -> None:
        """Build the error.

        Args:
            reason: Why no backend is usable (one clause per backend).
            mode: The requested sandbox mode.
        """
        super().__init__(
            f'sandbox mode "{mode}" is requested but no sandbox backend is usable on this host; '
            f"refusing to run the command unconfined: {reason}"
        )
        self.reason = reason
        self.mode = mode


class SandboxError(DshError):
    """A sandbox decision that ends a call; ``by`` is who decided, for ``result.decided_by``."""

    def __init__(self, message: str, *, by: str | None = None) -> None:
        """Build the error.

        Args:
            message: What happened and what to do, naming the path or command and the mode.
            by: ``"sandbox: <mode> mode"`` and the like (see CONTRACT §13 on ``decided_by``).
        """
        super().__init__(message)
        self.by = by


class SandboxDeniedError(SandboxError):
    """The file fence refused a path (``SANDBOX_DENIED``); the message names the path and mode."""

    code = "SANDBOX_DENIED"


class SandboxUnavailableError(SandboxError):
    """Nothing can enforce the sandbox for this call, so nothing ran (``SANDBOX_UNAVAILABLE``)."""

    code = "SANDBOX_UNAVAILABLE"
