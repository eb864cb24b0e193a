"""The alert evaluator run once, now, on the served app's database with stuck_after at 60 s
(`evaluate`): the browser tests' stand-in for the sweeper, which runs it in production.
"""

from __future__ import annotations

import dataclasses

from app.clock import utcnow
from jobs.alerts import AlertEvaluator

from .conftest import Served


def evaluate(served: Served) -> None:
    config = dataclasses.replace(served.app.config["RATCHET"], stuck_after=60.0)
    evaluator = AlertEvaluator(served.db, config)
    evaluator.run(utcnow())
    evaluator.close()
