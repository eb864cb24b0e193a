"""The data `bench/pages.py` fills each schema with, in SQL: 20 tenants of 3 identities
(one a busy number with a third of the traffic), and messages going back in time from
`NOW`, one every 0.9 s, with their attempts, events and webhook statuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

SECRET_KEY = "bench-secret-key-not-for-production"
NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
SPACING_S = 0.9  # one message every 0.9 s, going back in time
TOP = 1_000_000  # ids run 1..TOP; the newest messages have the highest ids
TENANTS, IDENTITIES_PER_TENANT = 20, 3
PASSWORD = "bench password not secret"

# (failure class, provider code, share of the failures); ranks come from the real table.
FAILURES = [
    ("exhausted", 131000, 20),
    ("needs_human", 132001, 15),
    ("needs_human", 132015, 5),
    ("needs_human", 999999, 2),
    ("permanent", 131026, 25),
    ("permanent", 131047, 18),
    ("permanent", 131050, 10),
    ("canceled", None, 5),
]


def seed_identities(engine: Any) -> None:
    from app.crypto import SecretBox, hash_password

    box = SecretBox(SECRET_KEY)
    token = box.encrypt("bench-token-value")
    with engine.begin() as connection:
        for t in range(1, TENANTS + 1):
            connection.execute(
                text(
                    "INSERT INTO tenants (id, name, api_key_prefix, api_key_hash, created_at) "
                    "VALUES (:id, :name, :prefix, :hash, :at)"
                ),
                {
                    "id": t,
                    "name": f"tenant-{t:02d}",
                    "prefix": f"rk_{t}",
                    "hash": "0" * 64,
                    "at": NOW - timedelta(days=400),
                },
            )
            for k in range(IDENTITIES_PER_TENANT):
                ident = (t - 1) * IDENTITIES_PER_TENANT + k + 1
                connection.execute(
                    text(
                        "INSERT INTO identities (id, tenant_id, provider, account_id, base_url, "
                        "token_encrypted, reply_rate, campaign_rate, total_rate, "
                        "credentials_version, created_at, token_set_at) VALUES (:id, :t, "
                        "'whatsapp', :acct, 'http://127.0.0.1:9', :tok, 20, 10, 80, 0, :at, :at)"
                    ),
                    {
                        "id": ident,
                        "t": t,
                        "acct": f"10{ident:08d}",
                        "tok": token,
                        "at": NOW - timedelta(days=400),
                    },
                )
        connection.execute(text("SELECT setval('tenants_id_seq', :n)"), {"n": TENANTS})
        connection.execute(
            text("SELECT setval('identities_id_seq', :n)"), {"n": TENANTS * IDENTITIES_PER_TENANT}
        )
        connection.execute(
            text(
                "INSERT INTO staff (email, role, tenant_id, password_hash, created_at) "
                "VALUES ('bench@ratchet.test', 'admin', NULL, :hash, :at)"
            ),
            {"hash": hash_password(PASSWORD), "at": NOW},
        )
        # A few open windows per identity, for the identities page.
        connection.execute(
            text(
                "INSERT INTO conversation_windows (identity_id, recipient, last_inbound_at, "
                "open_until) SELECT i, '1555' || lpad((i * 1000 + w)::text, 7, '0'), "
                ":now - interval '1 hour', :now + interval '23 hours' "
                "FROM generate_series(1, :n) i, generate_series(1, 40) w"
            ),
            {"now": NOW, "n": TENANTS * IDENTITIES_PER_TENANT},
        )
        connection.execute(
            text(
                "INSERT INTO webhook_deliveries (id, provider, headers, body, received_at) "
                "VALUES (1, 'whatsapp', '{}', '{}', :now)"
            ),
            {"now": NOW},
        )


def failure_table() -> str:
    """VALUES rows (slot, class, code, rank): slot picks a failure by its share."""
    from app.providers.dead_letter_order import rank_of

    rows, slot = [], 0
    for failure_class, code, share in FAILURES:
        rank = rank_of("whatsapp", failure_class, code)
        for _ in range(share):
            rows.append(f"({slot}, '{failure_class}', {'NULL' if code is None else code}, {rank})")
            slot += 1
    return ", ".join(rows)


def fill(engine: Any, low: int, high: int) -> None:
    """Messages with ids low..high (the older history of what is there), then their
    attempts, events and webhook statuses, all in SQL."""
    identities = TENANTS * IDENTITIES_PER_TENANT
    failures = failure_table()
    with engine.begin() as connection:
        connection.execute(text("SET LOCAL synchronous_commit = off"))
        connection.execute(
            text(
                f"""
WITH base AS (
  SELECT g AS id,
         (hashint4(g) & 2147483647) % 1000 AS r,
         -- One busy number (a third of the traffic), the rest spread evenly.
         CASE WHEN (hashint4(g * 5) & 2147483647) % 3 = 0 THEN 1
              ELSE 1 + (hashint4(g * 7) & 2147483647) % {identities} END AS identity_id,
         :now - make_interval(secs => ({TOP} - g) * {SPACING_S}) AS at
  FROM generate_series(:low, :high) g
), shaped AS (
  SELECT b.*, ((b.identity_id - 1) / {IDENTITIES_PER_TENANT}) + 1 AS tenant_id,
         CASE WHEN b.id > {TOP} - 4000 AND b.r < 30 THEN 'queued'
              WHEN b.id > {TOP} - 4000 AND b.r < 45 THEN 'sending'
              WHEN b.r < 50 THEN 'failed'
              WHEN b.r < 215 THEN 'sent'
              WHEN b.r < 415 THEN 'delivered'
              ELSE 'read' END AS status,
         CASE WHEN b.r % 4 = 0 THEN 'reply' ELSE 'campaign' END AS lane
  FROM base b
), failing AS (
  SELECT s.*, f.class AS failure_class, f.code, f.rank
  FROM shaped s
  LEFT JOIN (VALUES {failures}) AS f(slot, class, code, rank)
    ON s.status = 'failed' AND f.slot = (hashint4(s.id * 13) & 2147483647) % 100
)
INSERT INTO messages (
  id, tenant_id, identity_id, recipient, lane, body_text, idempotency_key, fingerprint,
  status, cycle, provider_key_cycle, correlation_id, provider_message_id, attempt,
  unknown_attempts, rate_limited_attempts, had_unknown_outcome, request_started_ms,
  last_attempt_at, next_attempt_at, lease_until, failure_class, dead_letter_rank, last_error,
  queued_at, sending_at, sent_at, delivered_at, read_at, failed_at, created_at)
SELECT id, tenant_id, identity_id,
  '1555' || lpad(((hashint4(id * 3) & 2147483647) % 10000000)::text, 7, '0'),
  lane, 'Your order ' || id || ' is on its way', 'order-' || id, repeat('f', 64),
  status, 1, 1, 'c1.' || id,
  CASE WHEN status IN ('sent', 'delivered', 'read') THEN 'wamid.HBg' || md5(id::text) END,
  CASE WHEN status = 'queued' THEN 0 ELSE 1 END, 0, 0, false,
  CASE WHEN status <> 'queued' THEN (extract(epoch FROM at) * 1000)::bigint END,
  CASE WHEN status <> 'queued' THEN at END,
  CASE WHEN status = 'sending' AND r % 3 = 0 THEN at + interval '30 seconds' END,
  CASE WHEN status = 'sending' AND r % 3 = 1 THEN at + interval '25 seconds' END,
  failure_class, rank,
  CASE WHEN status = 'failed' THEN json_build_object(
    'provider', 'whatsapp', 'http_status', 400, 'code', code,
    'title', 'Error ' || coalesce(code::text, 'canceled'), 'message', 'verbatim words',
    'trace_id', substr(md5(id::text), 1, 12)) END,
  at, CASE WHEN status <> 'queued' THEN at END,
  CASE WHEN status IN ('sent', 'delivered', 'read') THEN at + interval '1 second' END,
  CASE WHEN status IN ('delivered', 'read') THEN at + interval '3 seconds' END,
  CASE WHEN status = 'read' THEN at + interval '60 seconds' END,
  CASE WHEN status = 'failed' THEN at + interval '1 second' END,
  at
FROM failing
"""
            ),
            {"now": NOW, "low": low, "high": high},
        )
        connection.execute(
            text(
                """
INSERT INTO attempts (message_id, cycle, number, provider_key, started_at, finished_at,
  outcome, http_status, provider_message_id, response_body)
SELECT id, 1, 1, md5(id::text), last_attempt_at, last_attempt_at + interval '200 ms',
  CASE WHEN status = 'failed' THEN coalesce(failure_class, 'permanent')
       WHEN status = 'sending' THEN NULL ELSE 'accepted' END,
  CASE WHEN status = 'failed' THEN 400 WHEN status = 'sending' THEN NULL ELSE 200 END,
  provider_message_id, '{"messages":[{"id":"wamid"}]}'
FROM messages WHERE id BETWEEN :low AND :high AND status <> 'queued'
"""
            ),
            {"low": low, "high": high},
        )
        connection.execute(
            text(
                """
INSERT INTO message_events (message_id, cycle, source, kind, from_status, to_status,
  applied, received_at, detail)
SELECT id, 1, 'api', 'create', NULL, 'queued', true, created_at, NULL::json
FROM messages WHERE id BETWEEN :low AND :high
UNION ALL
SELECT id, 1, 'worker', 'claim', 'queued', 'sending', true, sending_at, '{"attempt": 1}'::json
FROM messages WHERE id BETWEEN :low AND :high AND sending_at IS NOT NULL
"""
            ),
            {"low": low, "high": high},
        )
        connection.execute(
            text(
                """
INSERT INTO webhook_statuses (delivery_id, provider, identity_id, routing_id, dedupe_key,
  provider_message_id, status, provider_time, received_at, payload, applied_at, result,
  message_id, tries)
SELECT 1, 'whatsapp', identity_id, 'r', 'whatsapp:' || provider_message_id || '\\:delivered',
  provider_message_id, 'delivered', delivered_at, delivered_at, '{}', delivered_at, 'applied',
  id, 1
FROM messages WHERE id BETWEEN :low AND :high AND delivered_at IS NOT NULL
"""
            ),
            {"low": low, "high": high},
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("SELECT setval('messages_id_seq', :top)"), {"top": TOP})
        connection.execute(text("VACUUM ANALYZE"))
