"""Requests to the send API (`POST /v1/messages`) as a tenant makes them: its `world` and
`client` fixtures, a body and its post, the messages stored, and times written as the API
reads them (`iso`).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select

from app.db import Database
from app.models import Message

from ..factories import World, make_world


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def post(client: FlaskClient, world: World, body: object, **headers: str):
    headers = {"Authorization": f"Bearer {world.api_key}", **headers}
    return client.post("/v1/messages", json=body, headers=headers)


def body(world: World, **extra: object) -> dict[str, object]:
    return {"identity_id": world.identity_id, "to": "+15551234567", "text": "hi", **extra}


def count_messages(db: Database) -> int:
    with db.transaction() as session:
        return session.scalar(select(func.count()).select_from(Message)) or 0


def iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")
