"""A token no HTTP header can carry, and a call that raises instead of answering.

Found by review: a token with a pasted zero-width space made every call raise inside the
HTTP library; the exception ended the drain with its key held and its claims leased, and
each message was re-claimed as a lost lease until it failed `exhausted` with a reason that
was not what happened, no request ever having left. Now such a token is refused when given
(tests/test_cli.py, tests/views/test_dashboard_identities.py), one already stored holds the
identity before any claim, and any call that raises is recorded as an unknown outcome in
the exception's own words, with the identity's secrets cut out of them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from app.models import Attempt, Identity
from app.providers.base import Credentials
from app.repo.claims import claim_message
from app.repo.identities import get_identity, resume_identity, update_identity
from jobs.call import Prepared, call_and_record, redacted
from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys
from jobs.send import prepare

from .conftest import Env


def store_token(env: Env, identity_id: int, token: str) -> None:
    """As a row written before tokens were checked (or by hand) would hold it."""
    with env.db.transaction() as session:
        session.execute(
            update(Identity)
            .where(Identity.id == identity_id)
            .values(token_encrypted=env.box.encrypt(token))
        )


def test_a_stored_token_no_header_can_carry_holds_the_identity_and_burns_nothing(
    env: Env,
) -> None:
    number = env.number(statuses=[])
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=50.0, total_rate=70.0)
    ids = [env.send(number, f"1555720{n:04d}", lane="campaign") for n in range(3)]
    store_token(env, identity_id, "good-token\u200b")
    redis = env.app.extensions["ratchet.redis"]

    def drain(token: str) -> str:
        redis.set(drain_keys(identity_id, "campaign")[0], token, px=60_000)
        return Drain(env.db, env.box, env.config, redis, Pacer(redis), identity_id, "campaign").run(
            token
        )

    assert "nothing sent" in drain("first")
    with env.db.transaction() as session:
        identity = get_identity(session, identity_id)
        assert identity is not None and identity.paused_at is not None
        assert "no HTTP header can carry" in (identity.paused_reason or "")
        assert "good-token" not in (identity.paused_reason or "")
    assert [(env.message(i).status, env.message(i).attempt) for i in ids] == [("queued", 0)] * 3
    assert env.requests(number) == []

    # The operator sets the token again and resumes: every message goes, once.
    with env.db.transaction() as session:
        update_identity(session, env.box, identity_id, token="good-token", now=env.now)
        assert resume_identity(session, identity_id, env.now)
    assert "3 accepted" in drain("second")
    assert [env.message(i).status for i in ids] == ["sent"] * 3
    assert len(env.accepted(number)) == 3


def claimed(env: Env, message_id: int) -> Prepared:
    """Claimed and prepared as a drain does it, ready for its call."""
    with env.db.transaction() as session:
        claimed_mono = time.monotonic()
        claim = claim_message(
            session, message_id, env.now, timedelta(seconds=env.config.lease_seconds)
        )
        assert claim is not None
        identity = get_identity(session, claim.identity_id)
        assert identity is not None
        prepared = prepare(session, env.box, env.config, identity, claim, claimed_mono, env.now)
    assert isinstance(prepared, Prepared)
    return prepared


@pytest.mark.parametrize(
    ("token", "says"),
    [
        ("secret-zero\u200bwidth", "UnicodeEncodeError"),  # raised by the header's encoding
        ("secret-line\nbreak", "LocalProtocolError"),  # refused by h11, quoting the header
    ],
    ids=["raised", "refused by the HTTP library"],
)
def test_a_call_that_cannot_be_made_is_an_unknown_outcome_in_its_own_words_without_the_token(
    env: Env, caplog: pytest.LogCaptureFixture, token: str, says: str
) -> None:
    number = env.number(statuses=[])
    message_id = env.send(number, "15557300001")
    prepared = claimed(env, message_id)
    # The token the call is made with (no stored token can hold it any more: see above).
    prepared = dataclasses.replace(
        prepared, credentials=dataclasses.replace(prepared.credentials, token=token)
    )

    with caplog.at_level(logging.INFO):
        outcome, ring = call_and_record(env.db, env.config, prepared, env.clock)

    assert outcome.startswith("retry at") and outcome.endswith("(unknown)"), outcome
    row = env.message(message_id)
    assert row.status == "sending" and row.unknown_attempts == 1 and row.had_unknown_outcome
    # An unknown outcome waits the webhook grace before the next attempt.
    assert row.next_attempt_at is not None
    assert row.next_attempt_at >= env.now + timedelta(seconds=env.config.webhook_grace)
    assert ring == (row.lane, row.next_attempt_at)
    assert row.last_error is not None and says in str(row.last_error)
    with env.db.transaction() as session:
        (attempt,) = session.scalars(select(Attempt).where(Attempt.message_id == message_id))
        assert attempt.outcome == "unknown" and says in str(attempt.error)
        stored = f"{attempt.error} {attempt.response_body} {row.last_error}"
    secret = token.split("\u200b")[0].split("\n")[0]
    assert secret not in stored
    assert secret not in caplog.text
    assert env.requests(number) == []  # nothing reached the provider


@pytest.mark.parametrize(
    "form",
    [
        "EAAG+tok/en==",  # as given
        "EAAG%2Btok%2Fen%3D%3D",  # percent-encoded
        "QUMxMjM6RUFBRyt0b2svZW49PQ==",  # Twilio's basic auth: base64 of "AC123:<token>"
        "app/secret\\n",  # the app secret, escaped as a repr shows it
    ],
    ids=["as given", "percent-encoded", "basic auth", "escaped"],
)
def test_a_call_s_words_lose_every_form_of_the_identity_s_secrets(form: str) -> None:
    credentials = Credentials(
        account_id="AC123",
        base_url="https://api.example",
        token="EAAG+tok/en==",
        app_secret="app/secret\n",
    )
    words = redacted(f"refused header b'Authorization: {form}' for AC123", credentials)
    assert form not in words and "[secret]" in words
    assert "AC123" in words.replace(form, "")  # the account id is not a secret
