"""An identity's default validity end to end (issue 34), against the sandbox provider
with the worker's clock passed in: a message sent without a validity of its own gets its
lane's default, is sent while it holds, and once past it ends `failed` with class
`expired`, never called."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from app.models import MessageEvent
from app.repo.identity_validity import set_default_validity

from .conftest import Env
from .drain_runs import run_drain


def set_defaults(env: Env, identity_id: int, **seconds: int | None) -> None:
    with env.db.transaction() as session:
        set_default_validity(session, identity_id, seconds, actor="test", now=env.now, via="test")


def test_a_message_past_its_lanes_default_validity_fails_expired_and_is_never_sent(
    env: Env,
) -> None:
    number = env.number()
    identity_id = number["identity_id"]
    set_defaults(env, identity_id, reply=600, campaign=86400)
    message_id = env.send(number, "15557710001", lane="reply")
    expires_at = env.message(message_id).expires_at
    created_at = env.message(message_id).created_at
    assert expires_at is not None and expires_at - created_at == timedelta(minutes=10)

    env.now = expires_at  # the drain comes at the very end of its validity
    run_drain(env, identity_id, "reply", "late")

    assert env.requests(number) == []
    row = env.message(message_id)
    assert (row.status, row.failure_class, row.dead_letter_rank) == ("failed", "expired", None)
    with env.db.transaction() as session:
        kinds = session.scalars(
            select(MessageEvent.kind).where(MessageEvent.message_id == message_id)
        ).all()
    assert "expired" in kinds


def test_a_message_within_its_lanes_default_validity_is_sent(env: Env) -> None:
    number = env.number()
    identity_id = number["identity_id"]
    set_defaults(env, identity_id, reply=600, campaign=86400)
    message_id = env.send(number, "15557710002", lane="campaign")
    expires_at = env.message(message_id).expires_at
    assert expires_at is not None
    # Past the reply lane's 10 minutes, within the campaign lane's day.
    env.now = expires_at - timedelta(hours=23)
    run_drain(env, identity_id, "campaign", "in-time")
    assert len(env.accepted(number)) == 1
    assert env.message(message_id).status in ("sent", "delivered", "read")
