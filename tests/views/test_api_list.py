"""GET /v1/messages: filters, keyset paging stable under inserts, tenancy, clear 400s."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database
from app.listquery import ListQuery
from app.models import Identity

from ..conftest import T0
from ..factories import World, make_message, make_world


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def listing(client: FlaskClient, world: World, **query: object):
    return client.get(
        "/v1/messages",
        query_string=query,
        headers={"Authorization": f"Bearer {world.api_key}"},
    )


def ids(response) -> list[int]:
    assert response.status_code == 200, response.get_json()
    return [m["id"] for m in response.get_json()["data"]]


def cancel(client: FlaskClient, world: World, message_id: int) -> None:
    response = client.post(
        f"/v1/messages/{message_id}/cancel", headers={"Authorization": f"Bearer {world.api_key}"}
    )
    assert response.status_code == 200


def test_it_lists_the_tenants_messages_newest_first(
    client: FlaskClient, world: World, db: Database
) -> None:
    made = [make_message(db, world, text=f"m{i}") for i in range(3)]
    response = listing(client, world)
    assert ids(response) == made[::-1]
    assert response.get_json()["next_cursor"] is None
    first = response.get_json()["data"][0]
    assert first["status"] == "queued" and first["content_purged_at"] is None


def test_another_tenants_messages_are_never_listed(
    client: FlaskClient, world: World, db: Database
) -> None:
    other = make_world(db, name="globex", account_id="2000002")
    mine = make_message(db, world)
    make_message(db, other)
    assert ids(listing(client, world)) == [mine]
    # Even when asked for by the other tenant's identity: nothing of theirs.
    assert ids(listing(client, world, identity_id=other.identity_id)) == []


def test_paging_is_stable_while_messages_are_added(
    client: FlaskClient, world: World, db: Database
) -> None:
    made = [make_message(db, world, text=f"m{i}") for i in range(5)]
    first = listing(client, world, limit=2)
    assert ids(first) == [made[4], made[3]]
    # Messages created between pages appear on no later page, and shift nothing.
    make_message(db, world, text="new 1")
    make_message(db, world, text="new 2")
    second = listing(client, world, limit=2, cursor=first.get_json()["next_cursor"])
    assert ids(second) == [made[2], made[1]]
    third = listing(client, world, limit=2, cursor=second.get_json()["next_cursor"])
    assert ids(third) == [made[0]]
    assert third.get_json()["next_cursor"] is None


def test_it_filters_by_status_and_failure_class(
    client: FlaskClient, world: World, db: Database
) -> None:
    kept = make_message(db, world)
    canceled = make_message(db, world)
    cancel(client, world, canceled)
    assert ids(listing(client, world, status="failed")) == [canceled]
    assert ids(listing(client, world, status="queued")) == [kept]
    assert ids(listing(client, world, failure_class="canceled")) == [canceled]
    assert ids(listing(client, world, failure_class="permanent")) == []


def test_it_filters_by_identity_lane_and_recipient(
    client: FlaskClient, world: World, db: Database
) -> None:
    second = make_world(db, name="acme-2", account_id="3000003")
    # The same tenant's second identity.
    with db.transaction() as session:
        identity = session.get(Identity, second.identity_id)
        assert identity is not None
        identity.tenant_id = world.tenant_id
    on_second = make_message(db, World(world.tenant_id, world.api_key, second.identity_id))
    reply = make_message(db, world, lane="reply", recipient="15550000001")
    campaign = make_message(db, world, lane="campaign", recipient="15550000002")
    assert ids(listing(client, world, identity_id=world.identity_id)) == [campaign, reply]
    assert ids(listing(client, world, identity_id=second.identity_id)) == [on_second]
    assert ids(listing(client, world, lane="reply")) == [reply]
    assert ids(listing(client, world, to="+1 555 000 0002")) == [campaign]
    assert ids(listing(client, world, lane="reply", to="15550000002")) == []


def test_it_filters_by_creation_and_by_last_change(
    client: FlaskClient, world: World, db: Database
) -> None:
    old = make_message(db, world, now=T0 - timedelta(days=2))
    new = make_message(db, world, now=T0)
    assert ids(listing(client, world, created_since="2026-11-29T12:00:00Z")) == [new]
    assert ids(listing(client, world, created_since="2026-11-30T12:00:00+00:00")) == [new]
    # The old one changes now (a cancel, on the real clock, after T0): it was updated since.
    cancel(client, world, old)
    since = (T0 + timedelta(hours=1)).isoformat()
    assert ids(listing(client, world, updated_since=since)) == [old]
    assert ids(listing(client, world, updated_since=(T0 - timedelta(days=3)).isoformat())) == [
        new,
        old,
    ]


BAD_QUERIES = {
    "unknown filter": ({"stauts": "failed"}, "stauts"),
    "unknown status": ({"status": "lost"}, "status"),
    "unknown class": ({"failure_class": "gremlins"}, "failure_class"),
    "identity as text": ({"identity_id": "seven"}, "identity_id"),
    "identity zero": ({"identity_id": "0"}, "identity_id"),
    "identity past bigint": ({"identity_id": str(2**63)}, "identity_id"),
    "bad lane": ({"lane": "fast"}, "lane"),
    "bad recipient": ({"to": "12 ab!"}, "to"),
    "date not a date": ({"created_since": "yesterday"}, "created_since"),
    "date without offset": ({"updated_since": "2026-11-30T12:00:00"}, "updated_since"),
    "limit zero": ({"limit": "0"}, "limit"),
    "limit too large": ({"limit": "101"}, "limit"),
    "forged cursor": ({"cursor": "not-a-cursor"}, "cursor"),
    "NUL": ({"to": "1555\x00"}, "to"),
}


@pytest.mark.parametrize("case", BAD_QUERIES, ids=list(BAD_QUERIES))
def test_bad_queries_are_a_json_400_naming_the_parameter(
    client: FlaskClient, world: World, case: str
) -> None:
    query, field = BAD_QUERIES[case]
    response = listing(client, world, **query)
    assert response.status_code == 400
    body = response.get_json()
    assert body["field"] == field and field in body["error"]


def test_a_filter_given_twice_is_refused(client: FlaskClient, world: World) -> None:
    response = client.get(
        "/v1/messages?status=failed&status=queued",
        headers={"Authorization": f"Bearer {world.api_key}"},
    )
    assert response.status_code == 400 and response.get_json()["field"] == "status"


def test_the_list_needs_the_api_key(client: FlaskClient, world: World) -> None:
    assert client.get("/v1/messages").status_code == 401


def test_the_document_describes_the_list_with_every_filter(app: Flask) -> None:
    paths = app.test_client().get("/v1/openapi.json").get_json()["paths"]
    operation = paths["/v1/messages"]["get"]
    assert {p["name"] for p in operation["parameters"]} == set(ListQuery.model_fields)
    assert {"200", "400", "401", "429"} <= set(operation["responses"])
