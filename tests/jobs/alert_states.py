"""What the alert tests set up and read: the stuck threshold they use, the alerts firing now,
when a message was queued, a burst of the campaign lane's worker, and a database that
refuses writes for a while (`writes_refused`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime

from rq import SimpleWorker
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.repo.alerts import firing_alerts
from jobs.queues import get_queue

from ..conftest import PG_URL
from .conftest import Env

THRESHOLD = 30.0


def firing(env: Env) -> set[str]:
    with env.db.transaction() as session:
        return {alert.alert_key for alert in firing_alerts(session)}


def queued_at(env: Env, message_id: int) -> datetime:
    moment = env.message(message_id).queued_at
    assert moment is not None
    return moment


def work_campaign_lane() -> None:
    """A worker that runs what the campaign lane's queue holds, then stops."""
    queue = get_queue("campaign")
    SimpleWorker([queue], connection=queue.connection).work(burst=True, with_scheduler=False)


@contextlib.contextmanager
def writes_refused(env: Env) -> Iterator[None]:
    """The database refuses writes: a read-only transaction default for every new session."""
    name = make_url(PG_URL).database
    with env.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
    env.db.engine.dispose()  # sessions from now on read the new default
    try:
        yield
    finally:
        with env.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text("SET default_transaction_read_only = off"))
            connection.execute(text(f'ALTER DATABASE "{name}" RESET default_transaction_read_only'))
        env.db.engine.dispose()
