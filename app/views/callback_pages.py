"""The admins' pages of status callbacks (filled in below)."""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("callback_pages", __name__)
