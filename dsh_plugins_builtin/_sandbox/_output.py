"""A command's output as kept: its first and last bytes within a budget; optionally streamed."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Output", "Sink"]

Sink = Callable[[bytes], bool]
"""Given each piece of a streamed command's output, in order; true when it has had enough."""


class Output:
    """Keeps the first and the last bytes of a stream within a fixed budget.

    With a ``sink``, each piece is also handed to it as it arrives, at most ``cap`` bytes in
    all: `feed` answers true (stop the command) once the sink has had enough or more than
    ``cap`` bytes came (then `truncated` is true). What comes after that is dropped.
    """

    def __init__(self, cap: int, sink: Sink | None = None) -> None:
        self.head_cap = max(cap, 0) // 2
        self.tail_cap = max(cap, 0) - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.notes: list[str] = []  # what the run itself has to say (after the output)
        self.sink = sink
        self.streamed = 0  # bytes handed to the sink
        self.stopped = False  # the sink had enough, or more than the cap came

    def feed(self, data: bytes) -> bool:
        """Keep ``data`` (and stream it); whether the command should be stopped now."""
        sink = self.sink
        if sink is not None and self.stopped:
            return False  # what a stopped command still wrote is not its output
        self.total += len(data)
        if sink is not None:
            room = self.head_cap + self.tail_cap - self.streamed
            part = data if len(data) <= room else data[:room]
            self.streamed += len(part)
            if (part and sink(part)) or len(part) < len(data):
                self.stopped = True
                self._keep(data)
                return True
        self._keep(data)
        return False

    def _keep(self, data: bytes) -> None:
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            excess = len(self.tail) - self.tail_cap
            if excess > 0:
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        body = self._body()
        return "\n".join([body.rstrip("\n"), *self.notes, ""]) if self.notes else body

    def _body(self) -> str:
        head = self.head.decode(errors="replace")
        tail = self.tail.decode(errors="replace")
        if not self.truncated:
            return (self.head + self.tail).decode(errors="replace")
        omitted = self.total - len(self.head) - len(self.tail)
        return (
            f"{head}\n[... output truncated: {omitted} of {self.total} bytes omitted ...]\n{tail}"
        )
