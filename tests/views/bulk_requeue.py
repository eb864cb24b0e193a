"""A bulk requeue from the dead-letters page: exhausted dead letters to requeue, the plan's
preview and its confirmation, and the one campaign job the confirmation rings.
"""

from __future__ import annotations

import re

from flask.testing import FlaskClient
from redis import Redis
from rq import Queue, SimpleWorker

from app.db import Database
from jobs.queues import queue_name

from .dashboard_world import failed_message, page_token

EXHAUSTED = {"provider": "whatsapp", "code": 131000, "title": "Something went wrong"}


def exhausted(db: Database, world: object, minute: int = 0) -> int:
    return failed_message(
        db,
        world,  # type: ignore[arg-type]
        failure_class="exhausted",
        error=EXHAUSTED,
        had_unknown=True,
        minute=minute,
    )


def preview(client: FlaskClient, **filters: str) -> tuple[int, str]:
    token = page_token(client, "/dead-letters")
    response = client.post("/dead-letters/bulk-requeue", data={"csrf_token": token, **filters})
    assert response.status_code == 302, response.get_data(as_text=True)
    found = re.search(r"/bulk/(\d+)", response.headers["Location"])
    assert found
    plan_id = int(found.group(1))
    return plan_id, client.get(f"/bulk/{plan_id}").get_data(as_text=True)


def confirm(client: FlaskClient, plan_id: int, groups: list[str], **form: str) -> str:
    token = page_token(client, f"/bulk/{plan_id}")
    response = client.post(
        f"/bulk/{plan_id}/confirm",
        data={"csrf_token": token, "group": groups, **form},
        follow_redirects=True,
    )
    assert response.status_code == 200
    return response.get_data(as_text=True)


def work_one_campaign_job(redis_url: str) -> None:
    """Run exactly the job the confirmation rang (not the drains it rings in turn)."""
    connection = Redis.from_url(redis_url)
    try:
        worker = SimpleWorker(
            [Queue(queue_name("campaign"), connection=connection)], connection=connection
        )
        worker.work(burst=True, max_jobs=1)
    finally:
        connection.close()
