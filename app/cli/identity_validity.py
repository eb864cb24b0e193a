"""`identity validity ID`: each lane's default validity, shown or changed (audited)."""

from __future__ import annotations

import click

from app.cli.setup import os_user
from app.clock import utcnow
from app.db import get_db
from app.repo import identities
from app.repo.identity_validity import lane_default, set_default_validity
from app.validity import LANES, ValidityError, describe_validity, parse_validity

WRITTEN = "seconds, or 10m, 24h, 2d; `none` for no limit"


def _describe(values: dict[str, int | None]) -> str:
    return "; ".join(f"{lane} lane {describe_validity(values[lane])}" for lane in LANES)


@click.command("validity")
@click.argument("identity_id", type=int)
@click.option("--reply", help=f"Default validity of reply messages: {WRITTEN}.")
@click.option("--campaign", help=f"Default validity of campaign messages: {WRITTEN}.")
def identity_validity_command(identity_id: int, reply: str | None, campaign: str | None) -> None:
    """Show how long an identity's messages may still be sent when their request gives no
    `valid_for` or `expires_at`; with options, change it (audited).

    A lane left out keeps its value. At most 35 days, like `valid_for`.
    """
    given = {
        lane: text for lane, text in (("reply", reply), ("campaign", campaign)) if text is not None
    }
    try:
        wanted = {lane: parse_validity(text) for lane, text in given.items()}
    except ValidityError as exc:
        raise click.ClickException(f"{exc}; nothing changed") from exc
    with get_db().transaction() as session:
        identity = identities.get_identity(session, identity_id)
        if identity is None:
            raise click.ClickException(f"no identity with id {identity_id}")
        before = {lane: lane_default(identity, lane) for lane in LANES}
        if not wanted:
            click.echo(f"identity {identity_id} default validity: {_describe(before)}")
            return
        changed = set_default_validity(
            session, identity_id, wanted, actor=os_user(), now=utcnow(), via="cli"
        )
    # What the locked row held (another change may have come between the two reads).
    before.update({lane: was for lane, (was, _) in changed.items()})
    after = {**before, **wanted}
    if not changed:
        click.echo(f"identity {identity_id} default validity unchanged: {_describe(after)}")
        return
    click.echo(
        f"identity {identity_id} default validity now: {_describe(after)} "
        f"(was: {_describe(before)})"
    )
