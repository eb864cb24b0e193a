"""An acceptance that arrives after its message was requeued and sent again (same intent,
same provider key: the failed cycle had an unknown outcome) is recorded in its own cycle's
log and flagged as a double send, since the provider now holds two accepted copies.
(Found by review: it was dropped as "not recorded", with nothing flagged.)
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from app.config import Config
from app.crypto import SecretBox
from app.db import Database
from app.models import MessageEvent
from app.providers.base import FailureClass, ProviderError, SendResult
from app.repo.attempts import start_attempt
from app.repo.claims import claim_message
from app.repo.messages import get_message
from app.repo.requeues import requeue_message
from jobs.record import record_outcome
from jobs.send import provider_key_for, send_one

from ..conftest import SECRET_KEY, T0
from ..factories import make_message, make_world

CONFIG = Config.from_env({}, {"secret_key": SECRET_KEY})
LEASE = timedelta(seconds=CONFIG.lease_seconds)


def test_a_late_acceptance_after_a_requeue_and_resend_is_logged_and_flagged_as_a_double_send(
    db: Database,
) -> None:
    message_id = make_message(db, make_world(db))
    # A claims attempt 1 and calls; the provider accepts (wamid.A); A is stopped before
    # its record transaction, its answer in hand.
    with db.transaction() as session:
        claim_a = claim_message(session, message_id, T0, LEASE)
        assert claim_a is not None
        m = get_message(session, message_id)
        start_attempt(
            session, claim_a, provider_key_for(m.id, m.provider_key_cycle, m.fingerprint), T0
        )
        counts_a = (m.unknown_attempts, m.rate_limited_attempts, m.had_unknown_outcome)
    # The lease expires: a re-claim makes no call and waits the grace (webhooks are late).
    t1 = T0 + LEASE + timedelta(seconds=1)
    outcome, _ = send_one(db, SecretBox(SECRET_KEY), CONFIG, message_id, lambda: t1)
    assert "lease expired" in outcome
    # The retry is answered with a definite rejection: failed.
    t2 = t1 + timedelta(seconds=CONFIG.webhook_grace + 1)
    with db.transaction() as session:
        claim_c = claim_message(session, message_id, t2, LEASE)
        assert claim_c is not None
        rejected = SendResult(
            failure=FailureClass.PERMANENT,
            error=ProviderError(provider="whatsapp", code=131047, title="Re-engagement message"),
            http_status=400,
        )
        record_outcome(session, CONFIG, claim_c, rejected, counts_a, t2, "campaign")
    # An operator requeues it: nothing says the provider holds a copy yet.
    t3 = t2 + timedelta(minutes=5)
    with db.transaction() as session:
        requeued = requeue_message(session, message_id, t3, actor="ops")
        assert requeued.cycle == 2
    # Cycle 2 goes out and is accepted (wamid.B).
    t4 = t3 + timedelta(seconds=1)
    with db.transaction() as session:
        claim_2 = claim_message(session, message_id, t4, LEASE)
        assert claim_2 is not None
        m = get_message(session, message_id)
        start_attempt(
            session, claim_2, provider_key_for(m.id, m.provider_key_cycle, m.fingerprint), t4
        )
        record_outcome(
            session,
            CONFIG,
            claim_2,
            SendResult(provider_message_id="wamid.B", http_status=200),
            (0, 0, False),
            t4,
            "campaign",
        )
    # A resumes and records its acceptance (wamid.A).
    t5 = t4 + timedelta(seconds=1)
    with db.transaction() as session:
        late = record_outcome(
            session,
            CONFIG,
            claim_a,
            SendResult(provider_message_id="wamid.A", http_status=200),
            counts_a,
            t5,
            "campaign",
        )
        kinds = [
            (e.cycle, e.kind, e.detail)
            for e in session.scalars(
                select(MessageEvent)
                .where(MessageEvent.message_id == message_id)
                .order_by(MessageEvent.id)
            )
        ]
        m = get_message(session, message_id)
    assert late[0].startswith("accepted")
    assert any(kind == "double_send" for _, kind, _ in kinds), (
        "two accepted copies of one intent (same provider key), nothing flagged"
    )
