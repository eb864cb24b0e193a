"""An identity's default validity per lane at `POST /v1/messages` (issue 34): a request
that gives neither `valid_for` nor `expires_at` takes its lane's default, counted from
when the message is due; an explicit value wins, longer or shorter; no default, no limit."""

from __future__ import annotations

from datetime import datetime, timedelta

from flask.testing import FlaskClient

from app.clock import utcnow
from app.db import Database
from app.repo.identity_validity import set_default_validity
from app.repo.windows import open_window

from ..factories import World
from .api_requests import body, client, count_messages, iso, post, world

__all__ = ["client", "world"]  # the fixtures, imported for these tests


def set_defaults(db: Database, of: World, **seconds: int | None) -> None:
    with db.transaction() as session:
        set_default_validity(
            session, of.identity_id, seconds, actor="test", now=utcnow(), via="test"
        )


def parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def validity(answer: dict[str, object]) -> timedelta | None:
    """How long after it was due (`send_at`, else its creation) the message expires."""
    if answer["expires_at"] is None:
        return None
    due = answer["send_at"] or answer["created_at"]
    return parse(str(answer["expires_at"])) - parse(str(due))


def sent(api: FlaskClient, of: World, **extra: object) -> dict[str, object]:
    response = post(api, of, body(of, **extra))
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def test_each_lane_takes_its_identitys_default(
    client: FlaskClient,
    world: World,
    db: Database,
) -> None:
    set_defaults(db, world, reply=600, campaign=86400)
    reply = sent(client, world, lane="reply")
    campaign = sent(client, world, lane="campaign")
    assert (reply["lane"], validity(reply)) == ("reply", timedelta(minutes=10))
    assert (campaign["lane"], validity(campaign)) == ("campaign", timedelta(days=1))
    # No lane given: the lane Ratchet picks decides which default applies.
    picked = sent(client, world, to="+15550001111")
    assert (picked["lane"], validity(picked)) == ("campaign", timedelta(days=1))
    with db.transaction() as session:
        open_window(session, world.identity_id, "15550002222", utcnow())
    in_window = sent(client, world, to="+15550002222")
    assert (in_window["lane"], validity(in_window)) == ("reply", timedelta(minutes=10))


def test_a_lane_without_a_default_has_no_limit(
    client: FlaskClient,
    world: World,
    db: Database,
) -> None:
    set_defaults(db, world, reply=600)
    assert sent(client, world, lane="campaign")["expires_at"] is None
    set_defaults(db, world, reply=None)
    assert sent(client, world, lane="reply")["expires_at"] is None


def test_an_explicit_validity_wins_longer_or_shorter(
    client: FlaskClient,
    world: World,
    db: Database,
) -> None:
    set_defaults(db, world, reply=600, campaign=600)
    assert validity(sent(client, world, lane="reply", valid_for=3600)) == timedelta(hours=1)
    assert validity(sent(client, world, lane="campaign", valid_for=30)) == timedelta(seconds=30)
    until = (utcnow() + timedelta(days=3)).replace(microsecond=0)
    given = sent(client, world, lane="campaign", expires_at=iso(until))
    assert given["expires_at"] == iso(until)


def test_the_default_counts_from_send_at(
    client: FlaskClient,
    world: World,
    db: Database,
) -> None:
    set_defaults(db, world, campaign=86400)
    send_at = (utcnow() + timedelta(days=2)).replace(microsecond=0)
    answer = sent(client, world, lane="campaign", send_at=iso(send_at))
    assert answer["send_at"] == iso(send_at)
    assert answer["expires_at"] == iso(send_at + timedelta(days=1))


def test_a_retry_after_the_default_changed_returns_the_stored_message(
    client: FlaskClient,
    world: World,
    db: Database,
) -> None:
    """The fingerprint covers what the caller sent, not the default: the same request is
    still the same request, and keeps the expiry it was given."""
    set_defaults(db, world, campaign=600)
    first = sent(client, world, lane="campaign", idempotency_key="otp-1")
    set_defaults(db, world, campaign=None)
    again = post(client, world, body(world, lane="campaign", idempotency_key="otp-1"))
    assert again.status_code == 200
    assert again.get_json()["id"] == first["id"]
    assert again.get_json()["expires_at"] == first["expires_at"] is not None


def test_bad_validities_are_refused_whatever_the_default(
    client: FlaskClient,
    world: World,
    db: Database,
) -> None:
    set_defaults(db, world, reply=600, campaign=600)
    for extra in ({"valid_for": 0}, {"valid_for": 36 * 86400}, {"expires_at": "soon"}):
        response = post(client, world, body(world, lane="reply", **extra))
        assert response.status_code == 400, response.get_json()
        assert response.get_json()["field"] in extra
    assert count_messages(db) == 0


def test_a_null_validity_is_one_not_given_and_takes_the_default(
    client: FlaskClient,
    world: World,
    db: Database,
) -> None:
    set_defaults(db, world, reply=600)
    answer = sent(client, world, lane="reply", valid_for=None, expires_at=None)
    assert validity(answer) == timedelta(minutes=10)
