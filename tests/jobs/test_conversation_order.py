"""Each conversation reaches the provider in the order the API accepted it, with a drain
calling many at once, and with a message of one conversation meeting a rate limit in its
middle. Read at the sandbox: the order it accepted each person's messages in, and, since
the next message is called only after the previous one's answer, a gap of at least the
sandbox's answer delay between them (a lower bound that causality gives, not a timing).

Found in the issue's run: a batch called one person's messages side by side, and 17 of 20
people sent six messages each got them in another order."""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from datetime import timedelta

from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys

from .conftest import Env

DELAY = 0.1  # the sandbox answers every send this late
PEOPLE = [f"155577000{n:02d}" for n in range(8)]
RATE_LIMITED_ONCE = "15550000004"  # the sandbox's 429 (Retry-After: 2) once per message


def test_each_persons_messages_reach_the_provider_in_order_under_concurrency(env: Env) -> None:
    number = env.number(statuses=[], rate_limit_mps=None, answer_delay_ms=int(DELAY * 1000))
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=500.0, total_rate=500.0)
    # Posted round-robin, so every batch would hold several of one person's messages.
    for part in range(4):
        for person in PEOPLE:
            env.send(number, person, lane="campaign", text=f"part {part}")
    # The middle of this conversation meets a rate limit (so does each of its messages).
    for part in range(3):
        env.send(number, RATE_LIMITED_ONCE, lane="campaign", text=f"part {part}")
    redis = env.app.extensions["ratchet.redis"]
    config = dataclasses.replace(env.config, drain_concurrency=10, drain_slice=60.0)
    pacer = Pacer(redis, config.pacing_burst, config.pacing_slowdown, config.pair_limit_wait)

    for run in range(20):
        accepted = env.accepted(number)
        if len(accepted) == 4 * len(PEOPLE) + 3:
            break
        redis.set(drain_keys(identity_id, "campaign")[0], f"run{run}", px=60_000)
        drain = Drain(env.db, env.box, config, redis, pacer, identity_id, "campaign")
        drain.clock = env.clock
        drain.run(f"run{run}")
        env.now += timedelta(seconds=3)  # past the rate limit's Retry-After, on our clock
    else:
        raise AssertionError(f"not all accepted: {len(env.accepted(number))}")

    by_person: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for send in accepted:
        by_person[send["to"]].append((send["time"], send["body"]["text"]["body"]))
    assert [text for _, text in by_person[RATE_LIMITED_ONCE]] == [f"part {n}" for n in range(3)]
    for person in PEOPLE:
        assert [text for _, text in by_person[person]] == [f"part {n}" for n in range(4)], person
    for person, sends in by_person.items():
        for (before, _), (after, _) in itertools.pairwise(sends):
            # Called after the earlier one's answer, which came DELAY after its receipt.
            assert after - before >= DELAY * 0.99, (person, sends)
