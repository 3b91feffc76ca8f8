"""Stop sequences over streamed text: cut at the first stop, hold back a possible start of one."""

from __future__ import annotations

from typing import Optional, Sequence


class StopCutter:
    """Feed text pieces; get back the text that is safe to emit.

    Text that could be the beginning of a stop sequence is held until the next piece
    decides it. Once a stop sequence appears, everything from it on is dropped and
    :attr:`stopped` is set.
    """

    def __init__(self, stops: Optional[Sequence[str]] = None) -> None:
        self.stops = [s for s in (stops or ()) if s]
        self.stopped = False
        self._held = ""

    def feed(self, piece: str) -> str:
        """Add ``piece``; return the text now known to come before any stop sequence."""
        if self.stopped:
            return ""
        text = self._held + piece
        if not self.stops:
            self._held = ""
            return text
        hits = [i for i in (text.find(stop) for stop in self.stops) if i >= 0]
        if hits:
            self.stopped, self._held = True, ""
            return text[: min(hits)]
        keep = self._partial_suffix(text)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def flush(self) -> str:
        """The text still held back, once the generation has ended."""
        text, self._held = self._held, ""
        return text

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest end of ``text`` that begins some stop sequence."""
        longest = 0
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(text)), longest, -1):
                if stop.startswith(text[-size:]):
                    longest = size
                    break
        return longest
