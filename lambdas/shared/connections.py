"""Post JSON frames to WebSocket clients through the API Gateway management API.

The one posting implementation of the app: the message path, the onboarding workflow, the agent
route and the customer notifier all send frames through :func:`post_to_connection`, so retry,
size limit and the meaning of "the client is gone" are decided once.

Usage::

    endpoint = management_endpoint(domain_name, stage)     # https://<domain>/<stage>
    delivered = post_to_connection(endpoint, connection_id, {"type": "message", "text": "Hi"})
    if not delivered:                                        # 410 Gone: the client left
        ...mark the session disconnected...

Throttling, 5xx answers and network timeouts are retried ``attempts`` times in all under the
shared retry policy (:mod:`lambdas.shared.retry`, on a single-attempt client); 410 Gone returns
False at once (retrying cannot bring a client back); anything else raises :class:`DeliveryError`
naming the AWS error code.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from typing import Any, Final

from botocore.exceptions import ClientError, ConnectTimeoutError, ReadTimeoutError
from botocore.exceptions import ConnectionError as NetworkError

from lambdas.shared import aws
from lambdas.shared.retry import Backoff, call_with_retries

#: API Gateway's limit for one WebSocket message (frames are at most 32 KB, a message 128 KB).
MAX_FRAME_BYTES: Final = 128 * 1024
DEFAULT_ATTEMPTS: Final = 3

_GONE: Final = "GoneException"
_RETRYABLE_CODES: Final = frozenset(
    {"LimitExceededException", "TooManyRequestsException", "ThrottlingException", "InternalServerError"}
)


class DeliveryError(Exception):
    """A frame could not be delivered for a reason other than "the client is gone".

    ``code`` is the AWS error code (``ForbiddenException``, ``PayloadTooLargeException``, ...) or
    ``Timeout``; the message never holds the frame.
    """

    def __init__(self, code: str, connection_id: str) -> None:
        super().__init__(f"could not post to connection {connection_id!r}: {code}")
        self.code = code
        self.connection_id = connection_id


def management_endpoint(domain_name: str, stage: str) -> str:
    """The management API endpoint of a WebSocket stage, from a route event's domain and stage."""
    if not domain_name or not stage:
        raise ValueError(f"domain_name and stage are required (given {domain_name!r}, {stage!r})")
    return f"https://{domain_name}/{stage}"


def management_client(endpoint: str) -> Any:
    """The container's ``apigatewaymanagementapi`` client of ``endpoint`` (one attempt per call)."""
    return aws.client(
        "apigatewaymanagementapi", endpoint_url=endpoint, single_attempt=True, connect_timeout=2, read_timeout=5
    )


class _Gone(Exception):
    """The client left (410): stop at once."""


def encode_frame(payload: Mapping[str, Any]) -> bytes:
    """The frame as compact UTF-8 JSON; ValueError when it exceeds :data:`MAX_FRAME_BYTES`."""
    data = json.dumps(dict(payload), separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8")
    if len(data) > MAX_FRAME_BYTES:
        raise ValueError(f"a frame must be at most {MAX_FRAME_BYTES} bytes (given {len(data)})")
    return data


def post_to_connection(
    endpoint: str,
    connection_id: str,
    payload: Mapping[str, Any],
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    client: Any | None = None,
    base_delay: float = 0.05,
    max_delay: float = 1.0,
    sleep: Callable[[float], None] | None = None,
    rand: Callable[[], float] = random.random,
) -> bool:
    """Send ``payload`` as one JSON frame; True when delivered, False when the client is gone (410).

    ``attempts`` (>= 1) bounds the tries on throttling, 5xx and timeouts; retry ``n`` (from 0)
    waits ``rand() * min(max_delay, base_delay * 2**n)``. ``client`` defaults to the cached
    client of ``endpoint``. Raises DeliveryError on any other failure, or when the retries are
    used up.
    """
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ValueError(f"attempts must be an int >= 1 (given {attempts!r})")
    if not connection_id:
        raise ValueError("connection_id is required (given '')")
    data = encode_frame(payload)
    api = client if client is not None else management_client(endpoint)

    def post() -> None:
        try:
            api.post_to_connection(ConnectionId=connection_id, Data=data)
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", "Unknown"))
            status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if code == _GONE or status == 410:
                raise _Gone() from None
            raise

    backoff = Backoff(
        attempts=min(attempts, 10), base_seconds=base_delay, cap_seconds=max_delay, sleep=sleep, rand=rand
    )
    try:
        call_with_retries(post, backoff, retryable=_retryable)
    except _Gone:
        return False
    except ClientError as err:
        raise DeliveryError(str(err.response.get("Error", {}).get("Code", "Unknown")), connection_id) from None
    except (ConnectTimeoutError, ReadTimeoutError, NetworkError):
        raise DeliveryError("Timeout", connection_id) from None
    return True


def _retryable(error: Exception) -> bool:
    if isinstance(error, (ConnectTimeoutError, ReadTimeoutError, NetworkError)):
        return True
    if not isinstance(error, ClientError):
        return False
    code = str(error.response.get("Error", {}).get("Code", ""))
    status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code in _RETRYABLE_CODES or status >= 500 or status == 429
