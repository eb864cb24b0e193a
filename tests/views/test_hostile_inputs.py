"""No input reaches a 500: hostile values (Unicode digits that pass `isdigit()`, ids past 64
bits, NUL, numbers in odd spellings, long and odd text) thrown at every route in the URL map,
in the path, the query and the form (with a valid CSRF token, so the views' own checks are
reached), as a visitor and as each role; every answer is below 500 and nothing changed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from flask import Flask, g
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from werkzeug.routing import Rule

from app.db import Database
from app.models import Identity, Message, Staff, Tenant

from .dashboard_world import (
    Tenants,
    csrf_token,
    failed_message,
    make_staff,
    make_tenants,
    sign_in,
    use_clock,
)

HOSTILE = [
    "²",
    "١٢",
    "9223372036854775808",
    "18446744073709551616",
    "99999999999999999999999999999",
    "-1",
    "1e3",
    " 1",
    "0x10",
    "NaN",
    "inf",
    "\x00",
    "1\x00",
    "",
    "%",
    "../..",
    "<script>x</script>",
    "☃" * 300,
    "n.1.1",
    "1.99999999999999999999.1",
    "1.-999999999999999999.1",
    "0001-01-01T00:00+14:00",
    "9999-12-31T23:59-14:00",
    "x" * 5000,
]
# Every query and form field a view reads (`request.args` / `request.form`).
FIELDS = [
    "action",
    "actor",
    "after",
    "app_secret",
    "before",
    "campaign_rate",
    "class",
    "code",
    "cycle",
    "dismissed",
    "email",
    "force",
    "group",
    "identity",
    "lane",
    "next",
    "password",
    "period",
    "q",
    "reason",
    "reply_rate",
    "role",
    "scope",
    "since",
    "target",
    "tenant",
    "token",
    "total_rate",
    "until",
]
# Signing out moves the login's session version: every later example would be signed out.
SKIPPED = {"static", "auth.sign_out"}
ROLES = ["visitor", "viewer", "operator", "admin", "platform"]

hostile = st.one_of(
    st.sampled_from(HOSTILE),
    # Random text made never to be a valid number, role, scope or lane.
    st.text(max_size=30).map(lambda text: text + "²"),
)


@dataclass
class Target:
    rule: Rule
    method: str


def targets(app: Flask) -> list[Target]:
    found = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint in SKIPPED:
            continue
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            found.append(Target(rule, method))
    return found


def snapshot(database: Database) -> list[Any]:
    """What a hostile request must not change."""
    with database.transaction() as session:
        return [
            [tuple(row) for row in session.execute(select(*model.__table__.c).order_by("id"))]
            for model in (Message, Staff, Identity, Tenant)
        ]


@dataclass
class World:
    app: Flask
    db: Database
    tenants: Tenants
    message_id: int
    clients: dict[str, FlaskClient]


@pytest.fixture
def world(app: Flask, db: Database) -> Iterator[World]:
    use_clock(app)
    tenants = make_tenants(db)
    message_id = failed_message(db, tenants.acme)
    clients = {"visitor": app.test_client()}
    for role in ("viewer", "operator", "admin"):
        make_staff(db, f"{role}@acme.test", role, tenants.acme.tenant_id)
        clients[role] = app.test_client()
        fresh()
        sign_in(clients[role], f"{role}@acme.test")
    make_staff(db, "root@ratchet.test", "admin", None)
    clients["platform"] = app.test_client()
    fresh()
    sign_in(clients["platform"], "root@ratchet.test")
    yield World(app, db, tenants, message_id, clients)


def fresh() -> None:
    """The tests share one app context: forget what another client's request cached."""
    g.pop("_login_user", None)
    g.pop("csrf_token", None)


def token_for(client: FlaskClient) -> str:
    fresh()
    page = client.get("/sign-in" if client.get_cookie("session") is None else "/audit")
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.get_data(as_text=True))
    return found.group(1) if found else csrf_token(client.get("/sign-in").get_data(as_text=True))


def path_for(rule: Rule, value: str) -> str:
    return re.sub(r"<[^>]+>", lambda _: quote(value, safe="") or "0", rule.rule)


def fire(world: World, role: str, target: Target, values: dict[str, str], path_value: str) -> int:
    client = world.clients[role]
    path = path_for(target.rule, path_value)
    token = token_for(client)
    fresh()
    if target.method == "GET":
        response = client.get(f"{path}?{urlencode(values)}")
    else:
        response = client.open(
            f"{path}?{urlencode(values)}",
            method=target.method,
            data={**values, "csrf_token": token},
        )
    response.close()
    return response.status_code


def test_the_known_culprits_at_every_route_as_platform_staff_answer_below_500(
    world: World,
) -> None:
    """Each route once per culprit the review found: `²`, an id past 64 bits, a NUL."""
    before = snapshot(world.db)
    for target in targets(world.app):
        for value in ("²", "18446744073709551616", "\x00", "9223372036854775808"):
            values = {field: value for field in FIELDS}
            status = fire(world, "platform", target, values, value)
            assert status < 500, (target.rule.rule, target.method, value, status)
    assert snapshot(world.db) == before


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_values_at_any_route_as_any_role_answer_below_500_and_change_nothing(
    world: World, data: st.DataObject
) -> None:
    before = snapshot(world.db)
    target = data.draw(st.sampled_from(targets(world.app)), label="route")
    role = data.draw(st.sampled_from(ROLES), label="role")
    fields = data.draw(st.lists(st.sampled_from(FIELDS), unique=True, max_size=8), label="fields")
    values = {field: data.draw(hostile, label=field) for field in fields}
    # The real message id only where the path names a message: another route's id may
    # happen to be the same number (a staff member's, which an admin may disable).
    real = st.just(str(world.message_id)) if "message_id>" in target.rule.rule else hostile
    path_value = data.draw(st.one_of(hostile, real), label="path value")
    status = fire(world, role, target, values, path_value)
    assert status < 500, (target.rule.rule, target.method, role, values, path_value, status)
    assert snapshot(world.db) == before
