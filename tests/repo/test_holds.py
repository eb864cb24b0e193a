"""The provider-may-hold rule asked for a page of messages at once answers for each exactly
what it answers for that message alone (the dead-letter page asks it this way)."""

from __future__ import annotations

from sqlalchemy import select

from app.db import Database
from app.models import Message
from app.repo.holds import holds_for
from app.repo.requeues import provider_may_hold

from ..views.dashboard_world import failed_message, make_tenants


def test_a_batch_answers_for_each_message_what_it_answers_alone(db: Database) -> None:
    tenants = make_tenants(db)
    plain = failed_message(db, tenants.acme)
    held = failed_message(db, tenants.acme, accepted_id="wamid.SECONDCOPY", minute=1)
    other = failed_message(db, tenants.other, accepted_id="wamid.OTHER", minute=2)
    unknown = failed_message(db, tenants.acme, had_unknown=True, minute=3)
    ids = [plain, held, other, unknown]
    with db.transaction() as session:
        messages = list(session.scalars(select(Message).where(Message.id.in_(ids))))
        together = holds_for(session, messages)
        alone = {m.id: provider_may_hold(session, m) for m in messages}
    assert together == alone
    assert together[plain] is None and together[unknown] is None
    assert together[held] == (
        "provider id wamid.SECONDCOPY was accepted in cycle 1 and never reported failed"
    )
    assert together[other] is not None and "wamid.OTHER" in together[other]


def test_no_messages_ask_nothing(db: Database) -> None:
    with db.transaction() as session:
        assert holds_for(session, []) == {}
