"""Where the reconciler used to live; it is `app/reconcile.py` now.

These names stay importable from here so code written against them keeps working.
"""

from __future__ import annotations

from app.reconcile import apply_parked, apply_webhook_status, record_double_send

__all__ = ["apply_parked", "apply_webhook_status", "record_double_send"]
