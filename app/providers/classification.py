"""Provider error codes as data: what each means, its failure class, what a person should do.

The one place docs/design.md section 7's table lives. Source of the codes: Meta's
error-code reference (WhatsApp) and Twilio's error reference. The mapping from that
table's labels:

- T (transient) -> `unknown`, except rate limits (4, 80007, 130429) -> `rate_limited` and the
  pair limit 131056 -> `pair_limited`;
- P (permanent) -> `permanent`, except template problems 132000-132016 -> `needs_human`;
- A and A/slow (account or configuration) -> `sender_broken`.

The code decides; the HTTP status decides only when the provider gave no code. A code that
is not here is `needs_human`: we do not guess about what we have not read.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import FailureClass

UNKNOWN = FailureClass.UNKNOWN
RATE_LIMITED = FailureClass.RATE_LIMITED
PAIR_LIMITED = FailureClass.PAIR_LIMITED
PERMANENT = FailureClass.PERMANENT
NEEDS_HUMAN = FailureClass.NEEDS_HUMAN
SENDER_BROKEN = FailureClass.SENDER_BROKEN
EXHAUSTED = FailureClass.EXHAUSTED


@dataclass(frozen=True, slots=True)
class Classification:
    failure_class: FailureClass
    meaning: str  # one line, our words
    action: str  # what a person should do about it


def _c(failure_class: FailureClass, meaning: str, action: str) -> Classification:
    return Classification(failure_class, meaning, action)


_RETRY = "Nothing: Ratchet retries with backoff. Escalate to Meta if it persists."
_SLOW = "Nothing for this message: Ratchet retries later. If frequent, lower the identity's rate."
_FIX_TOKEN = "Replace the identity's token (`identity update`), then `identity resume`."
_FIX_ACCOUNT = "Fix the account in Meta Business Manager, then `identity resume`."
_FIX_REQUEST = "Fix the request (recipient, parameters or type); requeue only once it is fixed."
_FIX_TEMPLATE = "Fix or replace the template in WhatsApp Manager, then requeue."

_PERMISSION = _c(
    SENDER_BROKEN,
    "API permission problem (Graph API permission codes 200-299).",
    "Grant the app the missing permission for this WhatsApp account, then `identity resume`.",
)

_TEMPLATE_RANGE = _c(
    NEEDS_HUMAN,
    "Template problem (a code of the 132000-132016 template range).",
    _FIX_TEMPLATE,
)

WHATSAPP: dict[int, Classification] = {
    # A: the sending identity is unusable until a person fixes it.
    0: _c(SENDER_BROKEN, "Authentication failed: token expired or revoked.", _FIX_TOKEN),
    3: _c(
        SENDER_BROKEN,
        "The app lacks a capability or permission for this call.",
        "Check the app's capabilities and permissions in Meta, then `identity resume`.",
    ),
    10: _c(
        SENDER_BROKEN,
        "A permission was not granted or was removed.",
        "Re-grant the permission to the app, then `identity resume`.",
    ),
    190: _c(SENDER_BROKEN, "Access token expired or invalid.", _FIX_TOKEN),
    **dict.fromkeys(range(200, 300), _PERMISSION),
    131031: _c(SENDER_BROKEN, "The business account is locked.", _FIX_ACCOUNT),
    131042: _c(
        SENDER_BROKEN,
        "Business eligibility or payment problem.",
        "Fix the payment method or eligibility in Business Manager, then `identity resume`.",
    ),
    368: _c(SENDER_BROKEN, "Temporarily blocked for policy violations.", _FIX_ACCOUNT),
    133010: _c(
        SENDER_BROKEN,
        "The phone number is not registered with the Cloud API.",
        "Register the number (POST /{phone_number_id}/register), then `identity resume`.",
    ),
    131048: _c(
        SENDER_BROKEN,
        "Spam rate limit: earlier messages were blocked or reported.",
        "Check the number's quality rating and content before resuming; not a fast retry.",
    ),
    # T, rate limits: retry later, counted against the rate cap.
    4: _c(RATE_LIMITED, "App-level Graph API call-rate limit reached.", _SLOW),
    80007: _c(RATE_LIMITED, "Business-account (WABA) rate limit reached.", _SLOW),
    130429: _c(RATE_LIMITED, "Cloud API throughput for this number exceeded.", _SLOW),
    131056: _c(
        PAIR_LIMITED,
        "Too many messages to this same recipient in a short time.",
        "Nothing: Ratchet waits before sending to this recipient again.",
    ),
    # T, the provider is having trouble: the outcome is not known.
    131000: _c(UNKNOWN, "Unknown failure on Meta's side ('something went wrong').", _RETRY),
    131016: _c(UNKNOWN, "Service temporarily unavailable.", _RETRY),
    1: _c(UNKNOWN, "Unknown API error.", _RETRY),
    2: _c(UNKNOWN, "Temporary downtime or overload.", _RETRY),
    133016: _c(
        UNKNOWN,
        "Too many register/deregister attempts for the number.",
        "Wait before registering again; Ratchet retries slowly.",
    ),
    # P: this message will not go as it is.
    131049: _c(
        PERMANENT,
        "Meta chose not to deliver (per-user marketing limit).",
        "Do not resend now; a new send after 24 hours or more may work.",
    ),
    131050: _c(
        PERMANENT,
        "The user opted out of marketing messages from this business.",
        "Do not resend marketing to this user.",
    ),
    131047: _c(
        PERMANENT,
        "More than 24 hours since the user last wrote: free-form text is not allowed.",
        "Send an approved template instead, or wait for the user to write.",
    ),
    131026: _c(
        PERMANENT,
        "Undeliverable: not on WhatsApp, terms not accepted, or app too old.",
        "Check the number with the customer; do not retry as it is.",
    ),
    100: _c(PERMANENT, "Invalid parameter.", _FIX_REQUEST),
    131008: _c(PERMANENT, "A required parameter is missing.", _FIX_REQUEST),
    131009: _c(PERMANENT, "A parameter value is invalid.", _FIX_REQUEST),
    131051: _c(PERMANENT, "Unsupported message type.", _FIX_REQUEST),
    131021: _c(PERMANENT, "Sender and recipient are the same number.", _FIX_REQUEST),
    130472: _c(
        PERMANENT,
        "The user is part of a Meta experiment; the message was not sent.",
        "Nothing to fix; a later message may go through.",
    ),
    # The public sources give these two no T/P/A letter. "Fix the media, then maybe retry" is P's
    # "do not retry as it is": permanent (131052 concerns a customer's inbound media).
    131052: _c(
        PERMANENT,
        "Could not download media the user sent.",
        "Ask the user to send the media again.",
    ),
    131053: _c(
        PERMANENT, "Could not upload the media of this message.", "Fix the media, then requeue."
    ),
    # P, but a template problem: a person must fix the template, so first in the dead letters.
    # Codes of the range no source lists still name a template problem (docs/design.md section 7).
    **dict.fromkeys(range(132000, 132017), _TEMPLATE_RANGE),
    132000: _c(NEEDS_HUMAN, "Template parameter count does not match.", _FIX_TEMPLATE),
    132001: _c(NEEDS_HUMAN, "Template name or language not found.", _FIX_TEMPLATE),
    132005: _c(NEEDS_HUMAN, "Translated template text is too long.", _FIX_TEMPLATE),
    132007: _c(NEEDS_HUMAN, "Template violates the format-character policy.", _FIX_TEMPLATE),
    132012: _c(
        NEEDS_HUMAN,
        "Template parameter format mismatch (e.g. header media missing).",
        _FIX_TEMPLATE,
    ),
    132015: _c(
        NEEDS_HUMAN,
        "Template paused for low quality (3 h, then 6 h, then disabled).",
        "Wait for the pause to end or switch to another template, then requeue.",
    ),
    132016: _c(
        NEEDS_HUMAN,
        "Template permanently disabled.",
        "Create a new template and send with it; requeueing as it is will fail.",
    ),
}

_TWILIO_RETRY = "Nothing: Ratchet retries later. If it persists, check Twilio's status page."
_TWILIO_CONSOLE = (
    "Fix it in the Twilio Console (account, sender or credentials), then `identity resume`."
)
_CHECK_NUMBER = "Check the number with the customer; do not retry as it is."

# Twilio's error reference (https://www.twilio.com/docs/api/errors/<code>); 20429, 21611,
# 30001, 63016 and 63018 also in PROVIDERS.md section 3. Codes 30001-30008 come in a
# status callback (`failed`/`undelivered`, the message is already over); the others in the
# create call's answer.
TWILIO: dict[int, Classification] = {
    # A: the account, the sender or the Auth Token is unusable until a person fixes it.
    20003: _c(
        SENDER_BROKEN,
        "Twilio refused the Account SID and Auth Token (authentication error).",
        "Replace the identity's Auth Token (`identity update --token`), then `identity resume`.",
    ),
    20404: _c(
        SENDER_BROKEN,
        "Twilio has no such resource: the Account SID is wrong or the account is closed.",
        _TWILIO_CONSOLE,
    ),
    21606: _c(
        SENDER_BROKEN,
        "The From address is not a message-capable Twilio sender for this destination.",
        _TWILIO_CONSOLE,
    ),
    30002: _c(SENDER_BROKEN, "The Twilio account is suspended.", _TWILIO_CONSOLE),
    63001: _c(
        SENDER_BROKEN, "Twilio could not authenticate with the WhatsApp channel.", _TWILIO_CONSOLE
    ),
    63007: _c(
        SENDER_BROKEN,
        "No WhatsApp channel for the From address: the sender is not set up in Twilio.",
        _TWILIO_CONSOLE,
    ),
    # T, rate limits: not processed, safe to retry later.
    20429: _c(
        RATE_LIMITED,
        "Too many concurrent requests; Twilio did not process this one.",
        _SLOW,
    ),
    21611: _c(
        RATE_LIMITED,
        "The From sender has too many messages queued at Twilio (over its queue limit).",
        _SLOW,
    ),
    30001: _c(
        RATE_LIMITED,
        "Queue overflow: the message waited too long in Twilio's queue and was dropped.",
        "Requeue it once the backlog is gone; if frequent, lower the identity's rate.",
    ),
    63018: _c(RATE_LIMITED, "Channel rate limit reached.", _SLOW),
    # T, Twilio is having trouble: the outcome is not known.
    20500: _c(UNKNOWN, "Twilio had an internal server error.", _TWILIO_RETRY),
    20503: _c(UNKNOWN, "Twilio's service is temporarily unavailable.", _TWILIO_RETRY),
    # P: this message will not go as it is.
    21211: _c(PERMANENT, "The 'To' number is not a valid phone number.", _CHECK_NUMBER),
    21408: _c(
        PERMANENT,
        "Sending to the recipient's region is not enabled on the Twilio account.",
        "Enable the region in the Console's geographic permissions, then requeue. Other "
        "regions are unaffected, so the identity is not paused.",
    ),
    21610: _c(
        PERMANENT,
        "The recipient has unsubscribed (replied STOP) from this sender.",
        "Do not resend: the recipient must opt in again (reply START).",
    ),
    21612: _c(PERMANENT, "Twilio cannot route to this 'To' number.", _CHECK_NUMBER),
    21614: _c(PERMANENT, "The 'To' number is not a valid mobile number.", _CHECK_NUMBER),
    21617: _c(PERMANENT, "The text is longer than Twilio's 1,600 characters.", _FIX_REQUEST),
    30003: _c(
        PERMANENT,
        "Unreachable destination: the phone is off or out of coverage.",
        "Requeue later, or reach the customer another way.",
    ),
    30004: _c(
        PERMANENT,
        "Message blocked: the recipient blocked the sender or cannot receive it.",
        "Do not resend; check with the customer.",
    ),
    30005: _c(PERMANENT, "Unknown destination: the number does not exist.", _CHECK_NUMBER),
    30006: _c(
        PERMANENT,
        "Landline or unreachable carrier: the number cannot receive this message.",
        _CHECK_NUMBER,
    ),
    30007: _c(
        PERMANENT,
        "Filtered by the carrier or the channel as unwanted.",
        "Review the content and the sender's standing before sending again.",
    ),
    30008: _c(
        PERMANENT,
        "Twilio reported an unknown delivery error after accepting the message.",
        "Requeue once; if it fails again, ask Twilio support with the message SID.",
    ),
    63003: _c(PERMANENT, "The WhatsApp channel could not find the 'To' address.", _CHECK_NUMBER),
    63016: _c(
        PERMANENT,
        "Outside the 24-hour window: free-form text is not allowed.",
        "Send an approved template instead, or wait for the user to write.",
    ),
    63024: _c(PERMANENT, "Invalid recipient for the WhatsApp channel.", _CHECK_NUMBER),
    63049: _c(
        PERMANENT,
        "Meta chose not to deliver this WhatsApp marketing message.",
        "Do not resend now; a new send after 24 hours or more may work.",
    ),
    # A template (content) problem: a person must fix it.
    21656: _c(
        NEEDS_HUMAN,
        "The ContentVariables do not fit the content template.",
        "Fix the template's variables (or the Content SID), then requeue.",
    ),
}

CODES: dict[str, dict[int, Classification]] = {"whatsapp": WHATSAPP, "twilio": TWILIO}

# Messenger and Instagram (the Send API with a Page token): Meta's Messenger Platform
# error-codes reference (developers.facebook.com/docs/messenger-platform/error-codes). The
# same Graph codes as WhatsApp where they overlap; the subcode matters for one of them.
_FIX_PAGE = "Fix the Page's access or the app's permissions in Meta, then `identity resume`."
MESSENGER: dict[int, Classification] = {
    1: _c(UNKNOWN, "Unknown error on Meta's side.", _RETRY),
    2: _c(UNKNOWN, "Unexpected error; Meta asks to retry later.", _RETRY),
    1200: _c(UNKNOWN, "Temporary send message failure.", _RETRY),
    4: _c(RATE_LIMITED, "Application request limit reached.", _SLOW),
    613: _c(RATE_LIMITED, "Calls to the Send API exceeded the rate limit.", _SLOW),
    190: _c(SENDER_BROKEN, "The Page access token is invalid or expired.", _FIX_TOKEN),
    10: _c(
        SENDER_BROKEN,
        "The app lacks permission to send for this Page (code 10 without a window subcode).",
        _FIX_PAGE,
    ),
    **dict.fromkeys(
        range(200, 300),
        _c(SENDER_BROKEN, "API permission problem (Graph codes 200-299).", _FIX_PAGE),
    ),
    368: _c(SENDER_BROKEN, "The Page is temporarily blocked for policy violations.", _FIX_PAGE),
    100: _c(
        PERMANENT,
        "Invalid parameter (for example no matching user for this PSID / IGSID).",
        "Check the recipient id: it is scoped to this Page or Instagram account.",
    ),
    551: _c(
        PERMANENT,
        "This person isn't available right now (cannot receive messages from the Page).",
        "Do not retry as it is; the person may have blocked the Page.",
    ),
}
CODES["messenger"] = CODES["instagram"] = MESSENGER

# (provider, code, subcode) pairs whose class differs from the code's alone (docs/design.md
# section 7): Messenger's code 10 with subcode 2018278 is "sent outside the allowed window".
_OUTSIDE_WINDOW = _c(
    PERMANENT,
    "Sent outside the messaging window (24 h, or 7 days with the HUMAN_AGENT tag).",
    "Wait for the customer to write, or send with the HUMAN_AGENT tag within 7 days.",
)
SUBCODES: dict[tuple[str, int, int], Classification] = {
    ("messenger", 10, 2018278): _OUTSIDE_WINDOW,
    ("instagram", 10, 2018278): _OUTSIDE_WINDOW,
}


class UnknownProviderCodesError(KeyError):
    """No code table for that provider name: a typo must not make every code `needs_human`."""


def _table(provider: str) -> dict[int, Classification]:
    try:
        return CODES[provider]
    except KeyError:
        raise UnknownProviderCodesError(f"no error-code table for provider {provider!r}") from None


def describe(provider: str, code: int | None, subcode: int | None = None) -> Classification | None:
    """What a code means and what to do about it; None for no code or a code we do not know."""
    if code is None:
        return None
    if subcode is not None and (provider, code, subcode) in SUBCODES:
        return SUBCODES[(provider, code, subcode)]
    return _table(provider).get(code)


def classify(
    provider: str, http_status: int | None, code: int | None, subcode: int | None = None
) -> FailureClass:
    """The failure class of an answer. The provider's code decides (with its subcode where
    `SUBCODES` says so); the HTTP status only when there is no code (Meta: branch on the
    code, not on the HTTP status)."""
    table = _table(provider)
    if code is not None and subcode is not None and (provider, code, subcode) in SUBCODES:
        return SUBCODES[(provider, code, subcode)].failure_class
    if code is not None:
        known = table.get(code)
        return known.failure_class if known else NEEDS_HUMAN
    return classify_http(http_status)


def classify_http(http_status: int | None) -> FailureClass:
    """The class of an answer that carries no provider code."""
    if http_status is None:
        # No answer at all (timeout, reset): the provider may hold the message.
        return UNKNOWN
    if http_status >= 500:
        return UNKNOWN
    if http_status == 429:
        return RATE_LIMITED
    if http_status in (401, 403):
        return SENDER_BROKEN
    if 200 <= http_status < 300:
        # A success without what a success carries (no message id): it may have been accepted.
        return UNKNOWN
    return NEEDS_HUMAN
