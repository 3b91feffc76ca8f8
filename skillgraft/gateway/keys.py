"""Who a request is: the API keys a gateway accepts, and the namespace each key stands for.

A key file (``skillgraft serve --keys FILE``) holds one key a line, ``NAMESPACE KEY``
(blank lines and lines opening with ``#`` are skipped). A namespace is 1-64 of ``a-z``,
``0-9``, ``.``, ``_`` and ``-``, opening with a letter or digit; ``default`` is the namespace of
a gateway without a key file; ``admin`` is no namespace but marks an admin key, which acts in
``default`` and alone reads ``/metrics``. A key is 16-256 printable ASCII characters without
spaces, each key once. ``--api-key`` is an admin key too. The file must be its owner's alone
(mode ``0600`` or ``0400``): one its group or others may read or write is refused.

A request's namespace, with its ``cache_salt`` if it gives one, is its *reuse scope*
(:func:`~skillgraft.kv.prefixes.reuse_scope`): prefix reuse never crosses scopes.
"""

from __future__ import annotations

import hmac
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from ..errors import ConfigError
from ..kv.prefix_keys import reuse_scope
from ..memory.namespaces import DEFAULT_NAMESPACE, NAMESPACE, scope_namespace

__all__ = ["ADMIN", "DEFAULT_NAMESPACE", "ApiKeys", "Principal", "read_keys"]

ADMIN = "admin"
KEY = re.compile(r"[!-~]{16,256}")
MAX_KEY_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class Principal:
    """Who sent a request: its ``namespace`` and whether it holds an admin key."""

    namespace: str = DEFAULT_NAMESPACE
    admin: bool = False

    def __post_init__(self) -> None:  # checked once, when the key is read: a request only hashes it
        object.__setattr__(self, "_scoped", scope_namespace(self.namespace))

    def scope(self, salt: str = "") -> str:
        """The reuse scope of this principal's requests that give ``salt``
        (:func:`~skillgraft.memory.namespaces.namespace_scope`)."""
        return reuse_scope(self._scoped, salt)


LOCAL = Principal(DEFAULT_NAMESPACE, admin=True)  # a gateway without keys: one principal, its operator


class ApiKeys:
    """The keys a gateway accepts (``{key: principal}``); none at all: every request is :data:`LOCAL`."""

    def __init__(self, keys: Optional[dict[str, Principal]] = None) -> None:
        self._keys = {f"Bearer {key}".encode(): principal for key, principal in (keys or {}).items()}

    @classmethod
    def of(cls, api_key: Optional[str] = None, file: Union[str, Path, None] = None) -> "ApiKeys":
        """The admin key ``api_key`` and the keys of ``file`` (:func:`read_keys`)."""
        keys = read_keys(file) if file is not None else {}
        if api_key:
            if api_key in keys:
                raise ConfigError("--api-key is also a key of the key file: give each key once")
            keys[api_key] = Principal(DEFAULT_NAMESPACE, admin=True)
        return cls(keys)

    def __bool__(self) -> bool:
        return bool(self._keys)

    @property
    def tenants(self) -> bool:
        """Whether some key stands for a namespace of its own (a non-admin key)."""
        return any(not principal.admin for principal in self._keys.values())

    def principal(self, authorization: bytes) -> Optional[Principal]:
        """Who an ``Authorization`` header's value is (None: no key of these); every key is
        compared, in constant time."""
        if not self._keys:
            return LOCAL
        found = None
        for bearer, principal in self._keys.items():
            if hmac.compare_digest(authorization, bearer):
                found = principal
        return found

    def namespaces(self) -> frozenset:
        """The namespaces the keys stand for (admin keys' aside)."""
        return frozenset(p.namespace for p in self._keys.values() if not p.admin)

    def inspector_key(self) -> Optional[str]:
        """The key the inspector's sign-in takes: the first admin key; None without keys (then
        it is loopback's); with keys but no admin key, one nobody holds (it stays locked)."""
        for bearer, principal in self._keys.items():
            if principal.admin:
                return bearer.decode()[len("Bearer "):]
        return secrets.token_urlsafe(32) if self._keys else None


def read_keys(file: Union[str, Path]) -> dict[str, Principal]:
    """The keys of a key file (see the module); :class:`ConfigError` naming the first bad line."""
    path = Path(file).expanduser()
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()[: MAX_KEY_FILE_BYTES + 1]
    except OSError as exc:
        raise ConfigError(f"cannot read the key file {path}: {exc.strerror or exc}") from None
    if stat.S_IMODE(mode) & 0o077:
        raise ConfigError(
            f"the key file {path} has mode {stat.S_IMODE(mode):04o}: its group or others can read or write it; "
            f"a key file must be its owner's alone (chmod 600 {path})"
        )
    if len(data) > MAX_KEY_FILE_BYTES:
        raise ConfigError(f"the key file {path} is over {MAX_KEY_FILE_BYTES} bytes")
    keys: dict[str, Principal] = {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"the key file {path} is not UTF-8") from None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        where = f"the key file {path}, line {number}"
        if len(parts) != 2:
            raise ConfigError(f"{where}: expected NAMESPACE KEY")
        namespace, key = parts
        if namespace != ADMIN and not NAMESPACE.fullmatch(namespace):
            raise ConfigError(f"{where}: a namespace is 1-64 of a-z 0-9 . _ - (opening with a letter or digit)")
        if not KEY.fullmatch(key):
            raise ConfigError(f"{where}: a key is 16-256 printable ASCII characters without spaces")
        if key in keys:
            raise ConfigError(f"{where}: this key is given already")
        keys[key] = Principal(DEFAULT_NAMESPACE, admin=True) if namespace == ADMIN else Principal(namespace)
    if not keys:
        raise ConfigError(f"the key file {path} holds no key")
    return keys
