"""The send job: one RQ job per message, carrying its id only."""

from __future__ import annotations

import logging

from app.db import get_db
from app.repo.messages import get_message

log = logging.getLogger(__name__)


def send_message(message_id: int) -> str:
    """Send one message (for now: re-read the row and return).

    Until the sending work lands, this job only re-reads the row, so a ring is proven to
    reach a worker; a job that finds nothing to do exits quietly.
    """
    with get_db().transaction() as session:
        message = get_message(session, message_id)
        if message is None:
            log.info("message %s does not exist; nothing to do", message_id)
            return "missing"
        return message.status
