"""Asynchronous Lambda invocations as Lambda runs them: retries, then the on-failure destination.

moto runs an ``InvocationType=Event`` invoke at once and forgets its error. Inside
``asynchronous_invocations(cloud)`` a failed asynchronous invocation is retried as the
function's ``AWS::Lambda::EventInvokeConfig`` says (``MaximumRetryAttempts``, default 2; the
back-off is not waited for) and, when every attempt failed, an invocation record goes to its
``OnFailure`` destination (SQS queue or SNS topic), shaped as Lambda sends it.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from moto.awslambda.models import LambdaFunction

from embedded.cloudformation.loaders import Cloud
from embedded.services.dynamodb_streams import send_to_destination

DEFAULT_ASYNC_RETRIES = 2


@contextmanager
def asynchronous_invocations(cloud: Cloud) -> Iterator[list[dict[str, Any]]]:
    """Patch moto's asynchronous invocations for the block; yields the records sent to destinations."""
    original = LambdaFunction.invoke
    sent: list[dict[str, Any]] = []

    def invoke(self: LambdaFunction, body: str, request_headers: Any, response_headers: Any) -> Any:
        if request_headers.get("x-amz-invocation-type", "RequestResponse") != "Event":
            return original(self, body, request_headers, response_headers)
        config = cloud.registry.async_configs.get(self.function_name)
        retries = DEFAULT_ASYNC_RETRIES
        if config is not None and config.maximum_retry_attempts is not None:
            retries = int(config.maximum_retry_attempts)
        result: Any = None
        for _attempt in range(retries + 1):
            headers: dict[str, str] = {}
            result = original(self, body, request_headers, headers)
            if "x-amz-function-error" not in headers:
                return result
        if config is not None and config.on_failure_arn:
            record = {
                "version": "1.0",
                "timestamp": datetime.datetime.now(datetime.UTC).isoformat(),
                "requestContext": {
                    "requestId": str(uuid.uuid4()),
                    "functionArn": f"{self.function_arn}:$LATEST",
                    "condition": "RetriesExhausted",
                    "approximateInvokeCount": retries + 1,
                },
                "requestPayload": json.loads(body) if body else None,
                "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
                "responsePayload": json.loads(result) if isinstance(result, (str, bytes)) and result else result,
            }
            send_to_destination(cloud, config.on_failure_arn, record, function_name=self.function_name)
            sent.append(record)
        return result

    with mock.patch.object(LambdaFunction, "invoke", invoke):
        yield sent
