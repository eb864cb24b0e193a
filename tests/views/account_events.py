"""Messages an account event acts on: campaign messages using a template (`templated`), what a
drain would claim of them now (`claimable_ids`, rolled back), and a message's event kinds.
"""

from __future__ import annotations

import itertools
from datetime import timedelta

from sqlalchemy import select

from app.db import Database
from app.models import MessageEvent
from app.repo.claims import claim_batch
from app.repo.messages import NewMessage, create_message

from ..conftest import T0
from ..factories import World

LEASE = timedelta(seconds=25)
NOW = T0 + timedelta(minutes=5)
TEMPLATE = {"name": "order_update", "language": "en_US"}
_recipients = itertools.count(15550000001)


def templated(db: Database, world: World, template: dict[str, str] = TEMPLATE) -> int:
    """A campaign message using `template`, each to its own recipient (a conversation's
    messages go in order: one held would keep the next waiting too)."""
    with db.transaction() as session:
        message, _ = create_message(
            session,
            NewMessage(
                tenant_id=world.tenant_id,
                identity_id=world.identity_id,
                recipient=str(next(_recipients)),
                lane="campaign",
                fingerprint="f" * 64,
                template=dict(template),
            ),
            T0,
        )
        return message.id


class _Undo(Exception):
    pass


def claimable_ids(db: Database, world: World) -> list[int]:
    """What a drain's claim takes now (rolled back: nothing is really claimed)."""
    found: list[int] = []
    try:
        with db.transaction() as session:
            claims = claim_batch(session, world.identity_id, "campaign", 50, NOW, LEASE)
            found = sorted(claim.message_id for claim in claims)
            raise _Undo
    except _Undo:
        pass
    return found


def kinds(db: Database, message_id: int) -> list[str]:
    with db.transaction() as session:
        return list(
            session.scalars(
                select(MessageEvent.kind)
                .where(MessageEvent.message_id == message_id)
                .order_by(MessageEvent.id)
            )
        )
