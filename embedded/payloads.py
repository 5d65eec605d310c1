"""The payload limits AWS enforces and moto does not, enforced on every call to the embedded stage.

moto already refuses a DynamoDB item over 400 KB, an SNS message over 256 KB, and an SQS
message over its queue's ``MaximumMessageSize`` (1 MiB unless the queue sets less, as the SQS API
reference's SendMessage now documents) or a batch over 1 MiB. The others, each answered with the
service's own error before the call reaches moto:

* EventBridge ``PutEvents``: entries adding up to 256 KB or more, counted as EventBridge counts
  them (user guide, "Calculating PutEvents event entry size"), ``ValidationException``;
* Step Functions: an execution input or a task's output over 262,144 bytes, ``ValidationException``
  (API reference, StartExecution and SendTaskSuccess: length constraints);
* Lambda ``Invoke``: a payload over 6 MB synchronous or 1 MB asynchronous,
  ``RequestEntityTooLargeException`` (API reference, Invoke).

WebSocket frames and ``@connections`` posts are bounded by the embedded API Gateway itself
(``embedded.services.apigateway_websocket``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final
from unittest import mock

import botocore.client
from botocore.exceptions import ClientError

EVENTBRIDGE_ENTRIES_BYTES: Final = 256 * 1024
STEP_FUNCTIONS_BYTES: Final = 262_144
LAMBDA_SYNC_BYTES: Final = 6 * 1024 * 1024
LAMBDA_ASYNC_BYTES: Final = 1024 * 1024


class TooLarge(Exception):
    """A request over a limit: the service's error code, HTTP status and message."""

    def __init__(self, code: str, status: int, message: str) -> None:
        super().__init__(message)
        self.code, self.status, self.message = code, status, message


def _bytes(value: Any) -> int:
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    return len(str(value).encode("utf-8"))


def put_events_entry_bytes(entry: Mapping[str, Any]) -> int:
    """One PutEvents entry's size as EventBridge counts it."""
    size = 14 if entry.get("Time") is not None else 0
    size += _bytes(entry.get("Source", "")) + _bytes(entry.get("DetailType", ""))
    if entry.get("Detail") is not None:
        size += _bytes(entry["Detail"])
    return size + sum(_bytes(r) for r in entry.get("Resources") or [])


def check(service: str, operation: str, params: Mapping[str, Any]) -> None:
    """Raise :class:`TooLarge` when the call is over a limit of the list in the module docstring."""
    if service == "events" and operation == "PutEvents":
        if sum(put_events_entry_bytes(e) for e in params["Entries"]) >= EVENTBRIDGE_ENTRIES_BYTES:
            raise TooLarge("ValidationException", 400, "Total size of the entries in the request is over the limit.")
    elif service == "stepfunctions" and operation in ("StartExecution", "StartSyncExecution", "SendTaskSuccess"):
        value = params.get("input" if operation != "SendTaskSuccess" else "output", "")
        if _bytes(value) > STEP_FUNCTIONS_BYTES:
            name = "input" if operation != "SendTaskSuccess" else "output"
            raise TooLarge(
                "ValidationException",
                400,
                f"1 validation error detected: Value at '{name}' failed to satisfy constraint: "
                f"Member must have length less than or equal to {STEP_FUNCTIONS_BYTES}",
            )
    elif service == "lambda" and operation == "Invoke":
        asynchronous = params.get("InvocationType") == "Event"
        limit = LAMBDA_ASYNC_BYTES if asynchronous else LAMBDA_SYNC_BYTES
        size = _bytes(params.get("Payload", b""))
        if size > limit:
            raise TooLarge(
                "RequestEntityTooLargeException", 413, f"{size} byte payload is too large for the Invoke API ({limit})"
            )


@contextmanager
def enforced() -> Iterator[None]:
    """Check every call's payload against the limits above, whoever makes it, for the block's duration."""
    make_api_call = botocore.client.BaseClient._make_api_call

    def checked(client: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
        try:
            check(client.meta.service_model.service_name, operation_name, api_params)
        except TooLarge as error:
            response: Any = {
                "Error": {"Code": error.code, "Message": error.message},
                "ResponseMetadata": {"HTTPStatusCode": error.status, "RequestId": "embedded-payloads"},
            }
            exception_class: type[ClientError] = client.exceptions.from_code(error.code)
            raise exception_class(response, operation_name) from None
        return make_api_call(client, operation_name, api_params)

    with mock.patch.object(botocore.client.BaseClient, "_make_api_call", checked):
        yield
