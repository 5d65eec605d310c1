"""Every text an embedded stage holds, with where it is: to search what a run left behind.

Three places, each a stream of ``(where, text)``:

* :func:`item_texts`: every table item, as ``table:<pk>/<sk>``; its strings, and its binary values
  unpacked (zlib: a stored turn's content; gzip; DynamoDB JSON's base64).
* :func:`object_texts`: every version of every object of every bucket, as
  ``s3:<bucket>/<key>@<version>``; its key, its body as text (gzip opened) and the texts inside
  each of its JSON lines (an export's, an archive's, a delivered record's).
* :func:`output_texts`: every line a function printed and every error an invocation ended with, as
  ``log:<handler>#<invocation>``, and with ``log_groups`` every event of every log group.

The erasure's search (:mod:`local.story.erasure`) and the privacy scan of the story's tests read
the stage through these, so both look at the same things the same way.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from embedded.stage import EmbeddedStage


def unpacked(raw: bytes) -> str:
    """Bytes as text; gzip and zlib unpacked first when they are."""
    for unpack in (gzip.decompress, zlib.decompress):
        try:
            raw = unpack(raw)
        except (OSError, zlib.error, EOFError):
            continue
    return raw.decode("utf-8", errors="replace")


def readable(value: Any) -> Iterator[str]:
    """Every text inside a value: strings, binary values unpacked, DynamoDB JSON's base64 binaries decoded."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (bytes, bytearray)):
        yield unpacked(bytes(value))
    elif isinstance(value, dict):
        if set(value) == {"B"} and isinstance(value["B"], str):
            with contextlib.suppress(ValueError):
                yield unpacked(base64.b64decode(value["B"], validate=True))
        for inner in value.values():
            yield from readable(inner)
    elif isinstance(value, (list, tuple)):
        for inner in value:
            yield from readable(inner)


def item_texts(stage: EmbeddedStage) -> Iterator[tuple[str, str]]:
    """Every text of every item of every table of the stage."""
    dynamodb = stage.client("dynamodb")
    for table in stage.all("AWS::DynamoDB::Table"):
        for item in _pages(dynamodb, "scan", "Items", TableName=table.ref):
            where = f"table:{item['PK'].get('S')}/{item['SK'].get('S')}"
            for text in readable(item):
                yield where, text


def object_texts(
    stage: EmbeddedStage, *, exempt_buckets: Iterable[str] = (), only: str | None = None
) -> Iterator[tuple[str, str]]:
    """Every text of every object version of every bucket (or ``only`` one) but ``exempt_buckets``."""
    s3, exempt = stage.client("s3"), set(exempt_buckets)
    for bucket in (b["Name"] for b in s3.list_buckets()["Buckets"]):
        if bucket in exempt or only not in (None, bucket):
            continue
        for version in _pages(s3, "list_object_versions", "Versions", Bucket=bucket):
            key, version_id = version["Key"], version["VersionId"]
            extra = {} if version_id in (None, "null") else {"VersionId": version_id}
            where = f"s3:{bucket}/{key}@{version_id}"
            text = unpacked(s3.get_object(Bucket=bucket, Key=key, **extra)["Body"].read())
            yield where, key
            yield where, text
            for line in text.splitlines():
                with contextlib.suppress(ValueError):
                    for inner in readable(json.loads(line)):
                        yield where, inner


def output_texts(stage: EmbeddedStage, *, log_groups: bool = False) -> Iterator[tuple[str, str]]:
    """Every line the stage's functions printed, every error they ended with; with ``log_groups``, every log event."""
    for number, call in enumerate(stage.calls.calls):
        where = f"log:{call.handler}#{number}"
        for line in call.output.splitlines():
            yield where, line
        if call.error is not None:
            yield where, f"{type(call.error).__name__}: {call.error}"
    if not log_groups:
        return
    logs = stage.client("logs")
    for group in _pages(logs, "describe_log_groups", "logGroups"):
        name = group["logGroupName"]
        for event in _pages(logs, "filter_log_events", "events", logGroupName=name):
            yield f"logs:{name}", str(event.get("message", ""))


def _pages(client: Any, operation: str, items: str, **params: Any) -> Iterator[dict[str, Any]]:
    for page in client.get_paginator(operation).paginate(**params):
        yield from page.get(items, [])
