"""The provider's pair limit (131056: too many messages from this number to one user in a
short time) paces that one recipient, not the identity.

Found by review: after a 131056 the recipient was skipped for 6 s, and then the next batch
claimed every message due to it at once; all but one met 131056 again, each attempt
counted against the message's cap of 10, so a longer run of messages to one person ended
`exhausted`. Now, after its first 131056, a recipient gets one message per batch, each
send starting the spacing again, for as long as it keeps meeting the limit (and a minute).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import Counter
from datetime import timedelta
from typing import Any

from redis import Redis
from sqlalchemy import event

from app.repo.claims import claim_batch
from app.repo.due import count_due
from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys, get_queue

from .conftest import Env
from .redis_proxy import Proxy

SPACING = 1.0  # Ratchet's spacing for a pair-limited recipient (6 s in production)
PROVIDER_WINDOW = 0.8  # the sandbox's pair limit: a little under it, as the real one is


def test_a_pair_limited_recipient_gets_one_message_per_spacing_and_others_go_at_once(
    env: Env,
) -> None:
    number = env.number(statuses=[], rate_limit_mps=None, pair_limit_seconds=PROVIDER_WINDOW)
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=200.0, total_rate=220.0)
    to_one = [env.send(number, "15557400001", lane="campaign", text=f"n{n}") for n in range(6)]
    to_others = [env.send(number, f"155574100{n:02d}", lane="campaign") for n in range(6)]
    redis = env.app.extensions["ratchet.redis"]
    config = dataclasses.replace(env.config, pair_limit_wait=SPACING, drain_concurrency=12)
    pacer = Pacer(redis, config.pacing_burst, config.pacing_slowdown, config.pair_limit_wait)

    deadline = time.monotonic() + 60
    runs = 0
    while not all(env.message(i).status == "sent" for i in to_one + to_others):
        assert time.monotonic() < deadline, [env.message(i).status for i in to_one]
        runs += 1
        redis.set(drain_keys(identity_id, "campaign")[0], f"run{runs}", px=60_000)
        Drain(env.db, env.box, config, redis, pacer, identity_id, "campaign").run(f"run{runs}")
        time.sleep(0.1)

    answers = Counter(
        (r["to"], r["error_code"]) for r in env.requests(number) if r.get("to") is not None
    )
    # The first batch sent all six at once (nothing was known yet): one accepted, five met
    # the limit. After that, one at a time, each after the spacing: no 131056 more. (Each
    # release of all those due at once, as before, would meet it 5 + 4 + 3 + 2 + 1 times.)
    assert answers[("15557400001", 131056)] <= 5 + 1, answers
    assert answers[("15557400001", None)] == 6
    assert all(env.message(i).rate_limited_attempts <= 2 for i in to_one)
    times = sorted(a["time"] for a in env.accepted(number) if a["to"] == "15557400001")
    assert all(b - a >= PROVIDER_WINDOW for a, b in itertools.pairwise(times)), times
    # The other recipients were not held back by it: each went once, in the first batch.
    assert all(answers[(f"155574100{n:02d}", None)] == 1 for n in range(6)), answers
    assert all(env.message(i).attempt == 1 for i in to_others)


RECIPIENT = "15557400009"


def pacer_and_redis(env: Env, redis: Redis | None = None) -> tuple[Redis, Pacer]:
    redis = redis or env.app.extensions["ratchet.redis"]
    return redis, Pacer(redis, pair_seconds=SPACING)


def test_a_paced_recipient_s_oldest_goes_first_and_the_rest_of_the_batch_is_others(
    env: Env,
) -> None:
    """One message to a paced recipient per batch, taken first, and the batch filled with
    others: counted and claimed alike, so no pacing slot is paid for nothing. (Found by
    review: the one-each filter ran after the LIMIT, and a batch of five due to one paced
    recipient claimed one message while five others waited.)"""
    number = env.number(statuses=[])
    identity_id = number["identity_id"]
    to_one = [env.send(number, RECIPIENT, lane="campaign", text=f"r{n}") for n in range(5)]
    others = [env.send(number, f"155574200{n:02d}", lane="campaign") for n in range(5)]
    config = dataclasses.replace(env.config, drain_batch=5)
    lease = timedelta(seconds=config.lease_seconds)
    with env.db.transaction() as session:
        due = count_due(
            session, identity_id, "campaign", env.now, config, blocked=[], paced=[RECIPIENT]
        )
        claims = claim_batch(
            session, identity_id, "campaign", due, env.now, lease, one_each=[RECIPIENT]
        )
    assert due == 5
    assert [c.message_id for c in claims] == [to_one[0], *others[:4]]


def test_a_drain_held_back_only_by_a_pair_limit_comes_back_when_it_ends(env: Env) -> None:
    """With nothing due but messages to a recipient under the pair limit, the drain rings
    itself for the moment the limit ends, instead of leaving them to the sweeper's next
    pass (or to nobody, with the sweeper down). (Found by review.)"""
    number = env.number(statuses=[])
    identity_id = number["identity_id"]
    ids = [env.send(number, RECIPIENT, lane="campaign", text=f"r{n}") for n in range(2)]
    redis, pacer = pacer_and_redis(env)
    pacer.pair_limited(identity_id, RECIPIENT)
    queue = get_queue("campaign", redis)
    queue.empty()  # the API's rings
    scheduled_before = queue.scheduled_job_registry.count
    redis.set(drain_keys(identity_id, "campaign")[0], "held", px=60_000)

    summary = Drain(env.db, env.box, env.config, redis, pacer, identity_id, "campaign").run("held")

    assert "nothing sent" in summary, summary
    assert [env.message(i).status for i in ids] == ["queued", "queued"]
    assert queue.scheduled_job_registry.count == scheduled_before + 1


def test_redis_lost_as_a_paced_send_is_noted_rolls_the_claim_back(env: Env) -> None:
    """Noting a paced recipient's send happens inside the claim's transaction: with Redis
    gone at that moment the claim rolls back and nothing is stranded under a lease it will
    never use (each such message would have come back as a lost lease, an unknown attempt
    counted for a call never made). (Found by review: it ran after the commit.)"""
    number = env.number(statuses=[])
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=500.0, total_rate=500.0)
    real: Redis = env.app.extensions["ratchet.redis"]
    real_pacer = Pacer(real, pair_seconds=0.01)
    real_pacer.pair_limited(identity_id, RECIPIENT)  # paced for a minute, blocked 10 ms
    time.sleep(0.05)
    ids = [env.send(number, RECIPIENT, lane="campaign")] + [
        env.send(number, f"155574300{n:02d}", lane="campaign") for n in range(3)
    ]
    kwargs = real.connection_pool.connection_kwargs
    proxy = Proxy(kwargs.get("port", 6379))
    redis = Redis(host="127.0.0.1", port=proxy.port, db=kwargs.get("db", 0), socket_timeout=2)
    redis.set(drain_keys(identity_id, "campaign")[0], "cut", px=60_000)

    def cut_after_the_attempt_rows(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO ATTEMPTS"):
            proxy.cut()  # Redis goes away between the claim's last statement and its commit

    event.listen(env.db.engine, "after_cursor_execute", cut_after_the_attempt_rows)
    try:
        drain = Drain(env.db, env.box, env.config, redis, Pacer(redis), identity_id, "campaign")
        summary = drain.run("cut")
    finally:
        event.remove(env.db.engine, "after_cursor_execute", cut_after_the_attempt_rows)
        redis.close()
        redis.connection_pool.disconnect()

    assert "stopped: ConnectionError" in summary, summary
    assert env.requests(number) == []
    rows = [env.message(i) for i in ids]
    assert [(m.status, m.attempt, m.lease_until) for m in rows] == [("queued", 0, None)] * 4
