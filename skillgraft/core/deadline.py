"""A request's deadline: when it must be done by, and what ran late if it is not."""

from __future__ import annotations

import time
from typing import Optional

from ..errors import DeadlineError

# The gateway's defaults (``skillgraft serve --generation-timeout / --request-timeout``).
GENERATION_TIMEOUT_S = 180.0  # from the slot's lease to the last token of the last choice
REQUEST_TIMEOUT_S = 240.0  # from the request's arrival to its last byte

class Deadline:
    """When a request must be done by (:func:`time.monotonic`), and what it is of."""

    def __init__(self, seconds: float, what: str = "generation") -> None:
        self.seconds, self.what = seconds, what
        self.at = time.monotonic() + seconds

    def sooner(self, other: Optional["Deadline"]) -> "Deadline":
        return self if other is None or self.at <= other.at else other

    def left(self) -> float:
        """Seconds left (at least a hundredth, so a read still fails by timing out)."""
        return max(self.at - time.monotonic(), 0.01)

    def check(self) -> None:
        """:class:`DeadlineError` once it has passed."""
        if time.monotonic() >= self.at:
            raise DeadlineError(self.what, self.seconds)
