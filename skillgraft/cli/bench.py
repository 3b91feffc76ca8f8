"""The bench command: cost and exactness benchmarks side by side in one run, one subcommand per
kind (``skillgraft bench KIND [OPTIONS]``), each with the options it reads."""

from __future__ import annotations

from typing import Callable, Optional

import click

from .bench_render import RENDERS, render_bench
from .common import Activity, emit, json_option, kv_type_option, model_option

__all__ = ["bench"]


def _int_list(value: str) -> list[int]:
    try:
        numbers = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not numbers or min(numbers) <= 0:
        raise click.BadParameter("sizes must be positive")
    return numbers


def _names(value: Optional[str], default: str) -> list[str]:
    return [part.strip() for part in (value or default).split(",") if part.strip()]


def _model(model: Optional[str]) -> str:
    from ..config import default_model

    return model or default_model()


def _embedder(ctx: click.Context):
    return (ctx.obj or {}).get("embedder")


def _run(kind: str, measure: Callable, as_json: bool, plot: Optional[str] = None) -> None:
    """Measure (``measure(progress)``), draw the plot asked for, and print the report."""
    with Activity(f"bench {kind}", "preparing") as progress:
        report = measure(progress)
    if plot:
        from ..bench.plots import plot_report

        report["plot"] = str(plot_report(report, plot))
    emit(report, as_json, RENDERS.get(kind, render_bench))


tokens_option = click.option("--tokens", default="256,1024,2048,4096,8192", show_default=True, help="Block sizes.")
repeats_option = click.option("--repeats", default=3, show_default=True, type=click.IntRange(1, 100),
                              help="Repetitions; the median is kept.")
plot_option = click.option("--plot", type=click.Path(dir_okay=False), help="Also draw the result into this PNG file.")
quick_option = click.option("--quick", is_flag=True, help="A short version of the run, a couple of minutes.")
models_option = click.option("--models", default=None, help="Comma-separated models, each measured in turn [default: --model].")
catalog_option = click.option("--catalog", type=click.Path(exists=True, dir_okay=False),
                              help="A catalog of skills, one JSON a line.")
skills_option = click.option("--skills", "skill_root", type=click.Path(exists=True, file_okay=False),
                             help="A folder of skill folders.")
queries_option = click.option("--queries", "query_file", type=click.Path(exists=True, dir_okay=False),
                              help="Requests for the skills: in_scope and off_topic, each with calibrate and test halves.")
scale_option = click.option("--scale", default=None, help="Comma-separated skill counts: the catalog grown to each "
                                                          "with copies of its skills.")


@click.group()
def bench() -> None:
    """Cost and exactness benchmarks, measured side by side in one run (median of repeats).
    ``docs/benchmarks.md`` gives the command behind each of its tables."""


@bench.command()
@model_option
@tokens_option
@repeats_option
@click.option("--no-peers", is_flag=True, help="Skip llama-cpp-python's own state APIs.")
@kv_type_option
@plot_option
@json_option
def graft(model, tokens, repeats, no_peers, kv_type, plot, as_json) -> None:
    """Prefill against restore against the native floor against llama-cpp-python, by block size."""
    from .. import bench as benchmarks

    _run("graft", lambda progress: benchmarks.bench_graft(_model(model), _int_list(tokens), repeats, peers=not no_peers,
                                                          kv_type=kv_type, progress=progress), as_json, plot)


@bench.command()
@model_option
@tokens_option
@repeats_option
@kv_type_option
@plot_option
@json_option
def paging(model, tokens, repeats, kv_type, plot, as_json) -> None:
    """Paging a block's state out of the context and back, by block size."""
    from .. import bench as benchmarks

    _run("paging", lambda progress: benchmarks.bench_paging(_model(model), _int_list(tokens), repeats, kv_type=kv_type,
                                                            progress=progress), as_json, plot)


@bench.command()
@model_option
@click.option("--samples", default=50, show_default=True, type=click.IntRange(1, 10_000), help="Samples.")
@plot_option
@json_option
def positions(model, samples, plot, as_json) -> None:
    """A block grafted at its own positions against re-prefilled: sequential exactness."""
    from .. import bench as benchmarks

    _run("positions", lambda progress: benchmarks.bench_positions(_model(model), samples, progress=progress), as_json, plot)


@bench.command()
@click.option("--keys", default="1000,10000,100000", show_default=True, help="Index sizes.")
@catalog_option
@skills_option
@queries_option
@click.option("--limit", type=click.IntRange(1, 100_000), help="The catalog's first N skills only.")
@scale_option
@plot_option
@json_option
@click.pass_context
def route(ctx, keys, catalog, skill_root, query_file, limit, scale, plot, as_json) -> None:
    """Flat against HNSW search on the encoder ``--embedder`` names (MiniLM by default); with
    ``--catalog`` or ``--skills`` and ``--queries``: in-scope accuracy, off-topic abstention and
    route latency over that catalog."""
    if not (catalog or skill_root):
        from .. import bench as benchmarks

        _run("route", lambda progress: benchmarks.bench_route(_int_list(keys), progress=progress,
                                                              embedder=_embedder(ctx)), as_json, plot)
        return
    from ..bench.route_catalog import FAKE_N_CTX, bench_route_catalog
    from ..testing import FakeEngine

    if not query_file:
        raise click.BadParameter("a catalog benchmark needs its requests", param_hint="--queries")
    _run("route", lambda progress: bench_route_catalog(
        query_file, FakeEngine(n_ctx=FAKE_N_CTX), catalog=catalog, skills=skill_root, limit=limit,
        embedder=_embedder(ctx), scale=_int_list(scale) if scale else (), progress=progress), as_json, plot)


@bench.command()
@skills_option
@catalog_option
@queries_option
@scale_option
@plot_option
@json_option
@click.pass_context
def growth(ctx, skill_root, catalog, query_file, scale, plot, as_json) -> None:
    """Import rate, route p50 and p99, memory and disk over a catalog grown to each ``--scale``
    size (default 100,1000,10000), real skills first, then copies; ``--skills`` are imported at
    each size, timed."""
    from ..bench.growth import DEFAULT_SIZES, bench_growth
    from ..bench.route_catalog import FAKE_N_CTX
    from ..testing import FakeEngine

    if not (skill_root and catalog and query_file):
        raise click.BadParameter("growth needs --skills (the probe), --catalog and --queries")
    _run("growth", lambda progress: bench_growth(
        skill_root, catalog, query_file, FakeEngine(n_ctx=FAKE_N_CTX), sizes=_int_list(scale) if scale else DEFAULT_SIZES,
        embedder=_embedder(ctx), progress=progress), as_json, plot)


@bench.command()
@model_option
@click.option("--blocks", default=64, show_default=True, type=click.IntRange(2, 10_000), help="Blocks.")
@plot_option
@json_option
def needles(model, blocks, plot, as_json) -> None:
    """A store far larger than the serving window, with planted facts."""
    from .. import bench as benchmarks

    _run("needles", lambda progress: benchmarks.bench_needles(_model(model), blocks, progress=progress), as_json, plot)


@bench.command()
@model_option
@tokens_option
@repeats_option
@plot_option
@json_option
def server(model, tokens, repeats, plot, as_json) -> None:
    """A graft through llama-server against its cold prefill and its own prompt caches."""
    from ..server.checks import bench_server

    _run("server", lambda progress: bench_server(_model(model), _int_list(tokens), repeats, progress=progress),
         as_json, plot)


@bench.command()
@model_option
@click.option("--clients", default=4, show_default=True, type=click.IntRange(1, 64), help="Concurrent clients.")
@click.option("--requests", default=8, show_default=True, type=click.IntRange(1, 10_000), help="Requests per client.")
@click.option("--servers", default=2, show_default=True, type=click.IntRange(1, 16), help="llama-servers in the pool.")
@click.option("--kill", is_flag=True, help="SIGKILL a llama-server a third of the way through the load.")
@plot_option
@json_option
def serve(model, clients, requests, servers, kill, plot, as_json) -> None:
    """The gateway under load from openai clients, optionally with a llama-server killed mid-load."""
    from ..bench.serve import bench_serve

    _run("serve", lambda progress: bench_serve(clients=clients, requests=requests, servers=servers, kill=kill,
                                               model=_model(model), progress=progress), as_json, plot)


@bench.command()
@model_option
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1, 100), help="Restarts measured.")
@click.option("--quick", is_flag=True, help="Short prompts and one restart, a couple of minutes.")
@click.option("--two-slots", is_flag=True, help="Also three apps on one server of two slots, a few minutes more.")
@click.option("--peer-cache-mib", type=click.IntRange(0, 1 << 20),
              help="The peer llama-server's host prompt cache (--cache-ram); left out, its default (8192); 0 turns it off.")
@click.option("--captured-manuals", "captured", is_flag=True,
              help="Stock the manuals as captured blocks leading the chat, not as text.")
@click.option("--in-process", "in_process", is_flag=True,
              help="The agent through SkillMemory in this process against llama-cpp-python's Llama.")
@skills_option
@queries_option
@click.option("--limit", type=click.IntRange(1, 100_000), help="The first N skills asked about (with --skills).")
@json_option
def agent(model, repeats, quick, two_slots, peer_cache_mib, captured, in_process, skill_root, query_file, limit,
          as_json) -> None:
    """Time to first token of agent requests: the gateway grafting the routed manual against plain
    llama-server with its prompt cache and the manual pasted into the prompt, over five scenarios."""
    model = _model(model)
    if skill_root:
        from ..bench.agent_skills import bench_agent_skills

        if not query_file:
            raise click.BadParameter("the agent over real skills needs their requests", param_hint="--queries")
        measure = lambda progress: bench_agent_skills(skill_root, query_file, model, progress=progress,  # noqa: E731
                                                      peer_cache_mib=peer_cache_mib, limit=limit)
    elif in_process:
        from ..bench.agent_local import bench_agent_local

        measure = lambda progress: bench_agent_local(model, progress=progress, quick=quick)  # noqa: E731
    else:
        from ..bench.agent import bench_agent

        measure = lambda progress: bench_agent(model, repeats, progress=progress, quick=quick,  # noqa: E731
                                               two_slots=two_slots, peer_cache_mib=peer_cache_mib, captured=captured)
    _run("agent", measure, as_json)


@bench.command()
@model_option
@json_option
def placement(model, as_json) -> None:
    """The shapes agents send (tools in the tools parameter, a first sighting, the same skill again,
    a multi-topic conversation, manuals added with add_manual) against plain llama-server with its
    defaults, the skill pasted."""
    from ..bench.placement import bench_placement

    _run("placement", lambda progress: bench_placement(_model(model), progress=progress), as_json)


@bench.command("skills-effect")
@model_option
@models_option
@click.option("--categories", default="simple_python,multiple,parallel,parallel_multiple", show_default=True,
              help="BFCL categories, also live_simple, live_multiple, live_parallel, live_parallel_multiple, "
                   "irrelevance, live_irrelevance.")
@click.option("--per-category", default=5, show_default=True, type=click.IntRange(1, 10_000),
              help="Tasks of each category, BFCL's first; with --split, of each half.")
@click.option("--max-tokens", default=96, show_default=True, type=click.IntRange(1, 4096), help="Tokens of each answer.")
@click.option("--tasks", "bfcl_tasks", default=None,
              help="BFCL tasks by id or CATEGORY:FIRST-LAST, comma-separated, instead of --categories.")
@click.option("--split", type=click.Choice(["train", "test"]), default=None,
              help="Report this seeded half of each category; routed-set+experience learns from the other.")
@click.option("--seed", default=0, show_default=True, type=int, help="The seed of --split.")
@click.option("--conditions", default=None, help="Comma-separated conditions [default: all].")
@json_option
def skills_effect(model, models, categories, per_category, max_tokens, bfcl_tasks, split, seed, conditions,
                  as_json) -> None:
    """BFCL function-calling tasks, their function documents as skills: pass rate by BFCL's checker
    with no skill, the needed document pasted, the memory's routed graft and set (with and without
    experience), the model choosing from a listing, and every document pasted."""
    from ..bench.skills_effect import bench_skills_effect

    chosen = _names(models, _model(model))
    extra = {"conditions": _names(conditions, "")} if conditions else {}
    _run("skills-effect", lambda progress: bench_skills_effect(
        chosen, categories=_names(categories, ""), per_category=per_category, max_tokens=max_tokens, progress=progress,
        tasks=bfcl_tasks, split=split, seed=seed, **extra), as_json)


@bench.command()
@model_option
@models_option
@click.option("--slots", "slot_counts", default=None, help="Comma-separated slot counts K [default: 1,2].")
@click.option("--agents", "agent_counts", default=None,
              help="Comma-separated agent counts N, for every K [default: K, 2K and 4K].")
@click.option("--turns", default=None, type=click.IntRange(1, 20), help="Turns of each agent [default: 3].")
@click.option("--namespaces", is_flag=True, help="Also the gateway with two namespaces, agents alternating.")
@click.option("--quick", is_flag=True, help="Short prompts, one slot, two agents of two turns.")
@json_option
def load(model, models, slot_counts, agent_counts, turns, namespaces, quick, as_json) -> None:
    """N agents at once, streamed, through a gateway of K slots against llama-server -np K: requests
    and tokens a second, time to first token p50/p95, errors."""
    from ..bench.load import bench_load

    slots = _int_list(slot_counts) if slot_counts else ((1,) if quick else (1, 2))
    agents = _int_list(agent_counts) if agent_counts else ((2,) if quick else None)
    _run("load", lambda progress: bench_load(_names(models, _model(model)), slots=slots, agents_=agents,
                                             turns=turns or (2 if quick else 3), namespaces=namespaces, quick=quick,
                                             progress=progress), as_json)
