"""Where one generation's time went."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional


@dataclass
class Timings:
    """Seconds spent on each stage of one generation; None where the stage did not run.

    ``load_s`` finds the block's state (``from_cache`` when its payload was in this host's
    read-through cache), ``graft_s`` restores it (reading and verifying a payload not cached,
    unless the cells hold the block already) and prefills the chat after it,
    ``prefill_s`` re-prefills a foreign block's stored text instead (``reprefilled``), and
    ``plain_*`` time a generation without a block (an abstain, or a graft that fell back).
    """

    recall_s: Optional[float] = None
    load_s: Optional[float] = None
    graft_s: Optional[float] = None
    prefill_s: Optional[float] = None
    generate_s: Optional[float] = None
    plain_prefill_s: Optional[float] = None
    plain_generate_s: Optional[float] = None
    total_s: Optional[float] = None
    from_cache: Optional[bool] = None
    reprefilled: Optional[bool] = None

    def as_dict(self) -> dict:
        """The stages that ran."""
        return {key: value for key, value in asdict(self).items() if value is not None}
