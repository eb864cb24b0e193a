"""Review A: one event of a shape Meta documents but the parser does not take (a checkbox
plugin opt-in, which has no `sender`: "The sender object is not included for
messaging_optins events triggered by the checkbox plugin", Messenger webhook reference)
makes the whole signed delivery "not understood": it is kept raw and answered 202, so Meta
never resends it, and the delivery receipt for our message batched beside it is never
applied, now or by the sweeper (DESIGN section 1, promise 2; section 6: each status is
applied, a status that fails to apply is replayed).
"""

from __future__ import annotations

from app.models import WebhookStatus

from ..conftest import T0
from ..factories import World
from .test_webhooks_messenger import PAGE, PSID, Ratchet, delivery, ms, page, ratchet  # noqa: F401


def test_a_checkbox_opt_in_beside_a_delivery_receipt_does_not_lose_the_receipt(
    ratchet: Ratchet,  # noqa: F811
    page: World,  # noqa: F811
) -> None:
    message_id = ratchet.sent(page, PSID, T0, "m_one")
    body = delivery(mids=["m_one"], watermark=ms(T0) + 5000)
    # Meta batches events of one Page in one entry's `messaging`; this one came from the
    # checkbox plugin on the tenant's web site (documented shape: no `sender`).
    body["entry"][0]["messaging"].insert(
        0,
        {
            "recipient": {"id": PAGE},
            "timestamp": ms(T0) + 4000,
            "optin": {"ref": "checkout-page", "user_ref": "ref-7f3a"},
        },
    )
    answer = ratchet.post(body)
    assert answer.status_code < 300, answer.text

    # Nothing is left for the sweeper to replay: no status row was stored at all.
    stored = ratchet.count(WebhookStatus)
    assert ratchet.status(message_id) == "delivered", (
        f"the signed delivery was answered {answer.status_code} {answer.json()} and the "
        f"delivery receipt for m_one batched with a documented opt-in event never applied: "
        f"message {message_id} is still {ratchet.status(message_id)!r}, and {stored} status "
        "rows were stored for the sweeper to replay"
    )
