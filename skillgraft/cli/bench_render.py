"""How the bench command prints its reports when ``--json`` is not given: one renderer per
report shape (the agent and placement tables, skills-effect, load, and a generic table)."""

from __future__ import annotations

__all__ = ["RENDERS", "render_bench"]


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
        lines.append(f"routed on {model}: " + ", ".join(f"{k} {v}" for k, v in decisions.items() if k != "grafts"))
        lines += [f"    {task_kind}: " + ", ".join(f"{kind} {c['tasks']} ({c['passed']} passed)" for kind, c in kinds.items())
                  for task_kind, kinds in decisions.get("grafts", {}).items()]
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


def render_bench(report: dict) -> str:
    rows = report["rows"]
    if not rows:
        return "(no rows)"
    columns = [k for k, v in rows[0].items() if isinstance(v, (int, float, str)) and k not in {"question", "answer"}][:9]
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["  ".join(f"{c:>14.14}" for c in columns)]
    lines += ["  ".join(f"{fmt(r.get(c, '')):>14.14}" for c in columns) for r in rows]
    return "\n".join(lines)


RENDERS = {"agent": _render_agent, "placement": _render_agent, "skills-effect": _render_skills_effect,
           "load": _render_load}
