"""The ``serve``, ``ui`` and ``mcp`` commands (registered on the ``skillgraft`` group by :mod:`skillgraft.cli.main`)."""

from __future__ import annotations

import json
import sys
from typing import Optional

import click

from ..core.planning import CONVERSATION_POLICIES, DEFAULT_CONVERSATION_POLICY
from ..errors import ConfigError
from .common import derived_option, mib_bytes, model_option, store_home

create_option = click.option(
    "--create", is_flag=True, help="Create the store when --home holds none (otherwise a missing store is an error)."
)


def _serve_extra() -> None:
    from ..errors import ConfigError

    import importlib

    try:
        for module in ("fastapi", "uvicorn", "prometheus_client", "mcp", "jinja2"):
            importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"{exc.name} is missing: install the serve extra (pip install 'skillgraft[serve]')") from None


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on; not loopback needs --api-key or --keys.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="Port (0: a free one).")
@click.option("--servers", default=1, show_default=True, type=click.IntRange(1, 64), help="llama-server processes.")
@click.option("--slots", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Slots per server, each its own KV: the model's window divided among them unless $SKILLGRAFT_N_CTX sets a slot's.")
@click.option("--api-key", envvar="SKILLGRAFT_API_KEY", default=None, help="Require 'Authorization: Bearer KEY' ($SKILLGRAFT_API_KEY).")
@click.option("--keys", "keys_file", type=click.Path(dir_okay=False), default=None,
              help="Key file: one 'NAMESPACE KEY' a line ('admin KEY': an admin key); prefix reuse stays within a "
                   "key's namespace; the file must be its owner's alone (chmod 600).")
@click.option("--gate", "gate", type=click.Choice(["advisory", "enforce"]), default=None,
              help="After a graft: report the confidence gate (advisory, the default) or answer plainly when not confident.")
@click.option("--no-gate", is_flag=True, hidden=True, help="The same as --gate advisory.")
@click.option("--allow-deposits", is_flag=True, help="Let clients add and delete skills (POST/DELETE /v1/skills); off by default.")
@click.option("--deposit-key", envvar="SKILLGRAFT_DEPOSIT_KEY", default=None,
              help="Key the write routes need instead of the API key ($SKILLGRAFT_DEPOSIT_KEY); required with --api-key.")
@click.option("--deposits-per-minute", default=10.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Writes a minute per credential (the deposit key; per address without one), a burst of as many; "
                   "all clients together four times that.")
@click.option("--header-timeout", default=10.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds a request may take to send its headers.")
@click.option("--body-timeout", default=30.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds a request may take to send its body.")
@click.option("--max-connections", default=256, show_default=True, type=click.IntRange(1), help="Open connections, in all.")
@click.option("--max-client-connections", default=32, show_default=True, type=click.IntRange(1),
              help="Open connections from one client address.")
@click.option("--slot-wait", default=None, type=click.FloatRange(min=0, min_open=True),
              help="Seconds a request waits for a free slot before a 503 (default 30).")
@click.option("--generation-timeout", default=180.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds an answer (all its choices) may generate once it has a slot; then it is stopped (504).")
@click.option("--request-timeout", default=240.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds a chat request may take in all, waiting for a slot included; then it is stopped (504).")
@derived_option
@click.option("--conversations", type=click.Choice(CONVERSATION_POLICIES), default=DEFAULT_CONVERSATION_POLICY,
              show_default=True,
              help="A later user turn's skill: keep the conversation's skills and let a new one enter after the turns "
                   "so far (nothing computed again), or switch to the turn's own skill alone, in front of the "
                   "conversation (prefilled again behind it).")
@create_option
@model_option
@click.pass_context
def serve_command(ctx, host, port, servers, slots, api_key, keys_file, gate, no_gate, allow_deposits, deposit_key, deposits_per_minute,
                  header_timeout, body_timeout, max_connections, max_client_connections, slot_wait, generation_timeout,
                  request_timeout, derived_mib, conversations, create, model) -> None:
    """Serve an OpenAI-compatible chat API with the skill memory, over a pool of llama-servers.

    Prints one JSON line on stdout ({"url": ..., "servers": [pids]}) once it listens;
    logs go to stderr. Stops the servers on Ctrl-C or SIGTERM.
    """
    from ..gateway import GatewayConfig, serve
    from ..deposit_policy import DepositPolicy
    from ..web.http_guard import HttpLimits

    _serve_extra()
    if (ctx.obj or {}).get("namespace"):
        raise ConfigError("serve takes each request's namespace from its key (--keys), not --namespace")
    config = GatewayConfig(
        home=store_home(ctx, create=create), host=host, port=port, n_servers=servers, n_slots=slots, model=model,
        api_key=api_key, keys_file=keys_file, gate="advisory" if no_gate else gate, catalog=(ctx.obj or {}).get("catalog"), blocks=(ctx.obj or {}).get("blocks"),
        deposits=DepositPolicy(allow_deposits, deposit_key, deposits_per_minute),
        http=HttpLimits(header_timeout, body_timeout, max_connections, max_client_connections), slot_wait_s=slot_wait,
        embedder=(ctx.obj or {}).get("embedder"), derived_bytes=mib_bytes(derived_mib),
        conversations=conversations, generation_timeout_s=generation_timeout, request_timeout_s=request_timeout,
    )

    def ready(url: str, server_pids: list[int]) -> None:
        click.echo(json.dumps({"url": url, "servers": server_pids}))
        sys.stdout.flush()

    serve(config, ready=ready)


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback interface to listen on.")
@click.option("--port", default=8090, show_default=True, type=click.IntRange(0, 65535), help="Port (0: a free one).")
@model_option
@click.pass_context
def ui_command(ctx, host, port, model) -> None:
    """Serve the inspector page of a local store: skills, decisions, a query box, health.

    Read-only and on loopback only (`skillgraft serve` shows the same page at /ui). Prints
    one JSON line on stdout ({"url": ...}) once it listens; stops on Ctrl-C or SIGTERM.
    """
    from ..inspector.local import serve_inspector

    _serve_extra()

    def ready(url: str) -> None:
        click.echo(json.dumps({"url": url}))
        sys.stdout.flush()

    obj = ctx.obj or {}
    serve_inspector(store_home(ctx), host=host, port=port, catalog=obj.get("catalog"), blocks=obj.get("blocks"),
                    model=model, ready=ready, namespace=obj.get("namespace"))


@click.command("mcp")
@click.option("--allow-deposits", is_flag=True, help="Offer the add_manual and add_solution tools; off by default.")
@click.option("--deposits-per-minute", default=10.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Deposits the client may make a minute (a burst of as many).")
@create_option
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              default="warning", show_default=True, help="What the MCP server logs on stderr.")
@model_option
@click.pass_context
def mcp_command(ctx, allow_deposits: bool, deposits_per_minute: float, create: bool, log_level: str,
                model: Optional[str]) -> None:
    """Serve the skill memory as MCP tools over stdin/stdout (for MCP hosts).

    Logs only warnings and errors on stderr unless --log-level says otherwise.
    """
    from ..deposit_policy import DepositPolicy
    from ..mcp.server import run_stdio

    _serve_extra()
    obj = ctx.obj or {}
    run_stdio(store_home(ctx, create=create), model=model, catalog=obj.get("catalog"), blocks=obj.get("blocks"),
              deposits=DepositPolicy(allow_deposits, None, deposits_per_minute), log_level=log_level.upper(),
              embedder=obj.get("embedder"), namespace=obj.get("namespace"))
