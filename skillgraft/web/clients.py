"""Who a client is, for the limits that count clients: its credential when it shows one, else
its address as the last resort, folded so that fresh addresses of one host are one client."""

from __future__ import annotations

import hashlib
import ipaddress

__all__ = ["address_key", "credential_key"]


def address_key(address: str) -> str:
    """One key for every address one host can take cheaply: all of loopback (``127.0.0.0/8``,
    ``::1``) is one client, and an IPv6 address counts by its ``/64``; anything else (a Unix
    socket, a name) is taken as it is."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"addr:{address}"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "addr:loopback"
    if isinstance(ip, ipaddress.IPv6Address):
        return f"addr:{ipaddress.IPv6Network((ip, 64), strict=False)}"
    return f"addr:{ip}"


def credential_key(credential: bytes) -> str:
    """The key of a credential (an ``Authorization`` header): a digest, so the limit's table
    holds no secret."""
    return "key:" + hashlib.sha256(credential).hexdigest()[:24]
