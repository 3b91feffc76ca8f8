"""Apps' own prefixes by name: an app's system prompt, stored in the memory's catalog so that
skills are warmed behind it (:meth:`~skillgraft.skills.component.Skills.warm` with
``app=``) exactly as that app's chats will use them. :class:`Apps` is the memory's component
``memory.apps``.

An app's prefix is its leading system turn (:func:`~skillgraft.core.chat_layout.placed_prompt`
places a skill after it); a chat's tools are described at the end of that turn
(:meth:`~skillgraft.core.tools.OutputFormat.lead`), so a skill warmed behind the prompt alone
serves that app's chats without tools; with tools it is captured on first use. Names follow the skill name rules
(:func:`~skillgraft.skills.frontmatter.name_problem`).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass

from ..core.chat_layout import with_system
from ..errors import InputError
from ..skills.frontmatter import name_problem

__all__ = ["AppPrefix", "Apps", "MAX_APP_PREFIX_CHARS"]

MAX_APP_PREFIX_CHARS = 256_000  # an agent's prompt of some 60k tokens; longer is refused, never stored


@dataclass(frozen=True)
class AppPrefix:
    """A stored app prefix: its ``name``, its ``system`` prompt and when it was stored."""

    name: str
    system: str
    created_at: str

    def as_dict(self) -> dict:
        return {**asdict(self), "chars": len(self.system)}


def check_app_name(name) -> str:
    """``name`` if it can name an app, else :class:`InputError` saying why."""
    problem = name_problem(name)
    if problem:
        raise InputError(f"an app cannot have {problem}")
    return name


def check_app_prefix(system) -> str:
    """``system`` if it can be an app's prefix (non-empty text without NUL bytes, at most
    :data:`MAX_APP_PREFIX_CHARS`), else :class:`InputError`."""
    if not isinstance(system, str):
        raise InputError(f"an app's prefix must be text, not {type(system).__name__}")
    with_system(system, [])
    if len(system) > MAX_APP_PREFIX_CHARS:
        raise InputError(f"an app's prefix is {len(system)} characters, over the {MAX_APP_PREFIX_CHARS} one may hold")
    return system


class Apps:
    """``memory.apps``: the app prefixes of a memory's own store, by name."""

    def __init__(self, memory) -> None:
        self.memory = memory

    def add(self, name: str, system: str, *, replace: bool = False) -> AppPrefix:
        """Store app ``name``'s ``system`` prompt (refused with :class:`AppTakenError` if the
        name is taken, unless ``replace``)."""
        self.memory.store.put_app_prefix(check_app_name(name), check_app_prefix(system), replace=replace)
        return self.get(name)

    def list(self) -> list[AppPrefix]:
        """Every stored app prefix, by name."""
        return [AppPrefix(**row) for row in self.memory.store.app_prefix_rows()]

    def get(self, name: str) -> AppPrefix:
        """App ``name``'s prefix (:class:`AppNotFoundError` if none)."""
        return AppPrefix(**self.memory.store.app_prefix_row(check_app_name(name)))

    def remove(self, name: str) -> None:
        """Forget app ``name`` (the states warmed behind it stay in the cache until evicted)."""
        self.memory.store.delete_app_prefix(check_app_name(name))

    def __call__(self) -> list[AppPrefix]:
        """``memory.apps()``, the old list, for one release (warned): use :meth:`list`."""
        warnings.warn("SkillMemory.apps() is deprecated: use memory.apps.list()", DeprecationWarning, stacklevel=2)
        return self.list()
