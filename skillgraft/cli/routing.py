"""The commands that teach and move the router: feedback (give, list, rm) and reembed."""

from __future__ import annotations

from typing import Optional

import click

from .common import Activity, SkillgraftGroup, emit, json_option, open_memory, open_store


class _FeedbackGroup(SkillgraftGroup):
    """``feedback QUERY ...`` gives a correction; ``feedback list`` and ``feedback rm ID`` manage them."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["give", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_FeedbackGroup)
def feedback() -> None:
    """Correct the router: `feedback QUERY --expected NAME` or `--none`; `feedback list`; `feedback rm ID`.

    A query that was misrouted or abstained becomes a routing key of the block it belongs
    to; a query that should have abstained becomes a negative, and queries close to it
    abstain. Each correction is logged with who gave it (`$SKILLGRAFT_ACTOR`, else
    user@host) and when. Verified answers and exact lookups are never changed.
    """


@feedback.command("give")
@click.argument("query")
@click.option("--expected", help="The block (name or id) the query belongs to.")
@click.option("--none", "no_skill", is_flag=True, help="No skill fits the query: it should abstain.")
@json_option
@click.pass_context
def give(ctx, query: str, expected: Optional[str], no_skill: bool, as_json: bool) -> None:
    """Correct the routing of QUERY (`skillgraft feedback QUERY ...` runs this)."""
    if (expected is None) == (not no_skill):
        raise click.UsageError("give exactly one of --expected NAME and --none")
    memory = open_memory(ctx)
    with Activity("feedback", "loading the embedder"):
        result = memory.feedback(query, None if no_skill else expected)
    emit(result.as_dict(), as_json)


@feedback.command("list")
@json_option
@click.pass_context
def list_feedback(ctx, as_json: bool) -> None:
    """Every correction, oldest first: id, kind, block, who, when and the query."""
    from ..routing.feedback import list_corrections

    rows = [c.as_dict() for c in list_corrections(open_memory(ctx))]
    emit({"rows": rows}, as_json, _render_corrections)


def _render_corrections(data: dict) -> str:
    if not data["rows"]:
        return "no corrections"
    return "\n".join(
        f"{r['id']:>6}  {r['kind']:8}  {r['block_id'] or '(no skill)':16}  {r['created_by'] or '':20}  "
        f"{(r['created_at'] or '')[:19]}  {r['text']}"
        for r in data["rows"]
    )


@feedback.command("rm")
@click.argument("correction_id", type=int)
@json_option
@click.pass_context
def rm_feedback(ctx, correction_id: int, as_json: bool) -> None:
    """Remove the correction CORRECTION_ID (see `feedback list`)."""
    from ..routing.feedback import remove_correction

    emit(remove_correction(open_memory(ctx), correction_id).as_dict(), as_json)


@click.command()
@click.option("--embedder", "spec", required=True, envvar="SKILLGRAFT_EMBEDDER",
              help="The encoder to move to: minilm, mpnet, a model folder or an http(s):// embeddings endpoint.")
@click.option("--force", is_flag=True, help="Embed every key again even when the store is already on this encoder.")
@json_option
@click.pass_context
def reembed(ctx, spec: str, force: bool, as_json: bool) -> None:
    """Re-embed every routing key with another encoder and record it as the store's.

    Crash-safe and safe on a shared store: the new vectors are staged beside the old ones and
    switched in one transaction; until then the store routes on its old encoder.
    """
    from ..routing.encoders import make_embedder
    from ..routing.reembed import reembed as run_reembed

    store = open_store(ctx)
    embedder = make_embedder(spec)
    with Activity("reembed", f"loading {spec}", unit="key") as progress:
        report = run_reembed(store, embedder, force=force, progress=progress)
    emit(report.as_dict(), as_json)
