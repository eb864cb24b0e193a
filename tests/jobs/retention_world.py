"""What the retention tests purge: a provider's template error with its raw body (`ERROR`),
and a moment past the 30 days a tenant's content is kept by default (`LATER`).
"""

from __future__ import annotations

from datetime import timedelta

from ..conftest import T0

RAW = '{"error":{"message":"(#132001) Template name does not exist in the translation"}}'
ERROR = {
    "provider": "whatsapp",
    "http_status": 400,
    "code": 132001,
    "title": "Template name does not exist",
    "message": "(#132001) Template name does not exist in the translation for +15551234567",
    "raw": RAW,
}
LATER = T0 + timedelta(days=31)
