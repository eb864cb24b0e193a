"""The WSGI entry point: `flask --app wsgi ...` and `gunicorn wsgi:app`.

Every long-running process starts here, so its logging is set up here, once.
"""

from app import create_app
from app.logs import configure_logging

app = create_app()
configure_logging(app.config["RATCHET"].log_format, app.config["RATCHET"].log_level)
