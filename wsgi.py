"""The WSGI entry point: `flask --app wsgi ...` and `gunicorn wsgi:app`.

Every long-running process starts here, so its logging is set up here, once.
"""

from app import create_app
from app.db_clock import start_clock_keeper
from app.logs import configure_logging
from app.startup import freeze_startup_objects

app = create_app()
configure_logging(app.config["RATCHET"].log_format, app.config["RATCHET"].log_level)
# This process's first claim or stamp is on the database's clock (app/db_clock.py).
start_clock_keeper(app.extensions["ratchet.db"].engine)
# Every process imports this first (gunicorn's workers each after their fork, since the
# app is not preloaded): start-up's objects stay out of its garbage collections.
freeze_startup_objects()
