"""A campaign-lane pause with real drains: RQ's worker in-process, real PostgreSQL and
Redis, the sandbox provider over HTTP. Replies go out while campaigns wait; the resume,
done on the dashboard, rings the campaign drain and they go."""

from __future__ import annotations

from rq import Queue, SimpleWorker

from jobs.queues import queue_name

from ..views.dashboard_world import make_staff, page_token, sign_in
from .conftest import Env


def run_workers(env: Env) -> None:
    """Both lanes' queues, until they are empty (what `worker --burst` does)."""
    redis = env.app.extensions["ratchet.redis"]
    queues = [Queue(queue_name(lane), connection=redis) for lane in ("reply", "campaign")]
    SimpleWorker(queues, connection=redis).work(burst=True, with_scheduler=False)


def recipients(env: Env, number: dict[str, object]) -> list[str]:
    return sorted(sent["body"]["to"] for sent in env.accepted(number))  # type: ignore[arg-type]


def test_a_paused_campaign_lane_holds_campaigns_while_replies_go_out_and_resume_sends_them(
    env: Env,
) -> None:
    number = env.number()
    iid = number["identity_id"]
    make_staff(env.db, "ops@tenant.test", "operator", None)
    client = env.app.test_client()
    sign_in(client, "ops@tenant.test")
    token = page_token(client, "/identities")
    answer = client.post(
        f"/identities/{iid}/pause",
        data={"csrf_token": token, "scope": "campaign", "reason": "wrong audience"},
    )
    assert answer.status_code == 302

    campaign = [env.send(number, f"1555123100{n}", lane="campaign") for n in range(3)]
    reply = env.send(number, "15551239999", lane="reply")
    run_workers(env)
    env.settle(number, quiet=0.3)
    assert recipients(env, number) == ["15551239999"]
    assert env.message(reply).status in ("sent", "delivered", "read")
    for message_id in campaign:
        row = env.message(message_id)
        assert (row.status, row.attempt) == ("queued", 0), "a paused campaign was claimed"

    answer = client.post(
        f"/identities/{iid}/resume", data={"csrf_token": token, "scope": "campaign"}
    )
    assert answer.status_code == 302
    # No sweeper runs here: only the resume's ring can have started the campaign drain.
    run_workers(env)
    env.settle(number, quiet=0.3)
    assert recipients(env, number) == [
        "15551231000",
        "15551231001",
        "15551231002",
        "15551239999",
    ]
    assert all(env.message(m).status in ("sent", "delivered", "read") for m in campaign)
