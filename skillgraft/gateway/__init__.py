"""``skillgraft serve``: an OpenAI-compatible gateway with skill memory over a pool of llama-servers.

:mod:`.pool` starts and supervises the llama-servers and leases their slots,
:mod:`.service` decides and answers each chat, :mod:`.app` is the HTTP surface and
:mod:`.metrics` its Prometheus metrics; :mod:`.openai_skills` is the OpenAI Skills API over
imported skills (uploads checked by :mod:`.uploads`, imported by :mod:`.skill_shelf`). Needs
the ``serve`` extra.
"""

from __future__ import annotations

from .runner import GatewayConfig, serve

__all__ = ["GatewayConfig", "serve"]
