"""The one Bedrock client and its calls: Converse (summaries) and ConverseStream (chat replies).

Usage::

    text = converse_text(bedrock_client(), model_id, prompt, system="Summarise...")
    response = converse(bedrock_client(), request, backoff=Backoff(attempts=3))
    for event in converse_stream(bedrock_client(), request, backoff=Backoff(attempts=3)): ...

The client makes one attempt per call and :func:`converse` retries throttling, transient model
errors and timeouts under the shared retry policy (:mod:`lambdas.shared.retry`), so retries do not
multiply (botocore's 3 x ours), a caller can bound them by a deadline, and tests see every attempt.
:func:`converse_stream` retries the same way only until the stream is open: once text may have
reached a reader, a retry would send it a second, different reply.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from botocore.exceptions import ClientError, ConnectTimeoutError, ReadTimeoutError
from botocore.exceptions import ConnectionError as NetworkError

from lambdas.shared import aws, env
from lambdas.shared.retry import Backoff, call_with_retries, error_code

RETRYABLE: Final = frozenset(
    {
        "ThrottlingException",
        "TooManyRequestsException",
        "ServiceUnavailableException",
        "ModelNotReadyException",
        "InternalServerException",
        "ModelTimeoutException",
    }
)
TIMEOUTS: Final = (ConnectTimeoutError, ReadTimeoutError, NetworkError)
#: Why a call may go to the fallback model instead, by the error code of the primary's failure.
_FALLBACK_CODES: Final = {
    "ThrottlingException": "throttled",
    "TooManyRequestsException": "throttled",
    "ServiceUnavailableException": "throttled",
    "ModelNotReadyException": "not_ready",
    "ModelTimeoutException": "timeout",
    "InternalServerException": "model_error",
}
#: What Bedrock says, with ResourceNotFoundException (or ValidationException), of a model past its
#: end of life ("This model version has reached the end of its life. ...") or of a Legacy model an
#: account may no longer call ("Access denied. This Model is marked by provider as Legacy ...").
_END_OF_LIFE_WORDS: Final = ("reached the end of its life", "marked by provider as legacy")


class BedrockUnavailable(RuntimeError):
    """Converse still failed with a retryable error after every attempt."""


class GuardrailIntervened(RuntimeError):
    """The guardrail named in the call blocked it: the text is the guardrail's blocked message, not an answer."""


@env.once
def bedrock_client() -> Any:
    """The container's bedrock-runtime client: one attempt per call (see the module docstring)."""
    return aws.client("bedrock-runtime", single_attempt=True, connect_timeout=3, read_timeout=30)


def is_transient(error: Exception) -> bool:
    """Throttling, a transient model error or a timeout: worth another call."""
    if isinstance(error, TIMEOUTS):
        return True
    return isinstance(error, ClientError) and error_code(error) in RETRYABLE


def fallback_reason(error: Exception) -> str | None:
    """Why a failed call should go to the fallback model, or None when another model would fail alike.

    ``throttled``, ``not_ready``, ``timeout``, ``model_error`` or ``end_of_life``; an access denial
    or a request Bedrock refuses as invalid gets None (the fallback would refuse it too).
    """
    if isinstance(error, TIMEOUTS):
        return "timeout"
    if not isinstance(error, ClientError):
        return None
    code = error_code(error)
    if code in _FALLBACK_CODES:
        return _FALLBACK_CODES[code]
    message = str(error.response.get("Error", {}).get("Message", "")).lower()
    if code in ("ResourceNotFoundException", "ValidationException") and any(w in message for w in _END_OF_LIFE_WORDS):
        return "end_of_life"
    return None


def converse(
    client: Any,
    request: dict[str, Any],
    *,
    backoff: Backoff,
    deadline_seconds: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """The Converse response for ``request``; transient errors retried, the last one raised when exhausted."""
    response: dict[str, Any] = call_with_retries(
        lambda: client.converse(**request),
        backoff,
        retryable=is_transient,
        deadline_seconds=deadline_seconds,
        clock=clock,
    )
    return response


def converse_stream(
    client: Any,
    request: dict[str, Any],
    *,
    backoff: Backoff,
    deadline_seconds: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Any:
    """The open ConverseStream of ``request``: its events, iterable once (a botocore EventStream).

    Opening is retried like :func:`converse`; an error inside the stream (an exception event, a
    read timeout) is raised by the iteration and never retried. ``close()`` the stream when
    stopping early, so the connection is released.
    """
    response: dict[str, Any] = call_with_retries(
        lambda: client.converse_stream(**request),
        backoff,
        retryable=is_transient,
        deadline_seconds=deadline_seconds,
        clock=clock,
    )
    return response["stream"]


def response_text(response: dict[str, Any]) -> str:
    """The text blocks of a Converse response, joined and stripped."""
    blocks = response.get("output", {}).get("message", {}).get("content", [])
    return "".join(str(block.get("text", "")) for block in blocks if isinstance(block, dict)).strip()


def converse_text(
    client: Any,
    model_id: str,
    prompt: str,
    *,
    system: str | None = None,
    max_tokens: int = 512,
    temperature: float = 0.2,
    attempts: int = 4,
    base_seconds: float = 0.5,
    cap_seconds: float = 8.0,
    sleep: Callable[[float], None] | None = None,
    rand: Callable[[], float] | None = None,
    guardrail: tuple[str, str] | None = None,
) -> str:
    """The text of one Converse exchange; retries throttling and 5xx at most ``attempts`` calls.

    ``guardrail`` (identifier, version) screens the exchange; a blocked one raises
    ``GuardrailIntervened``. Defaults to none.

    Before retry n (from 0) it sleeps ``rand() * min(cap, base * 2**n)`` (full jitter). Other
    errors (validation, access denied) are raised at once; retryable ones exhausted raise
    ``BedrockUnavailable``.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1 (given {attempts})")
    request: dict[str, Any] = {
        "modelId": model_id,
        "messages": [{"role": "user", "content": [{"text": prompt}]}],
        "inferenceConfig": {"maxTokens": max_tokens, "temperature": temperature},
    }
    if system:
        request["system"] = [{"text": system}]
    if guardrail is not None:
        request["guardrailConfig"] = {"guardrailIdentifier": guardrail[0], "guardrailVersion": guardrail[1]}
    policy = Backoff(attempts=attempts, base_seconds=base_seconds, cap_seconds=cap_seconds, sleep=sleep)
    if rand is not None:
        policy = Backoff(attempts, base_seconds, cap_seconds, sleep, rand)
    try:
        response = converse(client, request, backoff=policy)
    except (ClientError, *TIMEOUTS) as err:
        if not is_transient(err):
            raise
        raise BedrockUnavailable(f"Bedrock model {model_id} still unavailable after {attempts} attempts") from err
    if response.get("stopReason") == "guardrail_intervened":
        raise GuardrailIntervened(f"guardrail {guardrail[0] if guardrail else ''} blocked the exchange")
    return response_text(response)
