"""The alert webhook: one signed firing post and one clearing post per episode, retried
with backoff under the same id, not lost across a restart, and never under a second id
when the evaluating process is killed mid-episode. A local HTTP receiver is the outside
world; the sweeper runs as a real process where a process is killed."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from app.clock import utcnow
from app.models import AlertPost
from jobs.alerts import AlertEvaluator

from ..conftest import PG_URL, SECRET_KEY, free_port
from .alert_receiver import SECRET, Receiver
from .alert_states import THRESHOLD, firing, queued_at, work_campaign_lane, writes_refused
from .conftest import Env

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver().start()
    yield made
    made.stop()


def evaluator_for(env: Env, url: str) -> AlertEvaluator:
    config = dataclasses.replace(
        env.config, stuck_after=THRESHOLD, alert_webhook_url=url, alert_webhook_secret=SECRET
    )
    return AlertEvaluator(env.db, config)


def wait_until(condition: Callable[[], bool], limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_one_firing_and_one_clearing_post_per_episode_when_the_first_post_fails(
    env: Env, receiver: Receiver
) -> None:
    receiver.fail_first = 1
    evaluator = evaluator_for(env, receiver.url)
    number = env.number()
    since = queued_at(env, env.send(number, "15551240001"))
    at = since + timedelta(seconds=THRESHOLD + 1)
    try:
        evaluator.run(at)  # fires; the post is refused (500)
        assert len(receiver.posts) == 1 and receiver.accepted() == []
        evaluator.run(at + timedelta(seconds=1))  # still firing, the retry not due: no post
        assert len(receiver.posts) == 1
        evaluator.run(at + timedelta(seconds=3))  # the retry, under the same id
        evaluator.run(at + timedelta(seconds=60))  # still firing: never repeated
        work_campaign_lane()  # progress resumes
        evaluator.run(utcnow() + timedelta(seconds=THRESHOLD + 5))
        evaluator.run(utcnow() + timedelta(seconds=THRESHOLD + 120))
    finally:
        evaluator.close()
    posts = receiver.posts
    assert all(post.signature_ok for post in posts)
    episode = posts[0].body["ratchet"]["episode"]
    assert receiver.accepted_ids() == [f"{episode}.fired", f"{episode}.cleared"]
    assert [post.alert_id for post in posts] == [f"{episode}.fired"] * 2 + [f"{episode}.cleared"]
    fired, cleared = (post.body for post in receiver.accepted())
    assert fired["text"].startswith("[FIRING] Queue stuck")
    assert cleared["text"].startswith("[CLEARED] Queue stuck")
    assert cleared["ratchet"]["fired_figures"]["due"] == 1
    assert cleared["ratchet"]["cleared_figures"]["due"] == 0
    assert fired["ratchet"]["fired_at"] == at.isoformat()


def test_a_post_the_receiver_never_took_is_made_after_a_restart(
    env: Env, receiver: Receiver
) -> None:
    number = env.number()
    since = queued_at(env, env.send(number, "15551240002"))
    at = since + timedelta(seconds=THRESHOLD + 1)
    gone = evaluator_for(env, f"http://127.0.0.1:{free_port()}/hooks")  # nobody listens
    gone.run(at)
    gone.close()  # the process ends; its outbox row is all that remains
    with env.db.transaction() as session:
        (post,) = session.scalars(select(AlertPost))
        assert post.delivered_at is None and post.attempts == 1 and post.last_error
    restarted = evaluator_for(env, receiver.url)
    try:
        restarted.run(at + timedelta(minutes=5))
    finally:
        restarted.close()
    assert receiver.accepted_ids() == [post.post_key]


def start_sweeper(env: Env, url: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "flask", "--app", "wsgi", "sweep"],
            cwd=ROOT,
            env={
                **os.environ,
                "DATABASE_URL": PG_URL,
                "REDIS_URL": env.config.redis_url,
                "SECRET_KEY": SECRET_KEY,
                "RATCHET_STUCK_AFTER": "1",
                "RATCHET_SWEEP_INTERVAL": "0.2",
                "RATCHET_ALERT_INTERVAL": "0.2",
                "RATCHET_ALERT_WEBHOOK_URL": url,
                "RATCHET_ALERT_WEBHOOK_SECRET": SECRET,
            },
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
    process.wait(timeout=30)


def delivered(env: Env) -> int:
    with env.db.transaction() as session:
        rows = session.scalars(select(AlertPost).where(AlertPost.delivered_at.is_not(None)))
        return len(list(rows))


def one_episode_seen(
    env: Env, receiver: Receiver, tmp_path: Path, ready: Callable[[], bool] | None = None
) -> None:
    """The lane recovers under a second sweeper; the receiver sees one episode."""
    log = tmp_path / "second.log"
    second = start_sweeper(env, receiver.url, log)
    try:
        wait_until(lambda: "sweeper starting" in log.read_text())
        if ready is not None:
            wait_until(ready)
        time.sleep(1.0)  # several passes while the lane is still stuck
        work_campaign_lane()  # the workers return; the second sweeper sees it clear
        wait_until(lambda: any(i.endswith(".cleared") for i in receiver.accepted_ids()))
    except AssertionError:
        raise AssertionError((tmp_path / "second.log").read_text()[-3000:]) from None
    finally:
        stop(second)
    ids = set(receiver.accepted_ids())
    episodes = {alert_id.rsplit(".", 1)[0] for alert_id in ids}
    assert len(episodes) == 1, receiver.accepted_ids()
    (episode,) = episodes
    assert ids == {f"{episode}.fired", f"{episode}.cleared"}
    assert firing(env) == set()


def test_a_sweeper_killed_mid_episode_never_posts_the_episode_under_a_second_id(
    env: Env, receiver: Receiver, tmp_path: Path
) -> None:
    number = env.number()
    env.send(number, "15551240003")  # no worker runs: stuck after a second
    first = start_sweeper(env, receiver.url, tmp_path / "first.log")
    try:
        wait_until(lambda: len(receiver.accepted()) == 1)
        wait_until(lambda: delivered(env) == 1)
    finally:
        stop(first, signal.SIGKILL)
    one_episode_seen(env, receiver, tmp_path)
    assert [p.alert_id for p in receiver.posts].count(receiver.posts[0].alert_id) == 1


def test_a_sweeper_killed_while_the_database_refused_writes_posts_the_same_id_again(
    env: Env, receiver: Receiver, tmp_path: Path
) -> None:
    number = env.number()
    env.send(number, "15551240004")
    with writes_refused(env):
        first = start_sweeper(env, receiver.url, tmp_path / "first.log")
        try:
            # Posted and logged although nothing could be stored...
            wait_until(lambda: len(receiver.accepted()) == 1)
        finally:
            stop(first, signal.SIGKILL)  # ...and killed before it could store it
    assert "could not be stored" in (tmp_path / "first.log").read_text()
    # The second sweeper stores the episode under the id the first derived, and posts it
    # again under that id (the receiver drops the repeat).
    one_episode_seen(env, receiver, tmp_path, ready=lambda: len(receiver.accepted()) == 2)
    assert receiver.posts[0].alert_id == receiver.posts[1].alert_id


def test_a_failed_post_is_stored_and_logged_without_the_hooks_secret_path(
    env: Env, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.fail_first = 1
    evaluator = evaluator_for(env, receiver.url + "/T0001/B0001/path-token-XYZ")
    number = env.number()
    since = queued_at(env, env.send(number, "15551240005"))
    try:
        evaluator.run(since + timedelta(seconds=THRESHOLD + 1))
    finally:
        evaluator.close()
    with env.db.transaction() as session:
        (post,) = session.scalars(select(AlertPost))
    assert post.last_error is not None and "HTTP 500" in post.last_error
    assert "[alert webhook]" in post.last_error
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "failed (attempt 1)" in logged
    assert "path-token-XYZ" not in post.last_error + logged
    assert SECRET not in logged


def test_a_failing_receiver_costs_a_pass_one_attempt_and_the_rest_follow(
    env: Env, receiver: Receiver
) -> None:
    receiver.fail_first = 1
    evaluator = evaluator_for(env, receiver.url)
    number = env.number()
    since = queued_at(env, env.send(number, "15551240006", lane="campaign"))
    env.send(number, "15551240007", text="a reply, outside any window", lane="reply")
    at = since + timedelta(seconds=THRESHOLD + 5)
    try:
        outcome = evaluator.run(at)  # both lanes fire; the first post is refused
        assert len(outcome.fired) == 2
        assert len(receiver.posts) == 1  # the second waits rather than hold up the pass
        evaluator.run(at + timedelta(seconds=3))
    finally:
        evaluator.close()
    assert len(set(receiver.accepted_ids())) == 2 and len(receiver.accepted()) == 2
