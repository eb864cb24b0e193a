"""The floor `bench/webhook_rate.py` measures the webhook against: a bare Flask endpoint doing
only the durable steps DESIGN section 6 requires of a status, and nothing else.

1. Commit the raw delivery (body, headers, time) in its own transaction.
2. One guarded `UPDATE messages ... WHERE provider_message_id = :p AND status IN (...)`
   for the status, in its own transaction.

No signature check, no identity lookup, no event log, no deduplication: what is left when
everything Ratchet adds is taken away. One psycopg connection per gunicorn worker, opened on
its first request and kept (cheaper than any pool). Run as `gunicorn bench.webhook_floor:app`
with `DATABASE_URL` set to a migrated Ratchet schema.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any

import psycopg
from flask import Flask, Response, request
from psycopg.types.json import Jsonb

app = Flask(__name__)
_connection: list[psycopg.Connection[Any]] = []

# The states a `delivered` may move a message from (the guard of DESIGN section 3).
BELOW_DELIVERED = ["queued", "sending", "sent"]


def _connect() -> psycopg.Connection[Any]:
    if not _connection:
        url = os.environ["DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
        _connection.append(psycopg.connect(url))
    return _connection[0]


@app.post("/webhooks/whatsapp")
def delivery() -> Response:
    raw = request.get_data()
    now = datetime.now(UTC)
    connection = _connect()
    with connection.transaction():
        connection.execute(
            "INSERT INTO webhook_deliveries (provider, headers, body, received_at) "
            "VALUES ('whatsapp', %s, %s, %s)",
            (Jsonb(dict(request.headers)), raw.decode("utf-8"), now),
        )
    statuses = json.loads(raw)["entry"][0]["changes"][0]["value"]["statuses"]
    for status in statuses:
        with connection.transaction():
            connection.execute(
                "UPDATE messages SET status = 'delivered', "
                "delivered_at = COALESCE(delivered_at, %s) "
                "WHERE provider_message_id = %s AND status = ANY(%s)",
                (now, status["id"], BELOW_DELIVERED),
            )
    return Response('{"ok":true}', status=200, mimetype="application/json")
