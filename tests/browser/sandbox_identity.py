"""A WhatsApp identity of a new tenant on the sandbox's number, as the browser tests that send
through the sandbox provider make it (`make_identity`).
"""

from __future__ import annotations

import httpx

from app.clock import utcnow
from app.crypto import SecretBox
from app.repo.identities import create_identity
from app.repo.tenants import create_tenant

from ..conftest import SECRET_KEY
from ..factories import World
from ..sandbox.conftest import SandboxProcess
from .conftest import Served

NUMBER = "5550999000001"


def make_identity(served: Served, sandbox: SandboxProcess, token: str = "good-token") -> World:
    """A WhatsApp identity on the sandbox's number, which accepts "good-token"."""
    with httpx.Client(timeout=10) as http:
        answer = http.post(
            f"{sandbox.url}/_sandbox/numbers",
            json={
                "phone_number_id": NUMBER,
                "token": "good-token",
                "app_secret": "sandbox-app-secret",
                "webhook_url": f"{served.url}/webhooks/whatsapp",
            },
        )
        assert answer.status_code < 300, answer.text
    with served.db.transaction() as session:
        tenant, key = create_tenant(session, "acme", utcnow())
        identity = create_identity(
            session,
            SecretBox(SECRET_KEY),
            tenant_id=tenant.id,
            provider="whatsapp",
            account_id=NUMBER,
            base_url=f"{sandbox.url}/v21.0",
            token=token,
            app_secret="sandbox-app-secret",
            now=utcnow(),
        )
        return World(tenant.id, key, identity.id)
