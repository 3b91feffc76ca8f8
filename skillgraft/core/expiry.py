"""Expiry: the one owner of what an expiry may be, how it is written and whether it has passed.

A skill or a verified solution may carry an expiry, an absolute UTC time. After it, it is
hidden (never routed to, never answered from, not listed by default) and kept until removed.
Every door hands what it was given to :func:`expiry_time`: a :class:`~datetime.datetime`
(naive means UTC), a :class:`~datetime.timedelta` from now, or a text, either an ISO 8601 time
(a bare date or a time without an offset is UTC) or a duration from now such as ``30d``,
``12h``, ``90m`` or ``2w``. A duration is turned into a time once, when it is given. The
catalog stores :func:`expiry_stamp`'s text, the form :func:`~skillgraft.store.catalog.utc_now`
writes, so stamps compare as text in time order.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Optional, Union

from ..errors import ExpiryError

__all__ = ["EARLIEST", "MAX_AHEAD", "Deadlines", "Expiry", "Hidden", "expired", "expiry_of", "expiry_stamp", "expiry_time", "seconds_of"]

Expiry = Union[datetime, timedelta, str]
EARLIEST = datetime(2000, 1, 1, tzinfo=timezone.utc)  # before it an expiry is a mistake, not a wish
MAX_AHEAD = timedelta(days=100 * 366)  # further ahead: "never" is said with no expiry at all
MAX_TEXT = 64
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"([0-9]{1,9})\s*([smhdw])")


def expiry_time(value: Expiry, *, now: Optional[datetime] = None) -> datetime:
    """The aware UTC time ``value`` names (see the module's docstring); :class:`ExpiryError`
    when it is malformed, before :data:`EARLIEST` or more than :data:`MAX_AHEAD` from now. A time
    in the past is allowed: the thing expires at once."""
    now = now or datetime.now(timezone.utc)
    if isinstance(value, bool) or not isinstance(value, (datetime, timedelta, str)):
        raise ExpiryError(value, "is neither a time, a duration nor a text naming one")
    # an error names the value as it was given: the text, or a duration in seconds
    shown = value.strip() if isinstance(value, str) else f"{value.total_seconds():g}s" \
        if isinstance(value, timedelta) else None
    if isinstance(value, str):
        value = _parsed(value)
    if isinstance(value, timedelta):
        if value <= timedelta(0):
            raise ExpiryError(shown, "is not a duration ahead (it must be more than zero)")
        if value > MAX_AHEAD:
            raise ExpiryError(shown, f"is further ahead than {MAX_AHEAD.days} days: give no expiry to keep it")
        value = now + value
    when = value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
    if when < EARLIEST:
        raise ExpiryError(value.isoformat(), f"is before {EARLIEST.date()}")
    if when - now > MAX_AHEAD:
        raise ExpiryError(value.isoformat(), f"is more than {MAX_AHEAD.days} days ahead: give no expiry to keep it")
    return when


def _parsed(text: str) -> Union[datetime, timedelta]:
    shown = text
    text = text.strip()
    if not text or len(text) > MAX_TEXT or not text.isascii() or not text.isprintable():
        raise ExpiryError(shown, f"is not a time or a duration (an ISO 8601 time, or such as 30d; at most {MAX_TEXT})")
    duration = _DURATION.fullmatch(text.lower())
    if duration:
        return timedelta(seconds=int(duration.group(1)) * _UNITS[duration.group(2)])
    try:
        return datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "zZ" else text)
    except (ValueError, OverflowError):
        raise ExpiryError(shown, "is not an ISO 8601 time (2027-01-31, 2027-01-31T12:00:00Z) nor a duration "
                                 "(30d, 12h, 90m, 2w)") from None


def expiry_stamp(when: Optional[datetime]) -> Optional[str]:
    """The catalog's text of an aware time (None stays None: no expiry)."""
    if when is None:
        return None
    return when.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def expiry_of(value: Optional[Expiry]) -> Optional[str]:
    """The stamp the catalog stores for an expiry a caller gave (None: none)."""
    return None if value is None else expiry_stamp(expiry_time(value))


def seconds_of(stamp: Optional[str]) -> Optional[float]:
    """The Unix time of a stored stamp (None for none). A stamp that cannot be read is a time
    long past: what it hides stays hidden, never shown by accident."""
    if stamp is None:
        return None
    try:
        return datetime.fromisoformat(str(stamp)).timestamp()
    except (ValueError, OverflowError):
        return 0.0


def expired(stamp: Optional[str], now: Optional[float] = None) -> bool:
    """Whether a stored expiry has passed at ``now`` (Unix seconds, the clock's by default)."""
    seconds = seconds_of(stamp)
    return seconds is not None and seconds <= (time.time() if now is None else now)


class Deadlines:
    """The expiries of named entries (blocks by id, imported skills by name), as Unix seconds."""

    def __init__(self, stamps: dict[str, Optional[str]]) -> None:
        self.seconds = {name: seconds_of(stamp) for name, stamp in stamps.items() if stamp is not None}

    def passed(self, now: Optional[float] = None) -> frozenset:
        """The entries whose expiry has passed at ``now`` (the clock's by default): cheap, no catalog read."""
        now = time.time() if now is None else now
        return frozenset(name for name, seconds in self.seconds.items() if seconds <= now)

    def hidden(self, now: Optional[float] = None) -> "Hidden":
        """What these expiries hide at ``now`` (the clock's by default)."""
        return Hidden(self.passed(now))

    def next_after(self, now: float) -> float:
        """When the next of these expiries passes after ``now`` (Unix seconds; infinity: none)."""
        return min((seconds for seconds in self.seconds.values() if seconds > now), default=math.inf)


@dataclass(frozen=True)
class Hidden:
    """What expiry hides at one moment: the visibility rule every reader asks (the router, the
    memory's listings and forced grafts, the states a server may continue, the inspector).

    A block is hidden once its own expiry has passed, and a part of an imported skill once the
    skill's has (a part carries no expiry of its own). Hidden is not deleted: it is kept until
    removed, and may be changed or removed meanwhile."""

    passed: frozenset  # the block ids and skill names whose expiry has passed

    def hides(self, block_id: str, skill: Optional[str] = None) -> bool:
        """Whether block ``block_id`` (a part of imported skill ``skill``, if any) is hidden."""
        return block_id in self.passed or (skill is not None and skill in self.passed)
