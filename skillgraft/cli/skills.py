"""``skillgraft skills``: Agent Skills folders (a SKILL.md and its files) in and out of a store."""

from __future__ import annotations

import sys

import click

from ..skills.frontmatter import FOLDER_MISMATCH
from ..skills.plan import DEFAULT_KEY_POLICY, KEY_POLICIES
from .common import (
    Activity, SkillgraftGroup, derived_option, emit, expires_option, json_option, model_option, open_memory,
    read_text_file,
)
from .blocks import skill_change_hint

IMPORT_LINE_EVERY, IMPORT_LINE_S = 50, 5.0  # off a terminal, an import's progress line: each 50 skills or 5 s
EVAL_TOKENS = 128  # skillgraft.skills.answer_evals.DEFAULT_EVAL_TOKENS (the memory is imported when a command runs)


@click.group("skills", cls=SkillgraftGroup)
def skills() -> None:
    """Agent Skills folders: import, list, show, update, expire, remove, export.

    A skill is one thing above its blocks: its body packed into as few blocks as fit the
    window, its text resources (references/*.md ...) as blocks of their own, its scripts and
    assets listed (never run). Routing offers the default version of each skill.
    """


@skills.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--prune", is_flag=True, help="Remove stored skills whose folder under PATHS has vanished.")
@click.option("--keys", type=click.Choice(KEY_POLICIES), default=None,
              help=f"What of the body routes: the description only, plus each part's heading path, or plus its "
                   f"sentences (default: a stored skill's own policy, else {DEFAULT_KEY_POLICY}).")
@expires_option
@click.option("--verbose", "-v", is_flag=True, help="Warn of each skill whose name differs from its folder (else one count).")
@model_option
@json_option
@click.pass_context
def import_skills(ctx, paths, prune, keys, expires, verbose, model, as_json) -> None:
    """Import the skill folders at or under PATHS (a skill folder, or a root such as .agents/skills).

    A folder imported before and unchanged is left alone; a changed one becomes a new
    version (the default; the earlier ones are kept), and so does one imported again under
    another --keys. A folder that cannot be imported is skipped with the reason, and nothing
    of it is stored. An import runs no model. Progress counts skills (a long skill by fractions,
    as its keys are embedded): drawn on a terminal, else a line on stderr every 50 skills or 5 seconds.
    """
    memory = open_memory(ctx, model)
    with Activity("import skills", "finding skills", unit="skills", every=IMPORT_LINE_EVERY,
                  every_s=IMPORT_LINE_S) as progress:
        report = memory.skills.import_folders(list(paths), prune=prune, progress=progress, keys=keys, expires=expires)
    emit(report.as_dict(), as_json, lambda data: _render_import(data, verbose))


def _render_import(data: dict, verbose: bool = False) -> str:
    """The report for people; the skills whose name differs from their folder (the Agent Skills
    specification asks them to match, many collections do not) are one count unless ``verbose``."""
    lines = [f"imported {len(data['imported'])}, unchanged {len(data['unchanged'])}, skipped {len(data['skipped'])}"]
    mismatched = 0
    for item in data["imported"]:
        lines.append(f"imported   {item['name']} v{item['version']}: {len(item['blocks'])} parts ({item['reused']} reused)")
        for warning in item["warnings"]:
            if FOLDER_MISMATCH in warning and not verbose:
                mismatched += 1
                continue
            lines.append(f"  warning  {warning}")
    lines += [f"unchanged  {item['name']} v{item['version']}" for item in data["unchanged"]]
    lines += [f"skipped    {item['folder']}: {item['reason']}" for item in data["skipped"]]
    lines += [f"vanished   {item['name']} ({item['folder']})" + (": removed" if item["removed"] else "") for item in data["vanished"]]
    lines += [f"warning    {w}" for w in data["warnings"]]
    if mismatched:
        lines.append(f"warning    {mismatched} skill{'s' if mismatched != 1 else ''}: the name differs from the folder "
                     "(the Agent Skills specification asks them to match; --verbose names them)")
    return "\n".join(lines)


@skills.command("list")
@click.option("--all", "everything", is_flag=True, help="Also the skills past their expiry, marked expired.")
@json_option
@click.pass_context
def list_skills(ctx, everything, as_json) -> None:
    """List the imported skills (their default versions; not those past their expiry, unless --all).

    No model is loaded: a part kept as text shows its size in characters (chr), not tokens."""
    rows = [
        {"name": s.name, "version": s.default_version, "versions": s.versions, "blocks": len(s.parts),
         "tokens": s.n_tokens, "chars": s.n_chars, "model_invocable": s.model_invocable,
         "description": s.description, "expires_at": s.expires_at, "expired": s.expired}
        for s in open_memory(ctx).skills.list(include_expired=everything)
    ]
    emit({"rows": rows}, as_json, lambda d: "\n".join(
        f"{r['name']:24} v{r['version']:<3} {r['blocks']:>3} blocks {_size(r['tokens'], r['chars'])}"
        f"{'' if r['model_invocable'] else '  (by name only)'}{'  (expired)' if r['expired'] else ''}"
        f"  {r['description'][:60]}" for r in d["rows"]
    ) or "(no imported skills)")


def _size(tokens, chars: int) -> str:
    """Tokens where counted; else the text's size (a listing loads no model to count a text's tokens)."""
    return f"{tokens:>7} tok" if tokens is not None else f"{chars:>6} chr"


@skills.command("show")
@click.argument("name")
@click.option("--version", "version", type=int, default=None, help="A version other than the default.")
@json_option
@click.pass_context
def show_skill(ctx, name, version, as_json) -> None:
    """Show a skill: frontmatter, versions, sections and resources (its blocks), files, scripts, assets."""
    emit(open_memory(ctx).skills.get(name, version).as_dict(), as_json, _render_skill)


def _render_skill(d: dict) -> str:
    lines = [f"{d['name']} v{d['version']} (default v{d['default_version']}; versions {d['versions']})",
             f"description: {d['description']}", f"folder: {d['folder']}", f"keys: {d['keys']}",
             f"routed: {'yes' if d['model_invocable'] else 'no (disable-model-invocation: by name only)'}"]
    extra = {k: v for k, v in d["frontmatter"].items() if k not in ("name", "description")}
    lines += [f"frontmatter {k}: {v}" for k, v in extra.items()]
    lines += [f"part  {p['block_id']} {_size(p['n_tokens'], p['n_chars'])}  {p['role']:8} {p['title'] or '(top)'}"
              for p in d["parts"]]
    lines += [f"file  {f['size']:>8} B  {f['sha256'][:12]}  {f['path']}" for f in d["files"]]
    lines += [f"warning  {w}" for w in d["warnings"]]
    return "\n".join(lines)


@skills.command("update")
@click.argument("name")
@model_option
@json_option
@click.pass_context
def update_skill(ctx, name, model, as_json) -> None:
    """Read skill NAME's folder again: a changed folder becomes a new, default version."""
    memory = open_memory(ctx, model)
    with Activity(f"update {name}", f"reading {name}", unit="skills") as progress:
        report = memory.skills.update(name, progress=progress)
    emit(report.as_dict(), as_json, _render_import)


@skills.command("warm")
@click.argument("names", nargs=-1, required=True)
@click.option("--system", "--prefix", "system_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A file holding the app's system prompt (its prefix) the skills are used behind (default: none).")
@click.option("--app", "app", default=None,
              help="An app stored with `skillgraft apps add`: the skills are used behind its prefix "
                   "(not with --prefix).")
@derived_option
@model_option
@json_option
@click.pass_context
def warm_skills(ctx, names, system_file, app, derived_mib, model, as_json) -> None:
    """Capture the KV state of skills NAMES now, as their first use would (interrupt it and run
    it again: what is kept is skipped)."""
    system = read_text_file(system_file, "the app's prefix") if system_file else None
    memory = open_memory(ctx, model, derived_mib)
    with Activity(f"warm {' '.join(names)}", f"loading {memory.model}", unit="part") as progress:
        report = memory.skills.warm(list(names), system=system, app=app, progress=progress)
    emit(report.as_dict(), as_json, _render_warm)


def _render_warm(data: dict) -> str:
    lines = [f"warmed {len(data['warmed'])} part(s), {len(data['kept'])} kept already, {len(data['left_out'])} left out"]
    lines += [f"  left out {p['skill']} {p['title'] or '(top)'}: {p['reason']}" for p in data["left_out"]]
    return "\n".join(lines)


@skills.command("pin")
@click.argument("name")
@derived_option
@json_option
@click.pass_context
def pin_skill(ctx, name, derived_mib, as_json) -> None:
    """Keep skill NAME's KV states whatever the cache's LRU order (refused when the pinned
    states would outgrow the cache's budget)."""
    emit(open_memory(ctx, derived_mib=derived_mib).skills.pin(name).as_dict(), as_json, _render_cache)


@skills.command("unpin")
@click.argument("name")
@derived_option
@json_option
@click.pass_context
def unpin_skill(ctx, name, derived_mib, as_json) -> None:
    """Let skill NAME's KV states be evicted again, oldest use first."""
    emit(open_memory(ctx, derived_mib=derived_mib).skills.unpin(name).as_dict(), as_json, _render_cache)


@skills.command("cache")
@derived_option
@json_option
@click.pass_context
def cache(ctx, derived_mib, as_json) -> None:
    """Which skills have KV states kept, their bytes, pins, the budget and how much is used."""
    emit(open_memory(ctx, derived_mib=derived_mib).skills.cache().as_dict(), as_json, _render_cache)


def _render_cache(data: dict) -> str:
    lines = [f"used {data['used']:,} B of a {data['budget']:,} B budget a runtime, {data['pinned_bytes']:,} B pinned"]
    lines += [f"{s['name']:24} {s['states']:>4} states {s['n_bytes']:>14,} B{'  pinned' if s['pinned'] else ''}"
              for s in data["skills"]]
    lines.append(f"{'(no skill)':24} {data['other_states']:>4} states {data['other_bytes']:>14,} B")
    return "\n".join(lines)


@skills.command("expire")
@click.argument("name")
@click.option("--at", "at", default=None, metavar="WHEN",
              help="The new expiry: an ISO 8601 time, UTC unless it says otherwise, or a duration from now (30d, 12h).")
@click.option("--never", is_flag=True, help="Remove the expiry: it is kept and offered again.")
@json_option
@click.pass_context
def expire(ctx, name, at, never, as_json) -> None:
    """Set or remove the expiry of skill NAME, or of a manual or solution (a block's name or id).

    After its expiry it is hidden: never routed to, never answered from, listed only with
    --all; it is kept until `skills prune` or `skills rm` / `rm` removes it."""
    if (at is None) == (not never):
        raise click.UsageError("give --at WHEN or --never")
    emit(open_memory(ctx).expiry.set(name, None if never else at).as_dict(), as_json, _render_expiry)


@skills.command("prune")
@json_option
@click.pass_context
def prune(ctx, as_json) -> None:
    """Remove every skill, manual and solution whose expiry has passed (skills with their blocks)."""
    removed = open_memory(ctx).expiry.prune()
    emit({"removed": [r.as_dict() for r in removed]}, as_json, lambda d: "\n".join(
        f"removed {r['kind']:8} {r['name']} (expired at {r['expires_at']})" for r in d["removed"])
        or "nothing has expired")


def _render_expiry(data: dict) -> str:
    if data["expires_at"] is None:
        return f"{data['kind']} {data['name']}: no expiry"
    return f"{data['kind']} {data['name']}: {'expired' if data['expired'] else 'expires'} at {data['expires_at']}"


@skills.command("rm")
@click.argument("name")
@click.option("--version", "version", type=int, default=None, help="Remove only this version.")
@json_option
@click.pass_context
def rm_skill(ctx, name, version, as_json) -> None:
    """Remove skill NAME (every version, or one) and the blocks no other version holds."""
    removed = open_memory(ctx).skills.remove(name, version)
    emit({"name": name, "version": version, "removed_blocks": removed}, as_json)


@skills.command("default")
@click.argument("name")
@click.argument("version", type=int)
@json_option
@click.pass_context
def default_version(ctx, name, version, as_json) -> None:
    """Make VERSION the version of NAME that routing offers."""
    record = open_memory(ctx).skills.set_default(name, version)
    emit({"name": name, "default_version": record.default_version}, as_json)


@skills.command("export")
@click.argument("name")
@click.argument("dest", type=click.Path(file_okay=False))
@click.option("--version", "version", type=int, default=None, help="A version other than the default.")
@json_option
@click.pass_context
def export_skill(ctx, name, dest, version, as_json) -> None:
    """Write skill NAME back as the folder DEST/NAME, its files byte for byte as imported.

    What of its SKILL.md the Agent Skills reference validator refuses (a client field such as
    disable-model-invocation, a name against the rules ...) is listed: it is the skill's own, kept."""
    emit(open_memory(ctx).skills.export(name, dest, version).as_dict(), as_json, _render_export)


def _render_export(data: dict) -> str:
    lines = [f"exported   {data['name']} v{data['version']} to {data['folder']}: {len(data['files'])} files"]
    lines += [f"  spec     {problem} (as imported; the reference validator refuses it)" for problem in data["spec_problems"]]
    return "\n".join(lines)


@skills.command("eval")
@click.argument("name", required=False)
@click.option("--all-queries", is_flag=True, help="Also the training part (its positives are example keys).")
@click.option("--no-answers", is_flag=True, help="Only the trigger scores: evals/evals.json is not answered (no model is loaded).")
@click.option("--max-tokens", type=click.IntRange(1, 4096), default=EVAL_TOKENS, show_default=True,
              help="New tokens per answer of an evals.json prompt.")
@click.option("--limit", type=click.IntRange(1), default=None, help="Answer only the first N evals of each skill.")
@model_option
@json_option
@click.pass_context
def eval_skills(ctx, name, all_queries, no_answers, max_tokens, limit, model, as_json) -> None:
    """Trigger precision and recall of each skill (or NAME) on its eval_queries.json, and its
    evals/evals.json answered with the skill grafted and without.

    By default only the held-out part (about 40 % of the queries, chosen by a hash of each
    query) is routed: the other part's positive queries are the skill's example keys. Each
    evals.json prompt is answered twice at temperature 0 by --model (a name or a GGUF path;
    the skill's first block grafted, by name; then no skill): the evals passed (every
    machine-checkable assertion of one passes: contains, not_contains, regex) with a 95 %
    interval, the checks passed, prompt tokens, time to the first token and total time;
    natural-language assertions are counted as unchecked.
    """
    memory = open_memory(ctx, model)
    scores = memory.skills.eval_triggers(name, held_out_only=not all_queries)
    answers = []
    if not no_answers:
        with Activity("answer evals", f"loading {memory.model}", unit="answer") as progress:
            answers = memory.skills.eval_answers(name, max_tokens=max_tokens, limit=limit, progress=progress)
    data = {"model": memory.model, "skills": [s.as_dict() for s in scores], "answers": [a.as_dict() for a in answers]}
    emit(data, as_json, lambda d: _render_eval(d, all_queries, no_answers))


def _render_eval(d: dict, all_queries: bool, no_answers: bool) -> str:
    lines = [
        f"{s['name']:24} precision {_share(s['precision'])}  recall {_share(s['recall'])}  "
        f"({s['positives']} positive, {s['negatives']} negative queries)" for s in d["skills"]
    ] or ["no skill has eval queries" + ("" if all_queries else " in its held-out part")]
    if not no_answers:
        lines += [line for skill in d["answers"] for line in _render_answers(skill, d["model"])] \
            or ["no skill has evals/evals.json"]
    return "\n".join(lines)


def _render_answers(skill: dict, model: str) -> list[str]:
    summary = skill["summary"]
    lines = ["", f"{skill['name']} v{skill['version']}: {len(skill['evals'])} evals answered by {model} with block "
                 f"{skill['block_id']} ({skill['block_tokens']} tok) and without, up to {skill['max_tokens']} new tokens"]
    for e in skill["evals"]:
        lines.append(f"  eval {e['id'] if e['id'] is not None else '#' + str(e['index'])}: checks {len(e['checks'])}, "
                     f"unchecked {len(e['unchecked'])}" + (f", invalid {len(e['invalid'])}" if e["invalid"] else ""))
        for key, label in (("with_skill", "with"), ("without_skill", "without")):
            r = e[key]
            if r["error"]:
                lines.append(f"    {label:8} error: {r['error']}")
                continue
            passed = f"{r['passed']}/{r['checked']} passed" if r["checked"] else "no checks"
            lines.append(f"    {label:8} {r['decision']:8} prompt {r['prompt_tokens']:>5} tok ({r['reused_tokens']} reused)"
                         f"  generated {r['generated_tokens']:>4} tok  prefill {r['prefill_s']:.3f} s"
                         f"  generate {r['generate_s']:.3f} s  first token {r['ttft_s']:.3f} s"
                         f"  total {r['total_s']:.3f} s  {passed}")
        lines += [f"    file {f['status']:8} {f['path']}" + (f": {f['reason']}" if f["status"] != "present" else "")
                  for f in e["files"]]
        lines += [f"    invalid {i['reason']}" for i in e["invalid"]]
    for label, side in (("with", summary["with_skill"]), ("without", summary["without_skill"])):
        evals = side["evals"]
        lines.append(f"  {label:8} evals passed {evals['passed']}/{evals['n']} {_interval(evals)}"
                     f"  checks {side['passed']}/{side['checks']}  mean prompt {_tokens(side['prompt_tokens'])} tok"
                     f"  median first token {_seconds(side['ttft_s'])}  median total {_seconds(side['total_s'])}"
                     + (f"  errors {side['errors']}" if side["errors"] else ""))
    lines.append(f"  unchecked (natural language) {summary['unchecked']}"
                 + (f", invalid {summary['invalid']}" if summary["invalid"] else ""))
    lines += [f"  skipped eval {s['id'] if s['id'] is not None else '#' + str(s['index'])}: {s['reason']}"
              for s in skill["skipped"]]
    lines += [f"  warning {w}" for w in skill["warnings"]]
    if skill["left_out"]:
        lines.append(f"  {skill['left_out']} more evals left out (--limit)")
    return lines


def _tokens(value) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def _seconds(value) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def _interval(rate: dict) -> str:
    """A pass rate and its 95 % interval, in percent."""
    if rate["pass_rate"] is None:
        return "(n/a)"
    return f"({100 * rate['pass_rate']:.0f} %, 95 % CI {100 * rate['ci_low']:.0f}-{100 * rate['ci_high']:.0f})"


def _share(value) -> str:
    return "  n/a" if value is None else f"{value:5.2f}"


@skills.command("status")
@json_option
@click.pass_context
def status(ctx, as_json) -> None:
    """Say which imported skills' folders changed or vanished on disk (exit 1 when any did)."""
    changes = open_memory(ctx).skills.changes()
    emit({"changes": changes}, as_json, lambda d: "\n".join(
        f"{c['change']:10} {c['name']} v{c['version']} ({c['folder']}): {skill_change_hint(c)}" for c in d["changes"])
        or "every skill folder as imported")
    if changes:
        sys.exit(1)
