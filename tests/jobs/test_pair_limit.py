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

from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys

from .conftest import Env

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
