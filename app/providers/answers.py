"""A send call's result, the same for every provider once its answer (or its lack of one)
has been read: what the provider sent back is kept, and the outcome is known unless the
provider may still hold the message."""

from __future__ import annotations

from .base import FailureClass, ProviderError, SendResult
from .http import DeadlineExceededError, HttpAnswer, TransportError, parse_retry_after


def no_answer(provider: str, exc: TransportError) -> SendResult:
    """No HTTP answer: the class is `unknown` either way; the outcome is known only when
    the request provably never left (see ConnectFailedError). A deadline that had passed
    before the request started says so (`not_started`): that call never was."""
    error = ProviderError(provider=provider, title=type(exc).__name__, raw=exc.description)
    return SendResult(
        failure=FailureClass.UNKNOWN,
        error=error,
        outcome_known=not exc.request_sent,
        not_started=isinstance(exc, DeadlineExceededError) and not exc.request_sent,
    )


def accepted(answer: HttpAnswer, provider_message_id: str) -> SendResult:
    return SendResult(
        provider_message_id=provider_message_id,
        http_status=answer.status,
        response_body=answer.text,
    )


def refused(answer: HttpAnswer, error: ProviderError, failure: FailureClass) -> SendResult:
    """An answer without an id of the message, read as `error` and classed as `failure`."""
    return SendResult(
        failure=failure,
        error=error,
        retry_after=parse_retry_after(answer.headers.get("retry-after")),
        http_status=answer.status,
        response_body=answer.text,
        # An answer that rejects the message is a known outcome; `unknown` means the
        # provider may still hold it (a 5xx, "something went wrong", a 2xx without id).
        outcome_known=failure is not FailureClass.UNKNOWN,
    )
