"""The bench command: cost and exactness benchmarks side by side in one run."""

from __future__ import annotations

import click

from .common import Activity, emit, json_option, kv_type_option, model_option


def _int_list(value: str) -> list[int]:
    try:
        numbers = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not numbers or min(numbers) <= 0:
        raise click.BadParameter("sizes must be positive")
    return numbers


def _skills_effect_option(ctx, param, value):
    """Keep a skills-effect option aside (in ``ctx.meta``), out of the command's arguments."""
    ctx.meta.setdefault("skills_effect", {})[param.name] = value
    return value


@click.command()
@click.argument("kind", type=click.Choice(["graft", "paging", "positions", "route", "needles", "server", "serve", "agent",
                                                 "placement", "skills-effect", "load", "growth"]))
@model_option
@click.option("--tokens", default="256,1024,2048,4096,8192", show_default=True, help="Block sizes (graft, paging).")
@click.option("--keys", default="1000,10000,100000", show_default=True, help="Index sizes (route).")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1, 100),
              help="Repetitions; the median is kept (agent: restarts measured).")
@click.option("--samples", default=50, show_default=True, type=click.IntRange(1, 10_000), help="Samples (positions).")
@click.option("--blocks", default=64, show_default=True, type=click.IntRange(2, 10_000), help="Blocks (needles).")
@click.option("--no-peers", is_flag=True, help="Skip llama-cpp-python's own state APIs (graft).")
@click.option("--clients", default=4, show_default=True, type=click.IntRange(1, 64), help="Concurrent clients (serve).")
@click.option("--requests", default=8, show_default=True, type=click.IntRange(1, 10_000), help="Requests per client (serve).")
@click.option("--servers", default=2, show_default=True, type=click.IntRange(1, 16), help="llama-servers in the pool (serve).")
@click.option("--kill", is_flag=True, help="SIGKILL a llama-server a third of the way through the load (serve).")
@click.option("--quick", is_flag=True, help="Short prompts and one restart, a couple of minutes (agent); short "
                                             "prompts, one slot, two agents of two turns (load).")
@click.option("--two-slots", is_flag=True, help="Also three apps on one server of two slots, a few minutes more (agent).")
@click.option("--peer-cache-mib", default=0, show_default=True, type=click.IntRange(0, 1 << 20),
              help="The peer llama-server's host prompt cache (--cache-ram); 8192 is llama-server's default (agent).")
@click.option("--captured-manuals", "captured", is_flag=True,
              help="Stock the manuals as captured blocks leading the chat, not as text (agent).")
@click.option("--in-process", "in_process", is_flag=True,
              help="The agent through SkillMemory in this process against llama-cpp-python's Llama (agent).")
@click.option("--models", default=None,
              help="Comma-separated models, each measured in turn (skills-effect, load; default --model).")
@click.option("--slots", "slot_counts", default=None, help="Comma-separated slot counts K [default: 1,2] (load).")
@click.option("--agents", "agent_counts", default=None,
              help="Comma-separated agent counts N, for every K [default: K, 2K and 4K] (load).")
@click.option("--turns", default=None, type=click.IntRange(1, 20), help="Turns of each agent [default: 3] (load).")
@click.option("--namespaces", is_flag=True, help="Also the gateway with two namespaces, agents alternating (load).")
@click.option("--categories", default="simple_python,multiple,parallel,parallel_multiple", show_default=True,
              help="BFCL categories, also live_simple, live_multiple, live_parallel, live_parallel_multiple, "
                   "irrelevance, live_irrelevance (skills-effect).")
@click.option("--per-category", default=5, show_default=True, type=click.IntRange(1, 10_000),
              help="Tasks of each category, BFCL's first; with --split, of each half (skills-effect).")
@click.option("--max-tokens", default=96, show_default=True, type=click.IntRange(1, 4096),
              help="Tokens of each answer (skills-effect).")
@click.option("--tasks", "bfcl_tasks", default=None, expose_value=False, callback=_skills_effect_option,
              help="BFCL tasks by id or CATEGORY:FIRST-LAST, comma-separated, instead of --categories (skills-effect).")
@click.option("--split", type=click.Choice(["train", "test"]), default=None, expose_value=False,
              callback=_skills_effect_option,
              help="Report this seeded half of each category; routed-set+experience learns from the other (skills-effect).")
@click.option("--seed", default=0, show_default=True, type=int, expose_value=False, callback=_skills_effect_option,
              help="The seed of --split (skills-effect).")
@click.option("--conditions", default=None, expose_value=False, callback=_skills_effect_option,
              help="Comma-separated conditions [default: all] (skills-effect).")
@click.option("--catalog", type=click.Path(exists=True, dir_okay=False),
              help="A catalog of skills, one JSON a line (route): routing accuracy, abstention and latency on it.")
@click.option("--skills", "skill_root", type=click.Path(exists=True, file_okay=False),
              help="Skill folders to route to instead of a catalog (route), or for the agent to ask about (agent).")
@click.option("--queries", "query_file", type=click.Path(exists=True, dir_okay=False),
              help="Requests for --catalog/--skills: in_scope and off_topic, each with calibrate and test halves.")
@click.option("--limit", type=click.IntRange(1, 100_000), help="The catalog's first N skills only (route); the first N skills asked about (agent --skills).")
@click.option("--scale", default=None,
              help="Comma-separated skill counts (route, with --catalog): route times over the catalog grown "
                   "to each with copies of its skills; growth: the sizes measured (default 100,1000,10000).")
@click.option("--plot", type=click.Path(dir_okay=False), help="Also draw the result into this PNG file.")
@kv_type_option
@json_option
@click.pass_context
def bench(ctx, kind, model, tokens, keys, repeats, samples, blocks, no_peers, clients, requests, servers, kill, quick,
          two_slots, peer_cache_mib, captured, in_process, models, slot_counts, agent_counts, turns, namespaces,
          categories, per_category, max_tokens, catalog, skill_root, query_file, limit, scale, plot, kv_type,
          as_json) -> None:
    """Cost and exactness benchmarks, measured side by side in one run (median of repeats).

    KIND is graft (prefill vs restore vs the native floor vs llama-cpp-python),
    paging (first access vs warm restore vs re-prefill), positions (own, shifted and
    sequential exactness), route (flat vs HNSW search, on the encoder `--embedder` names,
    MiniLM by default; with `--catalog` or `--skills` and `--queries`, in-scope accuracy,
    off-topic abstention and route latency over that catalog), needles (a store far larger
    than the serving window, with planted facts), server (a graft through llama-server
    vs its cold prefill and its own prompt caches), serve (the gateway under load from
    openai clients, optionally with a llama-server killed mid-load) or agent (time to first
    token of agent requests: the gateway grafting the routed manual against plain llama-server
    with its prompt cache and the manual pasted into the prompt, over five scenarios) or
    growth (import rate, route p50 and p99, memory and disk over a catalog grown to each
    `--scale` size, real skills first, then copies; `--skills` are imported at each size, timed) or
    placement (the shapes agents send: tools in the tools parameter, a first sighting, the same
    skill again, a multi-topic conversation, manuals added with add_manual; against plain
    llama-server with its defaults, the skill pasted) or skills-effect (BFCL function-calling tasks, their function documents as skills: pass rate by
    BFCL's checker with no skill, the needed document pasted, the memory's routed graft, the
    model choosing from a listing, and every document pasted) or load (N agents at once, streamed,
    through a gateway of K slots against llama-server -np K: requests and tokens a second, time
    to first token p50/p95, errors). `--kv-type` measures graft and paging under that KV cache type.
    """
    if plot and kind in ("agent", "placement", "skills-effect", "load"):
        raise click.BadParameter(f"the {kind} benchmark draws no plot", param_hint="--plot")
    if kv_type and kind not in ("graft", "paging"):
        raise click.BadParameter(f"the {kind} benchmark runs under the default KV cache type; "
                                 "--kv-type is for graft and paging", param_hint="--kv-type")
    from .. import bench as benchmarks
    from ..config import default_model

    model = model or default_model()
    with Activity(f"bench {kind}", "preparing") as progress:
        if kind == "graft":
            report = benchmarks.bench_graft(model, _int_list(tokens), repeats, peers=not no_peers, kv_type=kv_type,
                                            progress=progress)
        elif kind == "paging":
            report = benchmarks.bench_paging(model, _int_list(tokens), repeats, kv_type=kv_type, progress=progress)
        elif kind == "positions":
            report = benchmarks.bench_positions(model, samples, progress=progress)
        elif kind == "route" and (catalog or skill_root):
            from ..bench.route_catalog import FAKE_N_CTX, bench_route_catalog
            from ..testing import FakeEngine

            if not query_file:
                raise click.BadParameter("a catalog benchmark needs its requests", param_hint="--queries")
            report = bench_route_catalog(query_file, FakeEngine(n_ctx=FAKE_N_CTX), catalog=catalog, skills=skill_root,
                                         limit=limit, embedder=(ctx.obj or {}).get("embedder"),
                                         scale=_int_list(scale) if scale else (), progress=progress)
        elif kind == "growth":
            from ..bench.growth import DEFAULT_SIZES, bench_growth

            if not (skill_root and catalog and query_file):
                raise click.BadParameter("growth needs --skills (the probe), --catalog and --queries")
            from ..bench.route_catalog import FAKE_N_CTX
            from ..testing import FakeEngine

            report = bench_growth(skill_root, catalog, query_file, FakeEngine(n_ctx=FAKE_N_CTX),
                                  sizes=_int_list(scale) if scale else DEFAULT_SIZES,
                                  embedder=(ctx.obj or {}).get("embedder"), progress=progress)
        elif kind == "route":
            report = benchmarks.bench_route(_int_list(keys), progress=progress, embedder=(ctx.obj or {}).get("embedder"))
        elif kind == "server":
            from ..server.checks import bench_server

            report = bench_server(model, _int_list(tokens), repeats, progress=progress)
        elif kind == "serve":
            from ..bench.serve import bench_serve

            report = bench_serve(clients=clients, requests=requests, servers=servers, kill=kill, model=model, progress=progress)
        elif kind == "skills-effect":
            from ..bench.skills_effect import bench_skills_effect

            chosen = [m.strip() for m in (models or model).split(",") if m.strip()]
            chosen_options = ctx.meta.get("skills_effect", {})
            conditions = [c.strip() for c in (chosen_options.get("conditions") or "").split(",") if c.strip()]
            report = bench_skills_effect(chosen, categories=[c.strip() for c in categories.split(",") if c.strip()],
                                         per_category=per_category, max_tokens=max_tokens, progress=progress,
                                         tasks=chosen_options.get("bfcl_tasks"), split=chosen_options.get("split"),
                                         seed=chosen_options.get("seed") or 0, **({"conditions": conditions} if conditions else {}))
        elif kind == "agent" and skill_root:
            from ..bench.agent_skills import bench_agent_skills

            if not query_file:
                raise click.BadParameter("the agent over real skills needs their requests", param_hint="--queries")
            report = bench_agent_skills(skill_root, query_file, model, progress=progress, peer_cache_mib=peer_cache_mib,
                                        limit=limit)
        elif kind == "agent" and in_process:
            from ..bench.agent_local import bench_agent_local

            report = bench_agent_local(model, progress=progress, quick=quick)
        elif kind == "placement":
            from ..bench.placement import bench_placement

            report = bench_placement(model, progress=progress)
        elif kind == "load":
            from ..bench.load import bench_load

            chosen = [m.strip() for m in (models or model).split(",") if m.strip()]
            quick_slots = (1,) if quick else (1, 2)
            report = bench_load(chosen, slots=_int_list(slot_counts) if slot_counts else quick_slots,
                                agents_=_int_list(agent_counts) if agent_counts else ((2,) if quick else None),
                                turns=turns or (2 if quick else 3), namespaces=namespaces, quick=quick,
                                progress=progress)
        elif kind == "agent":
            from ..bench.agent import bench_agent

            report = bench_agent(model, repeats, progress=progress, quick=quick, two_slots=two_slots,
                                 peer_cache_mib=peer_cache_mib, captured=captured)
        else:
            report = benchmarks.bench_needles(model, blocks, progress=progress)
    if plot:
        from ..bench.plots import plot_report

        report["plot"] = str(plot_report(report, plot))
    renders = {"agent": _render_agent, "placement": _render_agent, "skills-effect": _render_skills_effect,
               "load": _render_load}
    emit(report, as_json, renders.get(kind, _render_bench))


def _render_skills_effect(report: dict) -> str:
    """Per model and condition: pass rate [95 % interval], tokens and times; then the routed
    answers against the pasted ones, and what got worse."""
    pct = lambda v: "   -" if v is None else f"{100 * v:4.0f}"  # noqa: E731
    num = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    lines = [f"{'model':20} {'condition':22} {'passed':>8} {'rate %':>6} {'95% CI':>11} {'prompt tok':>10} "
             f"{'ttft s':>7} {'total s':>7} {'no fit':>6}"]
    lines += [f"{r['model']:20} {r['condition']:22} {r['passed']:>3}/{r['n']:<4} {pct(r['pass_rate']):>6} "
              f"{pct(r['ci_low'])}-{pct(r['ci_high']).strip():<5} {num(r['prompt_tokens'], '.0f'):>10} "
              f"{num(r['ttft_s'], '.2f'):>7} {num(r['total_s'], '.2f'):>7} {r['not_fitting']:>6}" for r in report["rows"]]
    lines += ["", f"{'model':20} {'category':22} {'condition':22} {'passed':>8} {'rate %':>6} {'95% CI':>11} "
                  f"{'prompt tok':>10} {'ttft s':>7}"]
    lines += [f"{r['model']:20} {r['category']:22} {r['condition']:22} {r['passed']:>3}/{r['n']:<4} {pct(r['pass_rate']):>6} "
              f"{pct(r['ci_low'])}-{pct(r['ci_high']).strip():<5} {num(r['prompt_tokens'], '.0f'):>10} "
              f"{num(r['ttft_s'], '.2f'):>7}" for r in report["per_category"]]
    for model, counts in (report.get("learned") or {}).items():
        lines.append(f"learned on {model} from the other half: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for model, decisions in report["routed_decisions"].items():
        lines.append(f"routed on {model}: " + ", ".join(f"{k} {v}" for k, v in decisions.items()))
    for model, counts in report["exactness"]["models"].items():
        lines.append(f"routed = pasted on {model}: {counts['identical']}/{counts['compared']} grafts of a needed "
                     f"document answered as pasted; {counts['identical_where_same_prompt']}/{counts['same_prompt']} "
                     f"of those on the same prompt tokens")
    lines += [f"routed != pasted: {t['model']} {t['task_id']}: {t['why']}"
              for t in report["exactness"]["tasks"] if not t["identical"]]
    lines += [f"worse than no skill: {w['model']} {w['task_id']} under {w['condition']}" for w in report["worse"]]
    return "\n".join(lines)


def _render_load(report: dict) -> str:
    """The load benchmark: per model, K and N, each system's throughput, TTFT and errors; then the ratios."""
    num = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    lines = [f"{'model':20} {'K':>2} {'N':>3} {'system':26} {'req/s':>7} {'tok/s':>7} {'ttft p50':>8} {'ttft p95':>8} "
             f"{'wall s':>7} {'errors':>6}"]
    lines += [f"{r['model']:20} {r['slots']:>2} {r['agents']:>3} {r['system']:26} {num(r['requests_per_s'], '.3f'):>7} "
              f"{num(r['tokens_per_s'], '.2f'):>7} {num(r['ttft_p50_s'], '.3f'):>8} {num(r['ttft_p95_s'], '.3f'):>8} "
              f"{r['wall_s']:>7.2f} {r['errors']:>6}" + "".join(f"\n    {m}" for m in r["error_messages"])
              for r in report["rows"]]
    lines += [f"{c['model']} K={c['slots']} N={c['agents']}: {c['system']} / {c['against']}: req/s "
              f"{num(c['requests_per_s_ratio'], '.3f')}, ttft p50 {num(c['ttft_p50_ratio'], '.3f')}, p95 "
              f"{num(c['ttft_p95_ratio'], '.3f')}{'' if c['met'] else '  (below the bar)'}" for c in report["comparisons"]]
    lines.append(f"load average before {report['load_average_before']}, after {report['load_average_after']}")
    return "\n".join(lines)


def _render_agent(report: dict) -> str:
    """The agent benchmark: per scenario and measure, each system's seconds [min, max] and the ratio."""
    span = lambda r, s: f"{r[s + '_s']:.3f} [{r[s + '_min']:.3f}, {r[s + '_max']:.3f}]"  # noqa: E731
    other = report.get("other", "llama-server")
    paired = lambda r: "" if r.get("paired_ratio") is None else f"{r['paired_ratio']:>7.3f}"  # noqa: E731
    lines = [f"{'scenario':20} {'measure':30} {'skillgraft s':>26} {other + ' s':>26} {'ratio':>7} {'paired':>7}"]
    lines += [f"{r['scenario']:20} {r['measure']:30} {span(r, 'skillgraft'):>26} {span(r, 'llama_server'):>26} "
              f"{r['ratio']:>7.3f} {paired(r)}" for r in report["rows"]]
    if "summary" not in report:  # placement: the rows alone
        return "\n".join(lines)
    summary, decisions = report["summary"], report.get("decisions")
    if decisions is None:  # in-process: no restart is measured
        lines.append(f"grafts: {summary['grafts']}/{summary['requests']}; reused from: {summary['reused_from']}")
        for row in report.get("conversation_policy", {}).get("rows", []):
            lines.append(f"topic change, {row['policy']}: {row['total_s']:.2f} s over {row['turns']} turns, first turn on "
                         f"the new topic {row['first_turn_on_the_new_topic_s']:.3f} s, entered {row.get('entered', 0)}, kept {row['kept']}, switched "
                         f"{row['switched']}, behind the expected skill {row['behind_the_expected_skill']}/{row['turns']}")
        return "\n".join(lines)
    lines.append(f"restart: {summary['restart_speedup']}x faster than llama-server's cold prefill "
                 f"(target {summary['restart_target']:g}x); grafts on the expected manual: "
                 f"{decisions['graft_on_expected']}/{decisions['requests']}")
    return "\n".join(lines)


def _render_bench(report: dict) -> str:
    rows = report["rows"]
    if not rows:
        return "(no rows)"
    columns = [k for k, v in rows[0].items() if isinstance(v, (int, float, str)) and k not in {"question", "answer"}][:9]
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["  ".join(f"{c:>14.14}" for c in columns)]
    lines += ["  ".join(f"{fmt(r.get(c, '')):>14.14}" for c in columns) for r in rows]
    return "\n".join(lines)
