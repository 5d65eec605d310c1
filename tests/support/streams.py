"""DynamoDB stream records shaped exactly as Lambda delivers them (event source mapping payload).

Usage::

    records = StreamRecords()
    event = records.event(
        records.insert(turn.to_item()),
        records.modify(old_session.to_item(), new_session.to_item()),
        records.remove(session.to_item(), ttl=True),
    )

Images are marshalled with the store's own serializer and then made JSON as the Lambda event
is (numbers as ``N`` strings, turn content as ``B`` holding base64 text), keys hold
``PK``/``SK``, ``SequenceNumber`` grows per record, ``eventID`` is a 32-hex id, a TTL deletion
carries ``userIdentity`` ``{"type": "Service", "principalId": "dynamodb.amazonaws.com"}`` as
AWS documents it.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from boto3.dynamodb.types import Binary

from lambdas.shared.schema import PARTITION_KEY, SORT_KEY
from lambdas.shared.serialize import marshal_item

STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/manga-assist-sessions-test/stream/2026-01-01T00:00:00.000"
TTL_IDENTITY = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}


def _json_default(value: Any) -> Any:
    if isinstance(value, Binary):
        value = bytes(value.value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"not JSON: {type(value).__name__}")


def wire(image: Mapping[str, Any]) -> dict[str, Any]:
    """A Python item as it appears in the Lambda event JSON: AttributeValues, binaries base64."""
    result: dict[str, Any] = json.loads(json.dumps(marshal_item(image), default=_json_default))
    return result


class StreamRecords:
    """Factory of stream records with increasing sequence numbers and a fixed clock."""

    def __init__(self, *, first_sequence: int = 100_000_000_000_000_000_000, created_at: int = 1_767_225_600) -> None:
        self._next = first_sequence
        self.created_at = created_at

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
            "awsRegion": "us-east-1",
            "dynamodb": body,
            "eventSourceARN": STREAM_ARN,
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

    @staticmethod
    def event(*records: dict[str, Any]) -> dict[str, Any]:
        return {"Records": list(records)}


def sequence_of(record: Mapping[str, Any]) -> str:
    return str(record["dynamodb"]["SequenceNumber"])
