"""Per-tenant intake limits: a 429 with Retry-After naming the limit, nothing stored, and
only the tenant past its limit is refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database
from app.repo.tenant_settings import SettingsError, TenantSettings, set_tenant_settings
from app.views.keycache import tenant_for_key

from ..conftest import T0, make_app
from ..factories import World, make_message, make_world
from .api_requests import count_messages as stored
from .tenant_limits import get, limit, post


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def test_past_the_rate_a_request_is_429_naming_the_limit_and_nothing_is_stored(
    client: FlaskClient, world: World, db: Database
) -> None:
    # One request every ten seconds: the second, straight after the first, is refused.
    limit(db, world, rate=0.1)
    assert post(client, world, "a").status_code == 201
    refused = post(client, world, "b")
    assert refused.status_code == 429
    body = refused.get_json()
    assert body["limit"] == "requests_per_second" and body["value"] == 0.1
    assert 1 <= int(refused.headers["Retry-After"]) <= 10
    assert body["retry_after"] == int(refused.headers["Retry-After"])
    assert stored(db) == 1
    # Every keyed request counts, reads too.
    assert get(client, world).status_code == 429


def test_one_tenant_past_its_rate_does_not_limit_another(
    client: FlaskClient, world: World, db: Database
) -> None:
    other = make_world(db, name="globex", account_id="2000002")
    limit(db, world, rate=0.1)
    assert get(client, world).status_code == 200
    assert get(client, world).status_code == 429
    assert [get(client, other).status_code for _ in range(5)] == [200] * 5


def test_the_burst_is_a_second_of_the_rate(client: FlaskClient, world: World, db: Database) -> None:
    limit(db, world, rate=3)
    answers = [get(client, world).status_code for _ in range(4)]
    # Three at once fit; the fourth would need a third of a second to have passed.
    assert answers[:3] == [200, 200, 200]


def test_past_the_waiting_limit_a_send_is_429_and_nothing_is_stored(
    client: FlaskClient, world: World, db: Database
) -> None:
    make_message(db, world)
    make_message(db, world)
    limit(db, world, waiting=2)
    refused = post(client, world, "c")
    assert refused.status_code == 429
    assert refused.get_json()["limit"] == "max_waiting"
    assert refused.headers["Retry-After"] == "1"
    assert stored(db) == 2
    # Reading is not limited by what waits.
    assert get(client, world).status_code == 200


def test_messages_accepted_count_at_once_against_the_waiting_limit(
    client: FlaskClient, world: World, db: Database
) -> None:
    limit(db, world, waiting=2)
    # The first send counts (none waiting) and caches the count; the next two find it
    # raised by each message accepted since, not the count of a moment ago.
    assert post(client, world, "1").status_code == 201
    assert post(client, world, "2").status_code == 201
    assert post(client, world, "3").status_code == 429
    assert stored(db) == 2


def test_a_finished_message_no_longer_counts_as_waiting(
    client: FlaskClient, world: World, db: Database
) -> None:
    waiting = make_message(db, world)
    limit(db, world, waiting=1)
    response = client.post(
        f"/v1/messages/{waiting}/cancel", headers={"Authorization": f"Bearer {world.api_key}"}
    )
    assert response.status_code == 200
    assert post(client, world, "after-cancel").status_code == 201


@pytest.fixture
def app_without_redis(pg_url: str, unused_port: int) -> Iterator[Flask]:
    app = make_app(pg_url, f"redis://127.0.0.1:{unused_port}/0")
    with app.app_context():
        yield app
    app.extensions["ratchet.db"].dispose()


def test_without_redis_the_rate_is_not_enforced_and_the_waiting_limit_still_is(
    app_without_redis: Flask, committed_db_without_redis: Database
) -> None:
    db = committed_db_without_redis
    world = make_world(db)
    limit(db, world, rate=0.1, waiting=1)
    client = app_without_redis.test_client()
    assert get(client, world).status_code == 200
    assert get(client, world).status_code == 200
    assert post(client, world, "x").status_code == 201
    assert post(client, world, "y").status_code == 429


@pytest.fixture
def committed_db_without_redis(app_without_redis: Flask) -> Iterator[Database]:
    from ..conftest import truncate_all

    database: Database = app_without_redis.extensions["ratchet.db"]
    truncate_all(database)
    yield database
    truncate_all(database)


@pytest.mark.parametrize(
    "settings",
    [
        TenantSettings(0, None, 30),
        TenantSettings(-1, None, 30),
        TenantSettings(None, 0, 30),
        TenantSettings(None, None, 0),
        TenantSettings(None, None, 100_000),
    ],
)
def test_settings_out_of_range_are_refused(
    db: Database, world: World, settings: TenantSettings
) -> None:
    with db.transaction() as session, pytest.raises(SettingsError):
        set_tenant_settings(session, world.tenant_id, settings, actor="test", now=T0)


def test_a_verified_key_is_remembered_a_second_and_a_bad_one_never(
    app: Flask, world: World, db: Database
) -> None:
    first = tenant_for_key(world.api_key, clock=100.0)
    assert first is not None and first.max_requests_per_second is None
    limit(db, world, rate=5)
    # Within the second the remembered limits answer; after it, the new ones.
    assert tenant_for_key(world.api_key, clock=100.9) == first
    later = tenant_for_key(world.api_key, clock=101.1)
    assert later is not None and later.max_requests_per_second == 5
    forged = world.api_key[:-2] + ("xy" if not world.api_key.endswith("xy") else "zz")
    assert tenant_for_key(forged, clock=101.2) is None
    assert len(app.extensions["ratchet.api_keys"]) == 1
