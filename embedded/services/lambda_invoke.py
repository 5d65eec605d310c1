"""Invoke a moto Lambda function (it runs in-process through ``embedded.runtime``)."""

from __future__ import annotations

import base64
import datetime
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError


@dataclass(frozen=True)
class Outcome:
    """What an invocation returned: the payload, or Lambda's error payload with ``error`` set."""

    payload: Any
    error: str | None
    #: Lambda refused to run it: the function was at its reserved concurrency (TooManyRequestsException)
    throttled: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    def failed_item_ids(self) -> list[str] | None:
        """``batchItemFailures`` identifiers of a partial batch response (None: not one)."""
        if not self.ok or not isinstance(self.payload, dict) or "batchItemFailures" not in self.payload:
            return None
        failures = self.payload.get("batchItemFailures") or []
        return [str(f.get("itemIdentifier")) for f in failures if isinstance(f, dict)]


def invoke(lambda_client: Any, function_name: str, event: Any, *, asynchronous: bool = False) -> Outcome:
    """Invoke through moto's Lambda API, so the invocation is recorded like any other.

    A synchronous invocation Lambda throttles (reserved concurrency) is an outcome with
    ``throttled`` set, for the caller to handle as its service does.
    """
    try:
        response = lambda_client.invoke(
            FunctionName=function_name,
            InvocationType="Event" if asynchronous else "RequestResponse",
            Payload=json.dumps(event, default=json_default).encode(),
        )
    except ClientError as refused:
        if refused.response["Error"]["Code"] != "TooManyRequestsException":
            raise
        return Outcome({"errorType": "TooManyRequestsException"}, "TooManyRequestsException", throttled=True)
    raw = response["Payload"].read()
    payload = json.loads(raw) if raw else None
    if response.get("FunctionError"):
        error = payload.get("errorType", "Error") if isinstance(payload, dict) else "Error"
        return Outcome(payload, str(error))
    return Outcome(payload, None)


def json_default(value: Any) -> Any:
    """JSON form of what boto3 returns: bytes as base64 (as Lambda events carry them), datetimes as epoch."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def to_json_shape(value: Any) -> Any:
    """A boto3 response value turned into the plain-JSON shape a Lambda event carries."""
    return json.loads(json.dumps(value, default=json_default))
