"""Operating on messages: requeue and the dead letters."""

from __future__ import annotations

import click
from flask.cli import AppGroup

from app.cli.setup import os_user
from app.clock import utcnow
from app.db import get_db
from app.providers.base import FailureClass
from app.repo import requeues, staff
from app.repo.cancels import MessageNotFoundError, cancel_message
from app.repo.queue import dead_letters
from jobs.ringing import ring_message

message_cli = AppGroup("message", help="Messages: requeue, cancel, dead letters.")


@message_cli.command("requeue")
@click.argument("message_id", type=int)
@click.option("--by", "actor", default=None, help="who requeues (default: the OS user)")
@click.option("--force", is_flag=True, help="requeue although it may have reached the phone")
@click.option("--reason", help="why; required with --force")
def message_requeue(message_id: int, actor: str | None, force: bool, reason: str | None) -> None:
    """Requeue a failed message as a new cycle (the one backward move), and ring it."""
    actor = actor or os_user()
    try:
        with get_db().transaction() as session:
            message = requeues.requeue_message(
                session, message_id, utcnow(), actor=actor, force=force, reason=reason
            )
            staff.record_audit(
                session,
                actor,
                "message.requeue",
                f"message:{message_id}",
                utcnow(),
                {"forced": force, "reason": reason, "cycle": message.cycle, "via": "cli"},
                tenant_id=message.tenant_id,
            )
    except requeues.RequeueRefusedError as exc:
        raise click.ClickException(str(exc)) from exc
    key = (
        "the same provider key (an earlier attempt's outcome was unknown: the provider may hold it)"
        if message.provider_key_cycle != message.cycle
        else "a new provider key (the failed cycle had only definite rejections)"
    )
    rung = ring_message(message.id, message.lane, message.identity_id)
    click.echo(
        f"requeued message {message_id} by {actor} as cycle {message.cycle}, under {key}; "
        + ("rung" if rung else "Redis unreachable: the sweeper will ring it")
    )


@message_cli.command("cancel")
@click.argument("message_id", type=int)
@click.option("--reason", required=True, help="why it must not be sent (audited)")
@click.option("--by", "actor", default=None, help="who cancels (default: the OS user)")
def message_cancel(message_id: int, reason: str, actor: str | None) -> None:
    """Cancel a message no worker has claimed yet: it ends failed (canceled), never sent."""
    actor = actor or os_user()
    if not reason.strip():
        raise click.UsageError("--reason must say why")
    try:
        with get_db().transaction() as session:
            outcome = cancel_message(
                session, message_id, utcnow(), actor=actor, reason=reason.strip(), via="cli"
            )
    except MessageNotFoundError as exc:
        raise click.ClickException(f"message {message_id} does not exist") from exc
    if not outcome.canceled:
        raise click.ClickException(f"message {message_id} not canceled: {outcome.why_not}")
    click.echo(f"canceled message {message_id} by {actor}: it will never be sent")


@message_cli.command("dead-letters")
@click.option(
    "--class",
    "failure_class",
    type=click.Choice([c.value for c in FailureClass]),
    help="only this failure class",
)
@click.option("--limit", default=100, show_default=True)
def message_dead_letters(failure_class: str | None, limit: int) -> None:
    """Failed messages with their class and verbatim reason, the actionable ones first."""
    with get_db().transaction() as session:
        letters = dead_letters(session, failure_class=failure_class, limit=limit)
    if not letters:
        click.echo("no dead letters" + (f" of class {failure_class}" if failure_class else ""))
        return
    click.echo(f"{'id':>8}  {'class':<12} {'code':>7}  {'failed at (UTC)':<19}  {'to':<16} reason")
    for letter in letters:
        failed_at = letter.failed_at.strftime("%Y-%m-%d %H:%M:%S") if letter.failed_at else ""
        click.echo(
            f"{letter.message_id:>8}  {letter.failure_class:<12} "
            f"{letter.code if letter.code is not None else '':>7}  {failed_at:<19}  "
            f"{letter.recipient:<16} {letter.title or ''}"
        )
    click.echo(f"{len(letters)} dead letters")
