"""The verbs that were :class:`~skillgraft.memory.SkillMemory`'s own before its components held
them, for one release: each old name still works and warns (:class:`DeprecationWarning`) at
every call, naming the verb to call instead (docs/api.md has the migration table)."""

from __future__ import annotations

import functools
import warnings

from ..skills.component import RENAMED

__all__ = ["MOVED", "moved_verb"]

# old name -> (the component that holds the verb now, its name there)
MOVED = {
    **{old: ("skills", new) for old, new in RENAMED.items()},
    "add_app": ("apps", "add"), "app": ("apps", "get"), "remove_app": ("apps", "remove"),
    "expire": ("expiry", "set"), "expiries": ("expiry", "list"), "prune_expired": ("expiry", "prune"),
    "live": ("expiry", "live"), "hidden_skills": ("expiry", "hidden_skills"),
    **{verb: ("blocks", verb) for verb in ("list", "get", "delete", "rename", "update", "recapture", "check",
                                           "store_of", "known_tokens", "forced_graft", "forget_experience")},
    "record_answer": ("ledger", "answered"), "prefixes": ("states", "cache"), "flush_derived": ("states", "flush"),
    "gate_threshold": ("confidence_gate", "threshold"), "calibrate_gate": ("confidence_gate", "calibrate"),
}


def moved_verb(component, component_name: str, old: str):
    """``SkillMemory.old`` (:data:`MOVED`): ``component``'s verb under its new name, warning at each
    call; an old property (``gate_threshold``) warns when read and gives the value."""
    new = MOVED[old][1]
    verb = getattr(component, new)
    said = f"SkillMemory.{old} is deprecated: use memory.{component_name}.{new}"
    if not callable(verb):
        warnings.warn(said, DeprecationWarning, stacklevel=3)
        return verb

    @functools.wraps(verb)
    def deprecated(*args, **kwargs):
        warnings.warn(said, DeprecationWarning, stacklevel=2)
        return verb(*args, **kwargs)

    return deprecated
