"""The commands that deposit, inspect, change and move blocks: add-manual, add-solution, list,
show/get, update, rename, rm, recapture, check, export and import."""

from __future__ import annotations

import sys

import click

from ..errors import StoreError
from .common import (
    Activity,
    emit,
    expires_option,
    json_option,
    model_option,
    open_memory,
    open_store,
    progress_bar,
    read_text_file,
    render_mapping,
    store_home,
)


@click.command("add-manual")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--example", "-e", "examples", multiple=True, help="An example query that should reach this manual.")
@click.option("--description", "-d", default="", help="One sentence saying what the skill is for.")
@click.option("--split", is_flag=True, help="One block per heading (NAME-1, NAME-2, ...), for a manual too long for one.")
@expires_option
@model_option
@json_option
@click.pass_context
def add_manual(ctx, name, file, examples, description, split, expires, model, as_json) -> None:
    """Capture the skill manual in FILE as a block named NAME.

    The manual is prefilled once and its KV state stored; NAME, the description,
    every --example and the manual's own sentences become routing keys. Use - as FILE to read standard input. A name
    that is taken, or a text already stored under another name, is refused before any
    capture.

    A manual longer than the context can hold is refused, unless --split is given: then
    each Markdown heading (a line starting with #) starts a block of its own, named
    NAME-1, NAME-2, ... with the heading as its description; a section still too long is
    cut at blank lines. Give examples to a part afterwards with `skillgraft update NAME-2 -e ...`.
    """
    from ..errors import ContextOverflowError

    text = read_text_file(file, "manual")
    if split:
        if examples:
            raise click.UsageError("--example cannot go with --split: give a part its examples with `skillgraft update`")
        if expires is not None:
            raise click.UsageError("--expires cannot go with --split: give each part its expiry with `skillgraft skills expire`")
        return _add_split_manual(ctx, name, text, description, model, as_json)
    memory = open_memory(ctx, model)
    with Activity(f"capture {name}", f"loading {memory.model}", unit="tok") as progress:
        try:
            block = memory.add_manual(name, text, examples=list(examples), description=description, progress=progress,
                                      expires=expires)
        except ContextOverflowError as exc:
            from ..skills.manual_split import with_split_hint

            how = f"`skillgraft add-manual {name} FILE --split` stores one block per heading (a line starting with #)"
            raise with_split_hint(exc, how) from None
    emit(_block_result(block), as_json)


def _add_split_manual(ctx, name: str, text: str, description: str, model, as_json: bool) -> None:
    """``add-manual --split``: every part is planned (and must fit) before the first capture."""
    from ..core.chat_layout import block_tokens
    from ..skills.manual_split import split_manual
    from ..errors import NameTakenError
    from ..skills.window_fit import block_room

    memory = open_memory(ctx, model)
    with Activity(f"capture {name}", f"loading {memory.model}, then splitting", unit="part") as progress:
        engine = memory.engine
        parts = split_manual(text, lambda part: len(block_tokens(engine, part)), block_room(engine.n_ctx))
        names = [f"{name}-{number}" for number in range(1, len(parts) + 1)]
        stored = {block.name: block for block in memory.blocks.list(include_quarantined=True)}
        for part_name, part in zip(names, parts):  # the same part stored already is no clash
            if part_name in stored and stored[part_name].source != part.text:
                raise NameTakenError(part_name, stored[part_name].id)
        blocks = []
        for done, (part_name, part) in enumerate(zip(names, parts), 1):
            about = " - ".join(filter(None, [description, part.title]))
            blocks.append(memory.add_manual(part_name, part.text, description=about))
            progress(done, len(parts))
    emit({"parts": [_block_result(block, title=part.title) for block, part in zip(blocks, parts)]}, as_json,
         lambda d: "\n".join(f"{p['block_id']}  {p['tokens']:>6} tok  {p['name']}  {p['title']}" for p in d["parts"]))


def _block_result(block, **extra) -> dict:
    return {
        "block_id": block.id,
        "name": block.name,
        "tokens": block.n_tokens,
        "bytes": block.n_bytes,
        "sha256": block.sha256,
        "expires_at": block.expires_at,
        **extra,
    }


@click.command("list")
@click.option("--kind", type=click.Choice(["manual", "solution"]), help="Only blocks of this kind.")
@click.option("--all", "everything", is_flag=True, help="Also the blocks past their expiry (or their skill's), marked expired.")
@json_option
@click.pass_context
def list_blocks(ctx, kind, everything, as_json) -> None:
    """List the blocks in the store (not those past their expiry, unless --all)."""
    memory = open_memory(ctx)
    skill_of, _ = memory.store.skill_routing()
    live = {b.id for b in memory.blocks.list(kind=kind, include_quarantined=True)}
    rows = [{**b.summary(), "skill": skill_of.get(b.id), "expired": b.id not in live}
            for b in memory.blocks.list(kind=kind, include_quarantined=True, include_expired=everything)]
    emit(
        {"rows": rows},
        as_json,
        lambda d: "\n".join(
            f"{r['id']}  {r['kind']:8} {r['status']:11} {r['n_tokens']:>6} tok  {r['name']}"
            + (f"  (skill {r['skill']})" if r["skill"] else "") + ("  (expired)" if r["expired"] else "")
            for r in d["rows"]
        )
        or "(the store is empty)",
    )


@click.command()
@click.argument("ref")
@json_option
@click.pass_context
def show(ctx, ref, as_json) -> None:
    """Show one block and its routing keys.

    REF is a block id, a unique id prefix, a name, or the question of a verified
    solution. `get` is the same command.
    """
    memory = open_memory(ctx)
    block = memory.blocks.get(ref)
    keys = [{"kind": k["kind"], "text": k["text"]} for k in memory.blocks.store_of(block).routing_keys(block.id)]
    emit({**block.summary(), "routing_keys": keys}, as_json, _render_block)




def _render_block(data: dict) -> str:
    fields = {k: v for k, v in data.items() if k != "routing_keys" and v is not None}
    keys = [f"  {key['kind']:11} {key['text']}" for key in data["routing_keys"]]
    return render_mapping(fields) + "\nrouting_keys:" + ("\n" + "\n".join(keys) if keys else " (none)")


@click.command()
@click.argument("ref")
@click.option("--file", "-f", "file", type=click.Path(dir_okay=False), help="New text, re-captured; a manual stored as text stays text (- reads standard input).")
@click.option("--example", "-e", "examples", multiple=True, help="Replaces the example queries (repeat for several).")
@click.option("--description", "-d", default=None, help="Replaces the description.")
@model_option
@json_option
@click.pass_context
def update(ctx, ref, file, examples, description, model, as_json) -> None:
    """Change a block and keep its name: new text (re-captured), examples or description.

    REF is a block id, a unique id prefix, a name or a solution's question. A new text
    gives a new block id; the old block is removed once the new one is stored.
    """
    if file is None and not examples and description is None:
        raise click.UsageError("nothing to update: give --file, --example or --description")
    text = read_text_file(file, "text") if file is not None else None
    memory = open_memory(ctx, model)
    before = memory.blocks.get(ref)
    with Activity(f"capture {before.name}", f"loading {memory.model}", unit="tok") as progress:
        block = memory.blocks.update(
            before.id, text=text, examples=list(examples) or None, description=description, progress=progress
        )
    emit(_block_result(block, previous_block_id=before.id), as_json)


@click.command()
@click.argument("ref")
@click.argument("new_name")
@json_option
@click.pass_context
def rename(ctx, ref, new_name, as_json) -> None:
    """Give a block (by id, id prefix, name or question) the name NEW_NAME."""
    memory = open_memory(ctx)
    before = memory.blocks.get(ref)
    block = memory.blocks.rename(before.id, new_name)
    emit({"block_id": block.id, "name": block.name, "previous_name": before.name}, as_json)


@click.command()
@click.argument("ref")
@json_option
@click.pass_context
def rm(ctx, ref, as_json) -> None:
    """Remove a block (by id, id prefix, name or question): its row, routing keys and file."""
    block = open_memory(ctx).blocks.delete(ref)
    emit({"removed": block.id, "name": block.name}, as_json)


@click.command()
@model_option
@json_option
@click.pass_context
def recapture(ctx, model, as_json) -> None:
    """Capture every block again under the current runtime (model, build, settings).

    After an upgrade or a settings change, blocks captured under the old runtime no
    longer graft; this prefills each one's stored source text again and stores the new
    state under the same name.
    """
    memory = open_memory(ctx, model)
    with Activity("recapture", f"loading {memory.model}", unit="block") as progress:
        report = memory.blocks.recapture(progress=progress).as_dict()
    emit(report, as_json, _render_recapture)
    if report["failed"]:
        sys.exit(1)


def _render_recapture(report: dict) -> str:
    lines = [f"{len(report['recaptured'])} recaptured, {len(report['unchanged'])} unchanged, {len(report['failed'])} failed"]
    lines += [f"recaptured {r['name']}: {r['old']} -> {r['new']}" for r in report["recaptured"]]
    lines += [f"failed     {r['name']} ({r['block_id']}): {r['error']}" for r in report["failed"]]
    return "\n".join(lines)


@click.command()
@click.option("--repair", is_flag=True, help="Settle what is wrong: quarantine, re-capture, clean up.")
@model_option
@json_option
@click.pass_context
def check(ctx, repair, model, as_json) -> None:
    """Verify every block file against the catalog (size and SHA-256).

    With --repair: corrupt files go to quarantine/, blocks are re-captured from their
    stored source text when the runtime matches (byte-identical), temp files of
    interrupted writes are deleted, files without a catalog row are quarantined, and
    manuals stored before manuals gave routing keys get their sentence keys.

    Imported skills whose folder changed or vanished on disk are listed (skills_changed, present
    when the store holds imported skills);
    that is news, not a problem of the store: `skillgraft skills update NAME` takes the change.
    """
    store_home(ctx)
    try:
        memory = open_memory(ctx, model)
    except StoreError as exc:  # a catalog that cannot even be opened is the problem to report
        report = {"blocks": 0, "ok": False, "problems": [{"block_id": None, "problem": str(exc)}], "repaired": []}
    else:
        report = memory.blocks.check(repair=repair).as_dict()
        if memory.skills.names(include_expired=True):  # a store without imported skills reports as it always did
            report["skills_changed"] = memory.skills.changes()
    emit(report, as_json, _render_check)
    if not report["ok"]:
        sys.exit(1)


def _render_check(report: dict) -> str:
    lines = [f"{report['blocks']} blocks, {'ok' if report['ok'] else 'problems found'}"]
    for item in report["repaired"]:
        lines.append(f"repaired  {item.get('block_id') or item.get('file')}: {item['problem']} -> {item['action']}")
    for item in report["problems"]:
        lines.append(f"problem   {item.get('block_id') or item.get('file')}: {item['problem']}")
    for item in report.get("skills_changed", []):
        lines.append(f"skill     {item['name']} v{item['version']}: its folder {item['change']} ({item['folder']}): "
                     + skill_change_hint(item))
    return "\n".join(lines)


def skill_change_hint(item: dict) -> str:
    """What to run for a skill whose folder changed (update), vanished (rm) or is unreadable."""
    if item["change"] == "vanished":
        return f"skillgraft skills rm {item['name']} (or skills import --prune the folder above it)"
    if item["change"] == "unreadable":
        return f"{item.get('reason', 'it cannot be read')}; fix it, then skillgraft skills update {item['name']}"
    changed = f"{', '.join(item['files'][:5])}{' ...' if len(item['files']) > 5 else ''} changed: " if item.get("files") else ""
    return f"{changed}skillgraft skills update {item['name']}"


@click.command("export")
@click.argument("path", type=click.Path(dir_okay=False))
@json_option
@click.pass_context
def export_command(ctx, path, as_json) -> None:
    """Write every healthy block to a portable bundle (a tar file) at PATH.

    The bundle is written to a new file beside PATH and renamed over it: a link at PATH is
    replaced, never written through.
    """
    from ..bundles.transfer import export_bundle

    with progress_bar("export", not as_json) as progress:
        report = export_bundle(open_store(ctx), path, progress)
    emit(report.as_dict(), as_json)


@click.command("import")
@click.argument("path", type=click.Path(dir_okay=False, exists=True))
@click.option(
    "--allow-foreign",
    is_flag=True,
    help="Also take blocks captured under another runtime: re-captured here from their source text "
    "(kept as they are with --trust-payloads).",
)
@click.option(
    "--trust-payloads",
    is_flag=True,
    help="Skip recomputing each payload from its source text (sizes, SHA-256 and ids are still checked; "
    "solutions are still re-verified).",
)
@model_option
@json_option
@click.pass_context
def import_command(ctx, path, allow_foreign, trust_payloads, model, as_json) -> None:
    """Check and import a bundle, all or nothing; report what was imported and what was skipped, and why.

    Each payload is recomputed from its source text (one prefill per block) and must match;
    each solution is re-verified by re-running its method; routing vectors are embedded
    again. A malformed or unsafe bundle imports nothing.
    """
    from ..bundles.transfer import import_bundle

    memory = open_memory(ctx, model)
    with progress_bar("import", not as_json) as progress:
        report = import_bundle(
            memory, path, allow_foreign=allow_foreign, trust_payloads=trust_payloads, progress=progress
        )
    emit(report.as_dict(), as_json, _render_import)


def _render_import(data: dict) -> str:
    lines = [f"imported {data['blocks']} blocks, skipped {len(data['skipped'])}"]
    lines += [f"imported  {b['block_id']} {b['name']}: {b['how']}" for b in data["imported"]]
    lines += [f"skipped   {b['block_id']} {b['name']}: {b['reason']}" for b in data["skipped"]]
    return "\n".join(lines)



@click.command("add-solution")
@click.option("--question", "-q", required=True, help="The question the solution answers.")
@click.option("--answer", "-a", required=True, help="The answer to deposit.")
@click.option("--method", "method_file", type=click.Path(dir_okay=False), help="File with the method: python code for --verify python (- reads standard input).")
@click.option("--method-code", help="The method itself, inline (instead of --method FILE).")
@click.option("--verify", "verifier", required=True, type=click.Choice(["python", "exact", "numeric"]), help="How to verify.")
@click.option("--expected", help="Ground truth for --verify exact or numeric.")
@expires_option
@model_option
@json_option
@click.pass_context
def add_solution(ctx, question, answer, method_file, method_code, verifier, expected, expires, model, as_json) -> None:
    """Verify a solution and deposit it; a failing one is refused and nothing is stored.

    The method (what --verify python runs) comes from --method FILE or, inline, from
    --method-code CODE; give one of them at most.
    """
    if method_file is not None and method_code is not None:
        raise click.UsageError("give --method FILE or --method-code CODE, not both")
    code = read_text_file(method_file, "method") if method_file is not None else method_code
    memory = open_memory(ctx, model)
    with Activity("add-solution", f"verifying, then capturing with {memory.model}"):
        block = memory.add_solution(question, answer, method=code, verifier=verifier, expected=expected, expires=expires)
    emit({"block_id": block.id, "verified": True, "verifier": block.verifier, "question": block.question,
          "expires_at": block.expires_at}, as_json)
