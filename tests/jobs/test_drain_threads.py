"""A drain calls the provider from one set of threads for its whole run, not a new pool
per batch (starting the threads again for every batch was CPU each send paid for), and
leaves none of them behind when it ends."""

from __future__ import annotations

import dataclasses
import logging
import threading

import pytest
from sqlalchemy import select

from app.models import Attempt
from app.providers.transport import close_transport, get_transport
from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys

from .conftest import Env


def test_a_drain_sends_every_batch_from_the_same_threads_and_stops_them_when_it_ends(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    number = env.number(statuses=[])
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=500.0, total_rate=500.0)
    ids = [env.send(number, f"1555710{n:04d}", lane="campaign") for n in range(9)]
    redis = env.app.extensions["ratchet.redis"]
    redis.set(drain_keys(identity_id, "campaign")[0], "threads", px=60_000)
    # Three messages a batch, two calls at once: three batches, at least two threads busy.
    config = dataclasses.replace(env.config, drain_batch=3, drain_concurrency=2)
    prefix = f"drain-{identity_id}-campaign"

    drain = Drain(env.db, env.box, config, redis, Pacer(redis), identity_id, "campaign")
    with caplog.at_level(logging.DEBUG, logger="app.providers.http"):
        summary = drain.run("threads")

    assert "9 accepted" in summary
    assert [env.message(i).status for i in ids] == ["sent"] * 9
    assert len(env.accepted(number)) == 9
    # Each request is logged (at debug) from the thread that made it.
    senders = [r.threadName for r in caplog.records if r.getMessage().startswith("POST ")]
    assert len(senders) == 9
    assert all(name.startswith(prefix) for name in senders), senders
    assert len(set(senders)) <= config.drain_concurrency, senders
    assert not [t.name for t in threading.enumerate() if t.name.startswith(prefix)]


def _kept_connections() -> set[int]:
    return {id(c) for pool in get_transport().pools for c in pool.core.connections}


def test_the_next_drain_s_threads_send_over_the_connections_the_last_one_kept(
    env: Env,
) -> None:
    """A drain's call thread n sends through connection pool n, so the next drain's thread
    n finds the connection the last one kept alive: no new connection (with the provider's
    TLS handshake) for each drain. Dealt pools in turn, the second drain's threads took two
    pools not yet used, and opened two connections."""
    number = env.number(statuses=[])
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=500.0, total_rate=500.0)
    redis = env.app.extensions["ratchet.redis"]
    config = dataclasses.replace(env.config, drain_batch=2, drain_concurrency=2)
    close_transport()  # a transport of its own: no pools made yet
    kept: list[set[int]] = []
    for n in range(2):
        ids = [env.send(number, f"155571{n}{m:04d}", lane="campaign") for m in range(2)]
        redis.set(drain_keys(identity_id, "campaign")[0], f"keep{n}", px=60_000)
        drain = Drain(env.db, env.box, config, redis, Pacer(redis), identity_id, "campaign")
        assert "2 accepted" in drain.run(f"keep{n}")
        assert [env.message(i).status for i in ids] == ["sent"] * 2
        kept.append(_kept_connections())

    assert len(kept[0]) == 2, kept  # both calls at once: one connection each
    assert kept[1] == kept[0]
    assert len(get_transport().pools) == 2


def test_a_call_queued_past_its_latest_start_gives_its_message_back_uncounted(
    env: Env,
) -> None:
    """A batch of two on one call thread: the first call runs to its deadline (the provider
    never answers), so the second could start only past its lease's latest start (3 s
    after the claim here) and stands down without a request. Its message is given back at
    once, due again and counted against no cap, and the drain sends it next. (Found by
    review: it stayed leased until the lease ran out, then came back as a lost lease, an
    unknown attempt that waited the webhook grace.)"""
    number = env.number(statuses=[], hang_seconds=30.0, rate_limit_mps=None)
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=500.0, total_rate=500.0)
    # 15550000013: no answer for hang_seconds, nothing accepted.
    stuck = env.send(number, "15550000013", lane="campaign")
    queued = env.send(number, "15557110001", lane="campaign")
    redis = env.app.extensions["ratchet.redis"]
    redis.set(drain_keys(identity_id, "campaign")[0], "slow", px=60_000)
    config = dataclasses.replace(
        env.config,
        provider_timeout=3.0,
        lease_margin=0.5,
        webhook_grace=2.0,
        drain_batch=2,
        drain_concurrency=1,
        drain_slice=30.0,
    )
    assert config.lease_seconds - config.provider_timeout - config.lease_margin == 3.0

    summary = Drain(env.db, env.box, config, redis, Pacer(redis), identity_id, "campaign").run(
        "slow"
    )

    assert "1 stood" in summary and "1 accepted" in summary, summary
    sent = env.message(queued)
    assert (sent.status, sent.attempt) == ("sent", 2)
    assert (sent.unknown_attempts, sent.had_unknown_outcome) == (0, False)
    assert [a["to"] for a in env.accepted(number)] == ["15557110001"]  # one copy
    with env.db.transaction() as session:
        outcomes = session.scalars(
            select(Attempt.outcome).where(Attempt.message_id == queued).order_by(Attempt.number)
        ).all()
    assert outcomes == ["stood_down", "accepted"]
    assert env.message(stuck).unknown_attempts == 1  # the deadline: an unknown outcome
