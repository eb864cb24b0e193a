"""A worker that stops itself (SIGSTOP) between its claim and its provider call, for
`test_paused_worker.py`: the pause lands at exactly that point, and lasts as long as the
test keeps it stopped.

`python -m tests.jobs.paused_worker MESSAGE_ID [--no-check]`, configured from the
environment like any Ratchet process. With `--no-check` its monotonic clock stands still,
so the lease check cannot see the pause, as it could not see one between the check and
the call: the call's latest end, fixed at the claim, must stop it.
Prints the outcome on its last line.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time

from app import create_app
from app.clock import utcnow
from app.crypto import get_box
from app.db import get_db
from jobs.send import send_one


def main() -> int:
    message_id = int(sys.argv[1])
    check = "--no-check" not in sys.argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    calls = 0
    frozen = time.monotonic()

    def monotonic() -> float:
        # The first reading is the claim's; the second is the check just before the call.
        nonlocal calls
        calls += 1
        if calls == 2:
            os.kill(os.getpid(), signal.SIGSTOP)
        return time.monotonic() if check else frozen

    app = create_app()
    with app.app_context():
        outcome, _ = send_one(
            get_db(), get_box(), app.config["RATCHET"], message_id, utcnow, monotonic
        )
    print(outcome, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
