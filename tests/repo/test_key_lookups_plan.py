"""A status row finished by its id, and a message's timestamp filled by its id, read a
handful of rows however many statuses are pending and messages undelivered, even when the
statistics were taken while none were: PostgreSQL then rated `applied_at IS NULL` (or
`delivered_at IS NULL`) at one row, as it rates the primary key, and walked that column's
index, filtering on the id (found in `bench/webhook_rate.py`); the same for a message's
`provider_message_id IS NULL` while it is being sent. The NULL tests are kept out
of the indexes' reach (`app/repo/sql.py`, `still_null`). Every statement the calls below
make is run once more under `EXPLAIN ANALYZE` in a savepoint rolled back at once, so the
plans checked are those of the exact SQL and values the code sends. PostgreSQL only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, text

from app.db import Database
from app.models import Message, WebhookStatus
from app.repo.accept_batch import Acceptance, accept_many
from app.repo.acceptance import accept_at_once, record_late_acceptance
from app.repo.claims import Claim, claim_message
from app.repo.give_back import release_unsent
from app.repo.inbox import claim_status, load_status, parked_status_ids
from app.repo.matching import record_provider_id
from app.repo.status_apply import apply_matched_by_provider_id
from app.repo.transitions import _fill_timestamp

from ..conftest import T0
from ..factories import make_world
from .plans import MESSAGES, STATUSES, delivered_history, plans_of, rows_read

BEFORE = 300
BURST = 1500


def test_rows_found_by_their_key_read_no_others_whatever_the_statistics_say(
    db: Database,
) -> None:
    if db.engine.dialect.name != "postgresql":
        pytest.skip("the plan checked is PostgreSQL's")
    world = make_world(db)
    common = {"tenant": world.tenant_id, "identity": world.identity_id, "t0": T0}
    with db.transaction() as session:
        # The statistics as they were before a backlog: everything applied and delivered...
        delivery = delivered_history(session, common, BEFORE)
        session.execute(text("ANALYZE messages, webhook_statuses"))  # (rolled back)
        # ...then sent messages and their statuses, pending, that they have not seen, and
        # messages being sent, with no provider id yet.
        session.execute(
            MESSAGES,
            {**common, "status": "sent", "tag": "new", "delivered_at": None}
            | {"with_ids": True, "count": BURST},
        )
        session.execute(
            MESSAGES,
            {**common, "status": "sending", "tag": "out", "delivered_at": None}
            | {"with_ids": False, "count": BURST},
        )
        session.execute(
            STATUSES,
            {**common, "delivery": delivery, "tag": "new", "applied_at": None}
            | {"result": None, "count": BURST},
        )

        def status_of(n: int) -> int:
            return session.execute(
                select(WebhookStatus.id).where(WebhookStatus.dedupe_key == f"new-{n}")
            ).scalar_one()

        def message_of(n: int) -> int:
            return session.execute(
                select(Message.id).where(Message.provider_message_id == f"wamid.new.{n}")
            ).scalar_one()

        applied, claimed, filled = status_of(700), status_of(701), message_of(702)
        sending = list(
            session.scalars(
                select(Message.id)
                .where(Message.status == "sending")
                .order_by(Message.id)
                .offset(BURST // 2)
                .limit(7)
            )
        )
        session.execute(
            text(
                "INSERT INTO attempts (message_id, cycle, number, provider_key, started_at) "
                "SELECT id, 1, 1, 'key-' || id, :t0 FROM messages WHERE id = ANY(:ids)"
            ),
            {"ids": sending[:3] + sending[5:], "t0": T0},
        )

    def claim(message_id: int) -> Claim:
        return Claim(message_id, world.identity_id, 1, 1, lease_lost=False, claimed_at=T0)

    with plans_of(db) as plans, db.transaction() as session:
        stored = load_status(session, applied)
        assert stored is not None
        # The one-statement apply: the status row finished, the message moved.
        assert apply_matched_by_provider_id(session, stored, T0) == "applied"
        # The step-by-step path's own steps.
        assert claim_status(session, claimed)
        _fill_timestamp(session, filled, 1, "delivered_at", T0)
        assert len(parked_status_ids(session, world.identity_id, "wamid.new.703")) == 1
        # The send side: an acceptance in one statement, a late one, an id adopted.
        accepted = accept_at_once(
            session,
            claim(sending[0]),
            "wamid.accepted",
            T0,
            http_status=200,
            response_body="{}",
            unknown_attempts=0,
            had_unknown=False,
        )
        assert accepted is not None and accepted.applied
        record_late_acceptance(session, claim(sending[1]), "wamid.late", T0)
        record_provider_id(session, sending[2], 1, "wamid.adopted")
        assert claim_message(session, sending[3], T0, timedelta(seconds=30)) is not None
        # A stood-down attempt giving its message back.
        assert release_unsent(session, claim(sending[4]), T0)
        # A drain's batch of acceptances in one statement, then its parked statuses.
        batch = [
            Acceptance(m, 1, 1, world.identity_id, f"wamid.b{m}", 200, "{}", 0, False)
            for m in sending[5:]
        ]
        assert len(accept_many(session, batch, T0)) == 2

    assert len(plans) >= 13, [statement for statement, _ in plans]
    for statement, plan in plans:
        scans = rows_read(plan[0]["Plan"])
        assert all(kind != "Seq Scan" for kind, _, _ in scans), (statement, scans)
        # The rows the keys name (and the identity's row): a handful, where a walk of the
        # NULLs reads the whole backlog.
        assert sum(rows for _, _, rows in scans) <= 20, (statement, scans)
