"""A command's output as kept: its first and last bytes within a budget."""

from __future__ import annotations

__all__ = ["Output"]


class Output:
    """Keeps the first and the last bytes of a stream within a fixed budget."""

    def __init__(self, cap: int) -> None:
        self.head_cap = max(cap, 0) // 2
        self.tail_cap = max(cap, 0) - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.notes: list[str] = []  # what the run itself has to say (after the output)

    def feed(self, data: bytes) -> None:
        self.total += len(data)
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
