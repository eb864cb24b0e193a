"""Several hosts on one machine (issue 35): three network namespaces (tests/chaos/hosts.py),
each running the web and a campaign worker (the first the sweeper too), reaching
PostgreSQL, Redis and the sandbox over their own veth links, and one identity in three
shards so that every host sends it (tests/jobs/host_runs.py).

- A host's link cut mid-drain, its drains' keys lost in Redis: the messages it had claimed
  wait out their lease, then another host claims them again; nothing lost, nothing
  accepted twice. Healed, the host comes back: its worker alone sends what is posted
  next, and every process stops cleanly.
- Hosts 30 s ahead and 30 s behind while sending: every claim is stamped on the
  database's clock, no lease is taken over, nothing is sent twice.
- In both, the identity's pace holds across the hosts: no more accepted in any one second
  than the rate and the burst allow.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from app.clock import utcnow
from app.models import Message
from app.shards import Shard
from jobs.queues import drain_keys

from .conftest import Env
from .host_runs import (
    LANE,
    RATE,
    HostRun,
    claims_of,
    draining,
    most_in_a_second,
    post,
    requests_of,
    three_hosts,
)
from .outcomes import correlation_of, finished, verdict_of
from .processes import stop_all

MESSAGES = 240  # two to each of 120 people: an order to keep in each conversation
SHARDS = 3


def leased_in(run: HostRun, ids: list[int], shards: set[int]) -> dict[int, datetime]:
    """The messages of these shards claimed under a lease still running: id -> its end."""
    ranges = [Shard(shard, SHARDS).key_range() for shard in shards]
    with run.env.db.transaction() as session:
        rows = session.execute(
            select(Message.id, Message.lease_until, Message.shard_key).where(
                Message.id.in_(ids),
                Message.status == "sending",
                Message.lease_until > utcnow(),
            )
        ).all()
    return {
        row.id: row.lease_until
        for row in rows
        if any(low <= row.shard_key < high for low, high in ranges)
    }


def assert_paced(run: HostRun) -> int:
    """No more accepted in any one second than the rate and the burst allow, and no faster
    than the rate over the run; returns the most in a second.

    The bounds are on the sandbox's arrival times, as test_shards.py has them: the pacing
    grants slots on Redis's clock, and a loaded machine holds some requests back up to
    0.25 s after their slot (the claim and the call's start between), beside others on
    time. Three hosts each pacing on its own would go at up to three times the rate."""
    # Every request the sandbox took, a repeat it answered from its key included: the
    # pace is on what reaches the provider, not on what it kept.
    times = sorted(request["time"] for request in run.env.requests(run.number))
    burst = max(2.0, RATE * run.env.config.pacing_burst)
    most = most_in_a_second(times)
    assert most <= RATE + burst + 1 + math.ceil(RATE * 0.25), most
    least = 0.98 * (len(times) - burst - 1) / RATE - 0.25
    assert times[-1] - times[0] >= least, (times[-1] - times[0], least)
    return most


@pytest.mark.slow
def test_a_host_cut_mid_drain_has_its_claims_taken_after_their_lease_and_none_sent_twice(
    env: Env, tmp_path: Path
) -> None:
    people = [f"1555610{n:04d}" for n in range(MESSAGES // 2)]
    with three_hosts(env, tmp_path) as run:
        cut = run.network[2]
        acks = post(run, people + people)
        ids = [ack.message_id for ack in acks]
        started = time.monotonic()
        workers = run.start_workers()  # on the whole backlog: the pace binds

        # 1. The cut, once the host has sent some and is draining a shard with sends in
        #    flight.
        run.wait_for(
            "the host to have sends in flight",
            lambda: cut.sent("sandbox") > 0 and bool(leased_in(run, ids, draining(run, cut))),
            limit=60,
        )
        shards = draining(run, cut)
        cut.cut()
        stranded = leased_in(run, ids, shards)  # it can claim nothing more now
        assert stranded, "the cut came after the host's sends had ended"
        # Its drains' keys go too, as in a Redis failover at the same moment: the sweeper
        # rings those shards at once, and only the messages' leases keep the host that
        # drains them next from sending them again while the cut host may still be.
        identity_id = run.number["identity_id"]
        run.redis.delete(*[k for s in shards for k in drain_keys(identity_id, LANE, s)])

        # 2. The others finish everything, the stranded messages after their lease.
        run.wait_for("every message to finish", lambda: finished(env, ids) == len(ids))
        elapsed = time.monotonic() - started
        claims = claims_of(env, ids)

        # 3. The other hosts' workers stop; healed, the cut host's worker sends alone the
        #    messages posted next, through every host's web.
        stop_all(workers[:2])
        assert all(process.poll() is None for process in cut.processes), "a process died"
        cut.heal()
        later = post(run, [f"1555611{n:04d}" for n in range(6)])
        more = [ack.message_id for ack in later]
        run.wait_for("the healed host to send", lambda: finished(env, more) == len(more))
        run.network.stop()
        codes = [process.returncode for host in run.network for process in host.processes]
        verdict = verdict_of(env, run.number, "whatsapp", acks + later)
        most = assert_paced(run)
        sent = [host.sent("sandbox") for host in run.network]

    print(
        f"\n{verdict.line()}; {len(stranded)} stranded by the cut; most accepted in a "
        f"second {most}; bytes to the sandbox per host {sent}; {elapsed:.0f} s"
    )
    assert all(sent), "a host sent nothing"
    for message_id, lease_until in stranded.items():
        # Claimed again only once its lease had run out, by a claim that says so.
        again = [c for c in claims[message_id] if c.lease_lost]
        assert again and again[0].at >= lease_until, (message_id, lease_until, again)
    # What reached the provider, not only what it kept (it answers a repeated key from
    # memory, as WhatsApp does not): one request for every message the cut did not
    # strand, and a stranded one asked again only once its lease had run out.
    for message_id, times in requests_of(env, run.number, ids).items():
        if message_id not in stranded:
            assert len(times) == 1, (message_id, times)
        else:
            end = stranded[message_id].timestamp()
            assert all(at >= end for at in times[1:]), (message_id, end, times)
    assert verdict.clean and not verdict.dead_letters, verdict.line()
    assert codes == [0] * len(codes), codes  # every process stopped cleanly on SIGTERM


@pytest.mark.slow
def test_hosts_a_minute_apart_stamp_claims_on_one_clock_and_take_over_no_lease(
    env: Env, tmp_path: Path
) -> None:
    people = [f"1555620{n:04d}" for n in range(MESSAGES // 2)]
    with three_hosts(env, tmp_path, skews={1: "+30s", 2: "-30s"}) as run:
        acks = post(run, people + people)
        ids = [ack.message_id for ack in acks]
        started = time.monotonic()
        run.start_workers()  # on the whole backlog: the pace binds
        run.wait_for("every message to finish", lambda: finished(env, ids) == len(ids))
        elapsed = time.monotonic() - started
        claims = claims_of(env, ids)
        requests = env.requests(run.number)
        verdict = verdict_of(env, run.number, "whatsapp", acks)
        most = assert_paced(run)
        sent = [host.sent("sandbox") for host in run.network]
        with env.db.transaction() as session:
            correlations = dict(
                session.execute(
                    select(Message.correlation_id, Message.id).where(Message.id.in_(ids))
                ).all()
            )

    print(
        f"\n{verdict.line()}; most accepted in a second {most}; bytes to the sandbox per "
        f"host {sent}; {elapsed:.0f} s"
    )
    assert all(sent), "a host sent nothing"
    # No lease taken over: every message claimed once, called once.
    assert not [i for i, c in claims.items() if len(c) != 1 or c[0].lease_lost]
    called = Counter(correlations.get(correlation_of("whatsapp", r)) for r in requests)
    assert set(called) == set(ids) and set(called.values()) == {1}, called
    # Each claim on the database's clock: the call it made reached the sandbox (on this
    # machine's clock) within moments, where a host's own clock would be 30 s off.
    for request in requests:
        message_id = correlations[correlation_of("whatsapp", request)]
        claimed = claims[message_id][0].at.timestamp()
        assert abs(request["time"] - claimed) < 5, (message_id, request["time"] - claimed)
    assert verdict.clean and not verdict.dead_letters, verdict.line()
