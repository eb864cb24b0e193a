"""A tenant's intake limits (`limit`: its rate and how many may wait) and the API requests
that meet them: a send (`post`, with an idempotency key if given) and a listing (`get`).
"""

from __future__ import annotations

from flask.testing import FlaskClient

from app.db import Database
from app.repo.tenant_settings import TenantSettings, set_tenant_settings

from ..conftest import T0
from ..factories import World


def limit(
    db: Database, world: World, *, rate: float | None = None, waiting: int | None = None
) -> None:
    with db.transaction() as session:
        set_tenant_settings(
            session, world.tenant_id, TenantSettings(rate, waiting, 30), actor="test", now=T0
        )


def post(client: FlaskClient, world: World, key: str | None = None):
    body: dict[str, object] = {"identity_id": world.identity_id, "to": "+15551234567"}
    body["text"] = "hi"
    if key:
        body["idempotency_key"] = key
    return client.post(
        "/v1/messages", json=body, headers={"Authorization": f"Bearer {world.api_key}"}
    )


def get(client: FlaskClient, world: World):
    return client.get("/v1/messages", headers={"Authorization": f"Bearer {world.api_key}"})
