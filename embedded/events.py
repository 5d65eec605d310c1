"""The events AWS sends a Lambda function, shaped as AWS's own samples: one builder per kind.

Usage::

    rest_proxy_event("POST", "/sessions/{id}/messages", "/sessions/7/messages",
                     path_parameters={"id": "7"}, body='{"text": "hi"}',
                     authorizer=authorizer_context("alice", sub="alice", role="customer"))
    token_authorizer_event("Bearer x.y.z", method_arn)
    ws_event("$connect", query={"token": "t"}, authorizer=authorizer_context("alice", customer_id="alice"))
    ws_authorizer_event(query={"token": "t"})
    records = StreamRecords(); batch_event(records.insert(item), records.modify(old, new))
    sqs_event("raw body", sns_notification({"event_type": "assigned"}, attributes={"event_type": "assigned"}))
    handler(event, lambda_context("SessionApi"))

Fixed values (account, region, a 2026-01-01 clock) keep events reproducible; every builder takes
the request-specific parts as keyword arguments, and ``Api`` names the API an event comes from.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from aws_lambda_powertools.utilities.typing import LambdaContext
from boto3.dynamodb.types import Binary

from lambdas.shared.schema import PARTITION_KEY, SORT_KEY
from lambdas.shared.serialize import marshal_item

ACCOUNT = "123456789012"
REGION = "us-east-1"
#: 2026-01-01T00:00:00Z, the fixed request time of events that do not name one.
EPOCH_MS = 1_767_225_600_000
SOURCE_IP = "203.0.113.9"


@dataclass(frozen=True)
class Api:
    """The API Gateway API (REST or WebSocket) and stage an event comes from."""

    api_id: str = "a1b2c3d4e5"
    stage: str = "dev"
    account: str = ACCOUNT
    region: str = REGION
    #: A custom domain name; defaults to the API's execute-api domain.
    custom_domain: str | None = None

    @property
    def domain(self) -> str:
        return self.custom_domain or f"{self.api_id}.execute-api.{self.region}.amazonaws.com"

    @property
    def endpoint(self) -> str:
        """The management API endpoint of a WebSocket API (``https://<domain>/<stage>``)."""
        return f"https://{self.domain}/{self.stage}"

    def method_arn(self, method: str, path: str) -> str:
        """``arn:aws:execute-api:<region>:<account>:<api>/<stage>/<METHOD><path>`` (WebSocket: the route key)."""
        return f"arn:aws:execute-api:{self.region}:{self.account}:{self.api_id}/{self.stage}/{method}{path}"


DEFAULT_API = Api()


@dataclass(frozen=True)
class _Context:
    function_name: str
    memory_limit_in_mb: int
    aws_request_id: str
    function_version: str = "$LATEST"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return f"2026/01/01/[$LATEST]{self.aws_request_id}"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def lambda_context(
    function_name: str = "fn", *, aws_request_id: str = "req-1", memory_limit_in_mb: int = 256
) -> LambdaContext:
    """The context object Lambda passes with every event (what Powertools' Logger and Tracer read)."""
    return cast(LambdaContext, _Context(function_name, memory_limit_in_mb, aws_request_id))


def authorizer_context(principal_id: str | None, **context: Any) -> dict[str, Any]:
    """``requestContext.authorizer`` after a Lambda authorizer: its context, principalId, integrationLatency."""
    return {**context, "principalId": principal_id, "integrationLatency": 12}


def _request_time(epoch_ms: int) -> str:
    return time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(epoch_ms / 1000))


def _multi(values: Mapping[str, str] | None) -> dict[str, list[str]] | None:
    return {k: [v] for k, v in values.items()} if values else None


# ---------------------------------------------------------------------- REST API (v1)


def rest_proxy_event(
    method: str,
    resource: str,
    path: str,
    *,
    api: Api = DEFAULT_API,
    path_parameters: Mapping[str, str] | None = None,
    query: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    body: str | None = None,
    authorizer: Mapping[str, Any] | None = None,
    stage_variables: Mapping[str, str] | None = None,
    request_id: str | None = None,
    source_ip: str = SOURCE_IP,
    user_agent: str = "Mozilla/5.0",
    epoch_ms: int = EPOCH_MS,
) -> dict[str, Any]:
    """A REST API Lambda proxy event (``AWS_PROXY``); ``authorizer`` is left out when None."""
    request_id = request_id or str(uuid.uuid4())
    context: dict[str, Any] = {
        "resourceId": "r1",
        "resourcePath": resource,
        "httpMethod": method,
        "extendedRequestId": request_id,
        "requestTime": _request_time(epoch_ms),
        "path": f"/{api.stage}{path}",
        "accountId": api.account,
        "protocol": "HTTP/1.1",
        "stage": api.stage,
        "domainPrefix": api.api_id,
        "requestTimeEpoch": epoch_ms,
        "requestId": request_id,
        "identity": {"sourceIp": source_ip, "userAgent": user_agent},
        "domainName": api.domain,
        "apiId": api.api_id,
    }
    if authorizer is not None:
        context["authorizer"] = dict(authorizer)
    return {
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": dict(headers) if headers else None,
        "multiValueHeaders": _multi(headers),
        "queryStringParameters": dict(query) if query else None,
        "multiValueQueryStringParameters": _multi(query),
        "pathParameters": dict(path_parameters) if path_parameters else None,
        "stageVariables": dict(stage_variables) if stage_variables else None,
        "requestContext": context,
        "body": body,
        "isBase64Encoded": False,
    }


def token_authorizer_event(token: str | None, method_arn: str) -> dict[str, Any]:
    """A REST TOKEN authorizer event; ``authorizationToken`` is left out when None."""
    event: dict[str, Any] = {"type": "TOKEN", "methodArn": method_arn}
    if token is not None:
        event["authorizationToken"] = token
    return event


def request_authorizer_event(
    method: str, resource: str, path: str, *, api: Api = DEFAULT_API, **request: Any
) -> dict[str, Any]:
    """A REST REQUEST authorizer event: ``type``, ``methodArn`` and the request parts of ``rest_proxy_event``.

    ``request`` takes the keywords of ``rest_proxy_event``; an authorizer sees no body.
    """
    proxy = rest_proxy_event(method, resource, path, api=api, **request)
    for key in ("body", "isBase64Encoded"):
        del proxy[key]
    return {"type": "REQUEST", "methodArn": api.method_arn(method, path), **proxy}


# ---------------------------------------------------------------------- WebSocket API

_WS_EVENT_TYPES = {"$connect": "CONNECT", "$disconnect": "DISCONNECT"}


def ws_event(
    route_key: str,
    *,
    api: Api = DEFAULT_API,
    connection_id: str = "L0SM9cOFvHcCIhw=",
    body: str | None = None,
    authorizer: Mapping[str, Any] | None = None,
    query: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    connected_at_ms: int = EPOCH_MS,
    epoch_ms: int = EPOCH_MS,
    source_ip: str = SOURCE_IP,
    user_agent: str = "Mozilla/5.0",
    disconnect_status_code: int = 1001,
    disconnect_reason: str = "Going away",
) -> dict[str, Any]:
    """A WebSocket route event: ``$connect`` (headers, query), ``$disconnect`` or a message route (body).

    ``authorizer`` (see ``authorizer_context``) is what the ``$connect`` authorizer returned; API
    Gateway repeats it on every route of the connection. ``headers`` default to a browser's.
    """
    event_type = _WS_EVENT_TYPES.get(route_key, "MESSAGE")
    context: dict[str, Any] = {
        "routeKey": route_key,
        "eventType": event_type,
        "extendedRequestId": "Bxq3LGsoIAMF" + uuid.uuid4().hex[:4],
        "requestTime": _request_time(epoch_ms),
        "messageDirection": "IN",
        "stage": api.stage,
        "connectedAt": connected_at_ms,
        "requestTimeEpoch": epoch_ms,
        "identity": {"sourceIp": source_ip, "userAgent": user_agent},
        "requestId": "Bxq3LGsoIAMF" + uuid.uuid4().hex[:8] + "=",
        "domainName": api.domain,
        "connectionId": connection_id,
        "apiId": api.api_id,
    }
    if authorizer is not None:
        context["authorizer"] = dict(authorizer)
    event: dict[str, Any] = {"requestContext": context, "isBase64Encoded": False}
    if event_type == "CONNECT":
        if headers is None:
            headers = {"Host": api.domain, "Sec-WebSocket-Version": "13", "Origin": "http://localhost:3000"}
        event["headers"] = dict(headers)
        event["multiValueHeaders"] = {k: [v] for k, v in headers.items()}
        if query:
            event["queryStringParameters"] = dict(query)
            event["multiValueQueryStringParameters"] = _multi(query)
    elif event_type == "DISCONNECT":
        context["disconnectStatusCode"] = disconnect_status_code
        context["disconnectReason"] = disconnect_reason
        headers = {"Host": api.domain} if headers is None else headers
        event["headers"] = dict(headers)
        event["multiValueHeaders"] = {k: [v] for k, v in headers.items()}
    else:
        context["messageId"] = "Bxq3" + uuid.uuid4().hex[:11] + "="
        event["body"] = body
    return event


def ws_authorizer_event(*, api: Api = DEFAULT_API, **connect: Any) -> dict[str, Any]:
    """The REQUEST authorizer event of a WebSocket ``$connect``: ``type``, ``methodArn`` and the connect event.

    ``connect`` takes the keywords of ``ws_event`` for ``$connect`` (query, headers, connection id, ...).
    """
    event = ws_event("$connect", api=api, **connect)
    event.pop("isBase64Encoded")
    return {"type": "REQUEST", "methodArn": api.method_arn("", "$connect"), **event, "stageVariables": {}}


# ---------------------------------------------------------------------- DynamoDB streams

STREAM_ARN = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/manga-assist-sessions-test/stream/2026-01-01T00:00:00.000"
TTL_IDENTITY = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}


def _json_default(value: Any) -> Any:
    if isinstance(value, Binary):
        value = bytes(value.value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    raise TypeError(f"not JSON: {type(value).__name__}")


def wire(image: Mapping[str, Any]) -> dict[str, Any]:
    """A Python item as the Lambda event JSON carries it: typed AttributeValues, binaries as base64."""
    result: dict[str, Any] = json.loads(json.dumps(marshal_item(image), default=_json_default))
    return result


class StreamRecords:
    """Stream records (NEW_AND_OLD_IMAGES) with increasing sequence numbers and a fixed clock.

    Keys hold ``PK``/``SK``; ``eventID`` is a 32-hex id; a TTL deletion carries the
    ``userIdentity`` AWS documents (``Service`` / ``dynamodb.amazonaws.com``).
    """

    def __init__(
        self,
        *,
        first_sequence: int = 100_000_000_000_000_000_000,
        created_at: int = EPOCH_MS // 1000,
        stream_arn: str = STREAM_ARN,
    ) -> None:
        self._next = first_sequence
        self.created_at = created_at
        self.stream_arn = stream_arn

    def _record(
        self,
        event_name: str,
        key_item: Mapping[str, Any],
        *,
        new: Mapping[str, Any] | None = None,
        old: Mapping[str, Any] | None = None,
        identity: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        sequence = str(self._next)
        self._next += 1_000
        body: dict[str, Any] = {
            "ApproximateCreationDateTime": self.created_at,
            "Keys": wire({PARTITION_KEY: key_item[PARTITION_KEY], SORT_KEY: key_item[SORT_KEY]}),
            "SequenceNumber": sequence,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        }
        if new is not None:
            body["NewImage"] = wire(new)
        if old is not None:
            body["OldImage"] = wire(old)
        body["SizeBytes"] = len(json.dumps(body))
        record: dict[str, Any] = {
            "eventID": hashlib.md5(sequence.encode(), usedforsecurity=False).hexdigest(),
            "eventName": event_name,
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": REGION,
            "dynamodb": body,
            "eventSourceARN": self.stream_arn,
        }
        if identity is not None:
            record["userIdentity"] = dict(identity)
        return record

    def insert(self, item: Mapping[str, Any]) -> dict[str, Any]:
        return self._record("INSERT", item, new=item)

    def modify(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
        return self._record("MODIFY", new, new=new, old=old)

    def remove(self, old: Mapping[str, Any], *, ttl: bool = False) -> dict[str, Any]:
        return self._record("REMOVE", old, old=old, identity=TTL_IDENTITY if ttl else None)


def batch_event(*records: Mapping[str, Any]) -> dict[str, Any]:
    """A batch of stream (or SQS) records as one Lambda event."""
    return {"Records": [dict(r) for r in records]}


def stream_record_from(record: Mapping[str, Any], *, stream_arn: str, region: str = REGION) -> dict[str, Any]:
    """A record that ``dynamodbstreams.get_records`` returned, as Lambda's event source mapping delivers it.

    boto3 parses timestamps and binaries; the event carries epoch seconds and base64 text.
    """
    shaped: dict[str, Any] = json.loads(json.dumps(dict(record), default=_json_default))
    shaped["eventSourceARN"] = stream_arn
    shaped.setdefault("eventVersion", "1.1")
    shaped.setdefault("awsRegion", region)
    return shaped


def sequence_of(record: Mapping[str, Any]) -> str:
    return str(record["dynamodb"]["SequenceNumber"])


# ---------------------------------------------------------------------- SQS (and SNS into SQS)

QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:queue"
TOPIC_ARN = f"arn:aws:sns:{REGION}:{ACCOUNT}:topic"


def message_attributes(attributes: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """String message attributes as an SQS record carries them (``stringValue``/``dataType``)."""
    return {
        name: {
            "stringValue": value,
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": "String",
        }
        for name, value in attributes.items()
    }


def sqs_record(
    body: Any,
    *,
    attributes: Mapping[str, str] | None = None,
    queue_arn: str = QUEUE_ARN,
    message_id: str | None = None,
    receipt_handle: str | None = None,
    receive_count: int = 1,
    sent_ms: int = EPOCH_MS,
) -> dict[str, Any]:
    """One SQS record; ``body`` a str as it is, anything else as JSON; ``attributes`` are string message attributes.

    With SNS raw message delivery the topic's message attributes arrive as these; without it the
    body is an ``sns_notification`` and the record has none.
    """
    text = body if isinstance(body, str) else json.dumps(body)
    return {
        "messageId": message_id or str(uuid.uuid4()),
        "receiptHandle": receipt_handle or "AQEB" + uuid.uuid4().hex,
        "body": text,
        "attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": str(sent_ms),
            "SenderId": "AIDAIENQZJOLO23YVJ4VO",
            "ApproximateFirstReceiveTimestamp": str(sent_ms),
        },
        "messageAttributes": message_attributes(attributes or {}),
        "md5OfBody": hashlib.md5(text.encode(), usedforsecurity=False).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": queue_arn.split(":")[3],
    }


def sqs_event(*bodies: Any, attributes: Mapping[str, str] | None = None, queue_arn: str = QUEUE_ARN) -> dict[str, Any]:
    """An SQS batch: one record per body, each with the same message attributes."""
    return batch_event(*(sqs_record(body, attributes=attributes, queue_arn=queue_arn) for body in bodies))


def sqs_record_from(message: Mapping[str, Any], *, queue_arn: str) -> dict[str, Any]:
    """A message that ``sqs.receive_message`` returned, as Lambda's event source mapping delivers it."""
    attributes = {
        name: {
            "stringValue": value.get("StringValue"),
            "binaryValue": value.get("BinaryValue"),
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": value["DataType"],
        }
        for name, value in message.get("MessageAttributes", {}).items()
    }
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": message.get("Attributes") or {"ApproximateReceiveCount": "1", "SentTimestamp": str(EPOCH_MS)},
        "messageAttributes": attributes,
        "md5OfBody": message.get("MD5OfBody"),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": queue_arn.split(":")[3],
    }


def sns_notification(
    message: Any, *, attributes: Mapping[str, str] | None = None, topic_arn: str = TOPIC_ARN
) -> dict[str, Any]:
    """The body SNS writes into an SQS queue without raw message delivery (``Type: Notification``)."""
    return {
        "Type": "Notification",
        "MessageId": str(uuid.uuid4()),
        "TopicArn": topic_arn,
        "Message": message if isinstance(message, str) else json.dumps(message),
        "Timestamp": "2026-01-01T00:00:00.000Z",
        "SignatureVersion": "1",
        "Signature": "EXAMPLE",
        "SigningCertURL": f"https://sns.{REGION}.amazonaws.com/SimpleNotificationService-0000000000000000000000.pem",
        "UnsubscribeURL": f"https://sns.{REGION}.amazonaws.com/?Action=Unsubscribe&SubscriptionArn={topic_arn}:0",
        "MessageAttributes": {name: {"Type": "String", "Value": value} for name, value in (attributes or {}).items()},
    }


def s3_object_created_event(
    bucket: str, key: str, *, version_id: str | None, time: str, size: int = 1024
) -> dict[str, Any]:
    """An "Object Created" event as S3 sends it to EventBridge (the bucket's EventBridge notifications)."""
    obj: dict[str, Any] = {
        "key": key,
        "size": size,
        "etag": "b1946ac92492d2347c6235b4d2611184",
        "sequencer": "00617F0829",
    }
    if version_id is not None:
        obj["version-id"] = version_id
    return {
        "version": "0",
        "id": "17793124-05d4-b198-2fde-7ededc63b103",
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": "123456789012",
        "time": time,
        "region": REGION,
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": {
            "version": "0",
            "bucket": {"name": bucket},
            "object": obj,
            "request-id": "N4N7GDK58NMKJ12R",
            "requester": "123456789012",
            "source-ip-address": "1.2.3.4",
            "reason": "PutObject",
        },
    }
