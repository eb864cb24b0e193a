"""The hostile-webhook table of `test_hostile_webhook_table.py`: rows of bodies and
headers that break a valid delivery (its shape, size, encoding or signature) at each
webhook endpoint, each with the answer it must get and the rows it may store."""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from twilio.request_validator import RequestValidator

from ..conftest import at
from ..meta import encode, status, status_body
from .messenger_bodies import IG, delivery, ms
from .twilio_world import MESSAGE_SID, PUBLIC, TOKEN, fixture

SECRET = "hostile-table-app-secret"  # the Meta app secret of every identity of the table
MB = 1024 * 1024
UNSIGNED = "the delivery is not signed by an identity it names"
TWILIO_UNSIGNED = "the request is not signed by the Twilio identity it is addressed to"
WA, MS = "/webhooks/whatsapp", "/webhooks/messenger"


def meta_sign(raw: bytes, secret: str = SECRET, digest: Any = hashlib.sha256) -> str:
    return hmac.new(secret.encode(), raw, digest).hexdigest()


# The valid bodies the rows break -----------------------------------------------------------


def whatsapp_body(wamid: str = "wamid.TABLE") -> dict[str, Any]:
    return status_body([status(wamid, "delivered", at(5))])


def messenger_body(mid: str = "m_TABLE") -> dict[str, Any]:
    return delivery(mids=[mid], watermark=ms(at(5)))


def instagram_body() -> dict[str, Any]:
    body = messenger_body()
    body["object"] = "instagram"
    body["entry"][0]["id"] = IG
    return body


def twilio_fields(sid: str = MESSAGE_SID) -> dict[str, str]:
    return {**fixture("status_delivered.json"), "MessageSid": sid, "SmsSid": sid}


def twilio_sign(path: str, fields: dict[str, str] | list[tuple[str, str]]) -> str:
    return str(RequestValidator(TOKEN).compute_signature(PUBLIC + path, fields))


def set_at(body: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of `body` with the value at `path` replaced (the whole body for `()`)."""
    if not path:
        return value
    changed = copy.deepcopy(body)
    holder = changed
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = value
    return changed


def deep(levels: int) -> bytes:
    return b'{"object":"page","entry":' + b"[" * levels + b"]" * levels + b"}"


# The table -------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    path: str
    raw: bytes
    headers: list[tuple[str, str]]
    status: int
    words: str
    # Rows it adds: webhook deliveries, statuses, message events, windows, provider events.
    stored: tuple[int, ...] = (0, 0, 0, 0, 0)


def meta_row(name: str, path: str, body: Any, status: int, words: str, **kw: Any) -> Row:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = [
        ("Content-Type", "application/json"),
        ("X-Hub-Signature-256", "sha256=" + meta_sign(raw)),
    ]
    return Row(name, path, raw, headers, status, words, **kw)


VALUE = ("entry", 0, "changes", 0, "value")
STATUS0 = (*VALUE, "statuses", 0)
EVENT0 = ("entry", 0, "messaging", 0)
NOTHING, RAW = (0, 0, 0, 0, 0), (1, 0, 0, 0, 0)  # nothing; the raw delivery alone
PNI = (*VALUE, "metadata", "phone_number_id")
# (name, path in the body, the wrong value there, the answer, words of it, rows stored).
# What breaks the envelope is refused before any lookup. What breaks a verified delivery
# deeper in is kept verbatim and acknowledged (202): a non-2xx makes Meta resend it for days.
WHATSAPP_TYPES = [
    ("body a list", (), [], 400, "the body is not a JSON object", NOTHING),
    ("body a string", (), "hi", 400, "the body is not a JSON object", NOTHING),
    (
        "object a number",
        ("object",),
        7,
        400,
        "'object' is not 'whatsapp_business_account'",
        NOTHING,
    ),
    ("entry a string", ("entry",), "x", 400, "'entry' is not a list", NOTHING),
    ("entry[0] a string", ("entry", 0), "x", 400, "entry[0] is not an object", NOTHING),
    (
        "changes an object",
        ("entry", 0, "changes"),
        {},
        400,
        "entry[0].changes is not a list",
        NOTHING,
    ),
    (
        "changes[0] a number",
        ("entry", 0, "changes", 0),
        5,
        400,
        "entry[0].changes[0] is not an object",
        NOTHING,
    ),
    ("value a list", VALUE, [], 400, "entry[0].changes[0].value is not an object", NOTHING),
    ("phone_number_id a list", PNI, [], 400, "the delivery names no whatsapp identity", NOTHING),
    # Read as the text "True" and "1.5": ids no identity has, so one answer with the rest.
    ("phone_number_id true", PNI, True, 401, UNSIGNED, NOTHING),
    ("phone_number_id 1.5", PNI, 1.5, 401, UNSIGNED, NOTHING),
    # No number named, so an account-level delivery of the (unknown) business account in
    # `entry[].id`: it verifies with an app secret Ratchet holds, and is kept unmatched.
    ("metadata a string", (*VALUE, "metadata"), "x", 200, "", (1, 0, 0, 0, 1)),
    ("statuses an object", (*VALUE, "statuses"), {}, 202, "value.statuses is not a list", RAW),
    ("statuses[0] a string", STATUS0, "x", 202, "statuses[0] is not an object", RAW),
    ("status id an object", (*STATUS0, "id"), {}, 202, "statuses[0].id missing", RAW),
    ("timestamp a list", (*STATUS0, "timestamp"), [], 202, "timestamp is not unix seconds", RAW),
    # A word Ratchet does not know is kept with the delivery and applies to nothing.
    ("status word a number", (*STATUS0, "status"), 5, 200, "", (1, 1, 0, 0, 0)),
]
MESSENGER_TYPES = [
    ("body a list", (), [], 400, "the body is not a JSON object", NOTHING),
    ("object a number", ("object",), 7, 400, "'object' is 7, not 'page' or 'instagram'", NOTHING),
    ("entry a string", ("entry",), "x", 400, "'entry' is not a list", NOTHING),
    ("entry[0] a string", ("entry", 0), "x", 400, "entry[0] is not an object", NOTHING),
    ("entry id a list", ("entry", 0, "id"), [], 400, "entry[0].id missing", NOTHING),
    ("messaging an object", ("entry", 0, "messaging"), {}, 202, "messaging is not a list", RAW),
    ("messaging[0] a string", EVENT0, "x", 202, "messaging[0] is not an object", RAW),
    ("delivery a string", (*EVENT0, "delivery"), "x", 202, "delivery is not an object", RAW),
    ("mids a string", (*EVENT0, "delivery", "mids"), "x", 202, "mids is not a list", RAW),
    (
        "mid an object",
        (*EVENT0, "delivery", "mids", 0),
        {},
        202,
        "mids[0] is not a message id",
        RAW,
    ),
    (
        "watermark a word",
        (*EVENT0, "delivery", "watermark"),
        "soon",
        202,
        "messaging[0].watermark is not milliseconds",
        RAW,
    ),
]


def whose(provider: str, words: str) -> str:
    """The 400 of an envelope that cannot be read, as the view words it."""
    if words.startswith("the delivery names"):
        return words
    return f"not {'an' if provider[0] in 'aeiou' else 'a'} {provider} webhook: {words}"


def shape_rows() -> list[Row]:
    rows = []
    for name, where, value, answer, words, stored in WHATSAPP_TYPES:
        body = set_at(whatsapp_body(), where, value)
        said = whose("whatsapp", words) if answer == 400 else words
        rows.append(meta_row(f"whatsapp: {name}", WA, body, answer, said, stored=stored))
    for name, where, value, answer, words, stored in MESSENGER_TYPES:
        for label, body in (("messenger", messenger_body()), ("instagram", instagram_body())):
            changed = set_at(body, where, value)
            # Whose webhook it is not: the envelope's `object` says, once it can be read.
            known = isinstance(changed, dict) and changed.get("object") == body["object"]
            said = whose(label if known else "messenger", words) if answer == 400 else words
            rows.append(meta_row(f"{label}: {name}", MS, changed, answer, said, stored=stored))
    for path, body, label in (
        (WA, whatsapp_body(), "whatsapp"),
        (MS, messenger_body(), "messenger"),
    ):
        raw = encode(body)
        rows += [
            meta_row(f"{label}: truncated", path, raw[: len(raw) // 2], 400, "Unterminated"),
            meta_row(f"{label}: cut after one byte", path, raw[:1], 400, "Expecting"),
            meta_row(f"{label}: empty", path, b"", 400, "Expecting value"),
            meta_row(
                f"{label}: 10 MB",
                path,
                raw[:-1] + b',"pad":"' + b"x" * (10 * MB) + b'"}',
                413,
                "too large",
            ),
            meta_row(
                f"{label}: nested 100,000 deep", path, deep(100_000), 400, "nested too deeply"
            ),
            meta_row(
                f"{label}: invalid UTF-8",
                path,
                raw.replace(b'"object":"', b'"object":"\xff\xfe', 1),
                400,
                "'utf-8' codec can't decode byte 0xff",
            ),
            meta_row(
                f"{label}: UTF-16",
                path,
                raw.decode().encode("utf-16"),
                400,
                "can't decode byte 0xff",
            ),
        ]
    return rows


def meta_signature_rows(path: str, raw: bytes, label: str) -> list[Row]:
    good = meta_sign(raw)
    other = encode(whatsapp_body("wamid.OTHER") if path == WA else messenger_body("m_OTHER"))
    variants: dict[str, list[tuple[str, str]]] = {
        "missing": [],
        "wrong secret": [("X-Hub-Signature-256", "sha256=" + meta_sign(raw, "not-the-secret"))],
        "sha1 algorithm prefix": [("X-Hub-Signature-256", "sha1=" + good)],
        "no algorithm prefix": [("X-Hub-Signature-256", good)],
        "prefix in capitals": [("X-Hub-Signature-256", "SHA256=" + good)],
        "SHA-1 in the legacy header": [
            ("X-Hub-Signature", "sha1=" + meta_sign(raw, digest=hashlib.sha1))
        ],
        "SHA-1 digest under sha256=": [
            ("X-Hub-Signature-256", "sha256=" + meta_sign(raw, digest=hashlib.sha1))
        ],
        "another body's": [("X-Hub-Signature-256", "sha256=" + meta_sign(other))],
        "empty": [("X-Hub-Signature-256", "")],
        "prefix alone": [("X-Hub-Signature-256", "sha256=")],
        "one digit changed": [
            ("X-Hub-Signature-256", "sha256=" + good[:-1] + ("0" if good[-1] != "0" else "1"))
        ],
        "duplicated, good then wrong": [
            ("X-Hub-Signature-256", "sha256=" + good),
            ("X-Hub-Signature-256", "sha256=" + meta_sign(other)),
        ],
        "duplicated, good twice": [("X-Hub-Signature-256", "sha256=" + good)] * 2,
    }
    return [
        Row(
            f"{label}: signature {name}",
            path,
            raw,
            [("Content-Type", "application/json"), *headers],
            401,
            UNSIGNED,
        )
        for name, headers in variants.items()
    ]


def twilio_rows(identity_id: int) -> list[Row]:
    path = f"/webhooks/twilio/{identity_id}"
    fields = twilio_fields()
    raw = urlencode(fields).encode()
    good = twilio_sign(path, fields)
    other = twilio_fields("SM" + "Y" * 32)
    sha256 = base64.b64encode(
        hmac.new(
            TOKEN.encode(),
            (PUBLIC + path + "".join(k + v for k, v in sorted(fields.items()))).encode(),
            hashlib.sha256,
        ).digest()
    ).decode()
    form = [("Content-Type", "application/x-www-form-urlencoded")]

    def row(name: str, body: bytes, headers: list[tuple[str, str]], status: int, words: str) -> Row:
        return Row(f"twilio: {name}", path, body, form + headers, status, words)

    signed = [("X-Twilio-Signature", good)]
    signatures = {
        "missing": [],
        "wrong token": [
            (
                "X-Twilio-Signature",
                RequestValidator("not-the-token").compute_signature(PUBLIC + path, fields),
            )
        ],
        "HMAC-SHA256 instead of SHA-1": [("X-Twilio-Signature", sha256)],
        "with an algorithm prefix": [("X-Twilio-Signature", "sha1=" + good)],
        "case swapped": [("X-Twilio-Signature", good.swapcase())],
        "another body's": [("X-Twilio-Signature", twilio_sign(path, other))],
        "empty": [("X-Twilio-Signature", "")],
        "duplicated, good then wrong": [*signed, ("X-Twilio-Signature", twilio_sign(path, other))],
        "duplicated, good twice": signed * 2,
    }
    rows = [
        row(f"signature {name}", raw, headers, 401, TWILIO_UNSIGNED)
        for name, headers in signatures.items()
    ]
    truncated = raw[: raw.index(b"=", len(raw) // 2)]  # the last field has lost its `=`
    rows += [
        row(
            "truncated",
            truncated,
            [("X-Twilio-Signature", twilio_sign(path, []))],
            400,
            "not form data",
        ),
        row("10 MB", raw + b"&Pad=" + b"x" * (10 * MB), signed, 413, "too large"),
        row(
            "invalid UTF-8", raw.replace(b"delivered", b"deliv\xff\xfeed"), signed, 400, "not UTF-8"
        ),
        row("JSON instead of a form", json.dumps(fields).encode(), signed, 400, "not form data"),
        row(
            "no such identity",
            raw,
            [("X-Twilio-Signature", twilio_sign(f"/webhooks/twilio/{identity_id + 1000}", fields))],
            401,
            TWILIO_UNSIGNED,
        ),
    ]
    return rows


def valid_rows(twilio_identity_id: int, word: str = "delivered") -> list[Row]:
    """A correctly signed delivery at each endpoint, of `word` for the table's messages."""
    path = f"/webhooks/twilio/{twilio_identity_id}"
    fields = {**twilio_fields(), "MessageStatus": word, "SmsStatus": word}
    headers = [("Content-Type", "application/x-www-form-urlencoded")]
    headers.append(("X-Twilio-Signature", twilio_sign(path, fields)))
    whatsapp = status_body([status("wamid.TABLE", word, at(5))])
    # Messenger has no `sent` receipt: before, a delivery of a mid never sent (unmatched).
    messenger = messenger_body("m_TABLE" if word == "delivered" else "m_NEVER_SENT")
    return [
        meta_row("whatsapp", WA, encode(whatsapp), 200, ""),
        meta_row("messenger", MS, encode(messenger), 200, ""),
        Row("twilio", path, urlencode(fields).encode(), headers, 200, ""),
    ]
