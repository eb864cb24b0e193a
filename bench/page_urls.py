"""The pages `bench/pages.py` times, each with real ids from the filled data."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text


def pages(engine: Any) -> dict[str, str]:
    """The URL of each page, with real ids from the data."""
    with engine.connect() as connection:
        detail = connection.execute(
            text("SELECT id FROM messages WHERE status = 'failed' ORDER BY id DESC LIMIT 1")
        ).scalar_one()
        wamid, recipient, key = connection.execute(
            text(
                "SELECT provider_message_id, recipient, idempotency_key FROM messages "
                "WHERE status = 'read' ORDER BY id DESC OFFSET 5 LIMIT 1"
            )
        ).one()
    return {
        "overview": "/",
        "stuck": "/stuck",
        "dead letters": "/dead-letters",
        "dead letters, class": "/dead-letters?class=needs_human",
        "dead letters, identity+class": "/dead-letters?identity=1&class=permanent",
        "dead letters, tenant": "/dead-letters?tenant=1",
        "search: provider id": f"/search?q={wamid}",
        "search: idempotency key": f"/search?q={key}",
        "search: number": f"/search?q=%2B{recipient}",
        "search: first 9 digits": f"/search?q={recipient[:9]}",
        "message detail": f"/messages/{detail}",
        "identities": "/identities",
        "workers": "/workers",
        "charts: hour, all": "/charts?range=hour",
        "charts: day, busy identity": "/charts?range=day&identity=1",
        "charts: week, all": "/charts?range=week",
    }
