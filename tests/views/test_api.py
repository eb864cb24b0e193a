"""The send API: idempotency, bad input with nothing stored, tenancy, ringing after commit."""

from __future__ import annotations

import dataclasses
import json

import pytest
from flask import Flask
from flask.testing import FlaskClient
from redis import Redis
from rq import Queue, SimpleWorker
from sqlalchemy import text

from app.db import Database
from app.models import Message
from jobs.drain import drain
from jobs.queues import queue_name

from ..conftest import make_app
from ..factories import World, make_world
from .api_requests import body, client, count_messages, post, world

__all__ = ["client", "world"]  # the fixtures, imported for these tests


def test_a_new_key_creates_a_queued_message(client: FlaskClient, world: World) -> None:
    response = post(client, world, body(world, idempotency_key="order-1"))
    assert response.status_code == 201
    data = response.get_json()
    assert data["status"] == "queued" and data["to"] == "15551234567"
    assert data["lane"] == "campaign" and data["attempts"] == 0
    assert set(data["timestamps"]) == {"queued"}
    assert response.headers["Location"] == f"/v1/messages/{data['id']}"


def test_a_retry_with_the_same_key_and_body_returns_the_message_with_200(
    client: FlaskClient, world: World, db: Database
) -> None:
    first = post(client, world, body(world, idempotency_key="k"))
    again = post(client, world, body(world, idempotency_key="k", to="15551234567"))
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json()["id"] == first.get_json()["id"]
    assert count_messages(db) == 1


def test_the_key_may_come_in_the_header(client: FlaskClient, world: World) -> None:
    first = post(client, world, body(world), **{"Idempotency-Key": "h-1"})
    again = post(client, world, body(world, idempotency_key="h-1"))
    assert again.status_code == 200 and again.get_json()["id"] == first.get_json()["id"]


def test_the_same_key_with_a_different_body_is_422_naming_the_existing_message(
    client: FlaskClient, world: World, db: Database
) -> None:
    first = post(client, world, body(world, idempotency_key="k"))
    other = post(client, world, body(world, idempotency_key="k", text="something else"))
    assert other.status_code == 422
    assert other.get_json()["existing_id"] == first.get_json()["id"]
    assert count_messages(db) == 1


def test_giving_the_lane_changes_the_fingerprint(client: FlaskClient, world: World) -> None:
    post(client, world, body(world, idempotency_key="k"))
    assert post(client, world, body(world, idempotency_key="k", lane="campaign")).status_code == 422


def test_without_a_key_every_request_is_a_new_message(
    client: FlaskClient, world: World, db: Database
) -> None:
    assert post(client, world, body(world)).status_code == 201
    assert post(client, world, body(world)).status_code == 201
    assert count_messages(db) == 2


BAD_BODIES = {
    "missing recipient": (lambda w: {"identity_id": w.identity_id, "text": "hi"}, 400, "to"),
    "invalid recipient": (lambda w: body(w, to="12ab"), 400, "to"),
    "too short a number": (lambda w: body(w, to="+123"), 400, "to"),
    "neither text nor template": (
        lambda w: {"identity_id": w.identity_id, "to": "15551234567"},
        400,
        "text",
    ),
    "both text and template": (
        lambda w: body(w, template={"name": "t", "language": "en"}),
        400,
        "text",
    ),
    "unknown identity": (lambda w: body(w, identity_id=999999), 422, "identity_id"),
    "identity as text": (lambda w: body(w, identity_id="1"), 400, "identity_id"),
    "unknown field": (lambda w: body(w, colour="red"), 400, "colour"),
    "bad lane": (lambda w: body(w, lane="fast"), 400, "lane"),
    "key too long": (lambda w: body(w, idempotency_key="k" * 256), 400, "idempotency_key"),
    "not an object": (lambda w: ["hi"], 400, None),
}


@pytest.mark.parametrize("case", BAD_BODIES, ids=list(BAD_BODIES))
def test_bad_input_gets_a_4xx_naming_the_problem_and_stores_nothing(
    client: FlaskClient, world: World, db: Database, case: str
) -> None:
    make_body, status, field = BAD_BODIES[case]
    response = post(client, world, make_body(world))
    assert response.status_code == status, response.get_json()
    data = response.get_json()
    assert data["error"]
    if field:
        assert field in data["error"]
    assert count_messages(db) == 0


def test_another_tenants_identity_is_refused(
    client: FlaskClient, world: World, db: Database
) -> None:
    other = make_world(db, name="globex", account_id="2000002")
    response = post(client, world, body(world, identity_id=other.identity_id))
    assert response.status_code == 422 and "identity_id" in response.get_json()["error"]
    assert count_messages(db) == 0


def test_two_different_keys_in_header_and_body_are_400(
    client: FlaskClient, world: World, db: Database
) -> None:
    response = post(client, world, body(world, idempotency_key="a"), **{"Idempotency-Key": "b"})
    assert response.status_code == 400 and "differ" in response.get_json()["error"]
    long_header = post(client, world, body(world), **{"Idempotency-Key": "x" * 256})
    assert long_header.status_code == 400
    assert count_messages(db) == 0


def test_malformed_json_is_400_and_a_wrong_content_type_is_415(
    client: FlaskClient, world: World, db: Database
) -> None:
    auth = {"Authorization": f"Bearer {world.api_key}"}
    broken = client.post(
        "/v1/messages", data=b'{"to": ', headers=auth, content_type="application/json"
    )
    assert broken.status_code == 400 and "not valid JSON" in broken.get_json()["error"]
    form = client.post("/v1/messages", data={"to": "1"}, headers=auth)
    assert form.status_code == 415
    assert count_messages(db) == 0


def test_a_body_over_64_kib_is_413(client: FlaskClient, world: World, db: Database) -> None:
    big = json.dumps(body(world, text="x" * (65 * 1024)))
    response = client.post(
        "/v1/messages",
        data=big,
        content_type="application/json",
        headers={"Authorization": f"Bearer {world.api_key}"},
    )
    assert response.status_code == 413 and response.get_json()["error"]
    assert count_messages(db) == 0


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer rk_nope.secret", "Basic abc"])
def test_a_missing_or_wrong_api_key_is_401(client: FlaskClient, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    response = client.get("/v1/messages/1", headers=headers)
    assert response.status_code == 401 and response.get_json()["error"]


def test_a_valid_prefix_with_a_wrong_secret_is_401(client: FlaskClient, world: World) -> None:
    prefix = world.api_key.split(".")[0]
    response = client.get("/v1/messages/1", headers={"Authorization": f"Bearer {prefix}.wrong"})
    assert response.status_code == 401


def test_get_shows_the_message_and_404s_for_another_tenant(
    client: FlaskClient, world: World, db: Database
) -> None:
    created = post(client, world, body(world)).get_json()
    mine = client.get(
        f"/v1/messages/{created['id']}", headers={"Authorization": f"Bearer {world.api_key}"}
    )
    assert mine.status_code == 200 and mine.get_json() == created
    other = make_world(db, name="globex", account_id="2000002")
    theirs = client.get(
        f"/v1/messages/{created['id']}", headers={"Authorization": f"Bearer {other.api_key}"}
    )
    assert theirs.status_code == 404
    missing = client.get(
        "/v1/messages/987654", headers={"Authorization": f"Bearer {world.api_key}"}
    )
    assert missing.status_code == 404


def test_an_api_key_is_never_stored_in_the_clear(world: World, db: Database) -> None:
    secret = world.api_key.split(".", 1)[1]
    with db.transaction() as session:
        rows = session.execute(text("SELECT * FROM tenants")).all()
    dumped = repr(rows)
    assert secret not in dumped and world.api_key not in dumped


def test_an_accepted_message_is_rung_on_its_lanes_queue(
    app: Flask, client: FlaskClient, world: World, redis_url: str
) -> None:
    # This test's sessions share one rolled-back connection, which two threads cannot use
    # at once: the drain makes one call at a time here (in production each has its own).
    app.config["RATCHET"] = dataclasses.replace(app.config["RATCHET"], drain_concurrency=1)
    redis = Redis.from_url(redis_url)
    campaign = post(client, world, body(world)).get_json()
    reply = post(client, world, body(world, lane="reply", text="re")).get_json()
    queues = {lane: Queue(queue_name(lane), connection=redis) for lane in ("reply", "campaign")}
    jobs = {lane: queue.get_jobs() for lane, queue in queues.items()}
    # The unit of work is the identity's drain for that lane, one pending per pair.
    assert [(j.func, j.args[:2]) for j in jobs["campaign"]] == [
        (drain, (world.identity_id, "campaign"))
    ]
    assert [(j.func, j.args[:2]) for j in jobs["reply"]] == [(drain, (world.identity_id, "reply"))]
    # To another person: one person's second message would wait for the first's outcome.
    post(client, world, body(world, to="+15551234568", text="another"))
    assert len(queues["campaign"].get_jobs()) == 1  # rung again: still one drain pending
    assert campaign["lane"] == "campaign" and reply["lane"] == "reply"
    # The job itself runs: it claims the row and calls the provider (unreachable here).
    SimpleWorker([queues["campaign"]], connection=redis).work(burst=True)
    finished = queues["campaign"].finished_job_registry.get_job_ids()
    assert len(finished) == 1
    outcome = queues["campaign"].fetch_job(finished[0]).return_value()
    # Both campaign messages tried in that one drain, both unknown outcomes (no provider).
    assert outcome.startswith(f"drain {world.identity_id}/campaign") and "2 retry" in outcome
    redis.close()


def test_with_redis_down_the_api_still_answers_201_and_leaves_the_row_for_the_sweeper(
    pg_url: str, unused_port: int, db: Database
) -> None:
    down = make_app(pg_url, f"redis://127.0.0.1:{unused_port}/0")
    down.extensions["ratchet.db"].dispose()
    down.extensions["ratchet.db"] = db  # the same rolled-back connection
    world = make_world(db)
    response = post(down.test_client(), world, body(world))
    down.extensions["ratchet.redis"].close()
    assert response.status_code == 201
    with db.transaction() as session:
        message = session.get(Message, response.get_json()["id"])
        assert message is not None
        assert message.status == "queued" and message.rung_at is None


def test_a_send_through_a_provider_ratchet_cannot_send_through_yet_is_refused(
    client: FlaskClient, db: Database, world: World
) -> None:
    with db.transaction() as session:
        # A row the CLI no longer creates (written by hand, or by an older version).
        session.execute(text("UPDATE identities SET provider = 'telegram'"))
    response = post(client, world, body(world))
    assert response.status_code == 422
    error = response.get_json()["error"]
    assert "telegram" in error and "cannot send through yet" in error
    assert response.get_json()["field"] == "identity_id"
    assert count_messages(db) == 0
