"""Direct-put Firehose streams into S3 buckets on moto, and how Firehose names and writes objects.

moto writes one object per put call (no buffering) under ``<prefix>YYYY/MM/DD/HH/`` whatever the
prefix says, and stores the data uncompressed. Firehose evaluates the prefix's ``!{timestamp:...}``
expressions (Hive-style partitions such as ``year=!{timestamp:yyyy}/``) and compresses GZIP objects
(``.gz``). :func:`delivering_like_firehose` makes moto's S3 delivery do what Firehose documents, so
that what a reader finds (keys, partitions, encoding) is what it would find on AWS.
"""

from __future__ import annotations

import gzip
import json
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import boto3

from embedded.cloudformation.loaders import Cloud
from embedded.iam.access import Access

#: Java DateTimeFormatter letters the prefixes use, as strftime directives.
_JAVA_DATE_LETTERS = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}
_EXPRESSION = re.compile(r"!\{([a-zA-Z]+):([^}]*)\}")
_DATE_TOKEN = re.compile(r"'[^']*'|yyyy|yy|MM|dd|HH|mm|ss|[A-Za-z]")


def create_s3_delivery_stream(name: str, bucket: str, *, prefix: str = "", region: str = "us-east-1") -> str:
    """Create ``name`` delivering into ``bucket`` under ``prefix``; returns the stream ARN."""
    response = boto3.client("firehose", region_name=region).create_delivery_stream(
        DeliveryStreamName=name,
        DeliveryStreamType="DirectPut",
        ExtendedS3DestinationConfiguration={
            "RoleARN": "arn:aws:iam::123456789012:role/firehose",
            "BucketARN": f"arn:aws:s3:::{bucket}",
            "Prefix": prefix,
        },
    )
    return str(response["DeliveryStreamARN"])


def java_date(pattern: str, moment: datetime) -> str:
    """``moment`` formatted with a Java DateTimeFormatter pattern (the letters prefixes use; quotes literal)."""
    out = []
    for token in _split(pattern):
        if token.startswith("'"):
            out.append(token[1:-1])
        elif token in _JAVA_DATE_LETTERS:
            out.append(moment.strftime(_JAVA_DATE_LETTERS[token]))
        elif token.isalpha():
            raise NotImplementedError(f"date pattern letter {token!r} of {pattern!r} is not emulated")
        else:
            out.append(token)
    return "".join(out)


def _split(pattern: str) -> list[str]:
    """The pattern as tokens: quoted literals, date letters, and every other character on its own."""
    tokens: list[str] = []
    position = 0
    for match in _DATE_TOKEN.finditer(pattern):
        tokens.extend(pattern[position : match.start()])
        tokens.append(match.group(0))
        position = match.end()
    tokens.extend(pattern[position:])
    return tokens


def evaluate_prefix(prefix: str, arrival: datetime) -> str:
    """A ``Prefix`` as Firehose evaluates it at ``arrival`` (UTC).

    ``!{timestamp:<pattern>}`` is the arrival time in the pattern; a prefix without any timestamp
    expression gets ``yyyy/MM/dd/HH/`` appended, as Firehose appends it.
    """
    has_timestamp = False

    def expand(match: re.Match[str]) -> str:
        nonlocal has_timestamp
        namespace, value = match.group(1), match.group(2)
        if namespace == "timestamp":
            has_timestamp = True
            return java_date(value, arrival)
        if namespace == "firehose" and value == "random-string":
            return uuid.uuid4().hex[:11]
        raise NotImplementedError(f"prefix expression !{{{namespace}:{value}}} is not emulated")

    evaluated = _EXPRESSION.sub(expand, prefix)
    return evaluated if has_timestamp else evaluated + java_date("yyyy/MM/dd/HH/", arrival)


def object_key(stream: str, version: str, prefix: str, arrival: datetime, *, compression: str) -> str:
    """``<evaluated prefix><stream>-<version>-<yyyy-MM-dd-HH-mm-ss>-<uuid><extension>``, Firehose's object name."""
    extension = {"GZIP": ".gz", "Snappy": ".snappy", "ZIP": ".zip", "HADOOP_SNAPPY": ".snappy"}.get(compression, "")
    stamp = java_date("yyyy-MM-dd-HH-mm-ss", arrival)
    return f"{evaluate_prefix(prefix, arrival)}{stream}-{version}-{stamp}-{uuid.uuid4()}{extension}"


@contextmanager
def delivering_like_firehose() -> Iterator[None]:
    """Make moto's Firehose S3 delivery evaluate prefixes and compress as Firehose does (for the block)."""
    from moto.firehose.models import FirehoseBackend
    from moto.s3.models import s3_backends

    def put_s3_records(
        self: FirehoseBackend,
        delivery_stream_name: str,
        version_id: str,
        s3_destination: dict[str, Any],
        records: list[dict[str, bytes]],
    ) -> list[dict[str, str]]:
        compression = str(s3_destination.get("CompressionFormat", "UNCOMPRESSED"))
        if compression not in ("UNCOMPRESSED", "GZIP"):
            raise NotImplementedError(f"Firehose compression {compression} is not emulated")
        arrival = datetime.fromtimestamp(time.time(), UTC)
        key = object_key(
            delivery_stream_name, version_id, str(s3_destination.get("Prefix", "")), arrival, compression=compression
        )
        data = b"".join(r["Data"] for r in records)
        bucket = str(s3_destination["BucketARN"]).split(":")[-1]
        s3_backends[self.account_id][self.partition].put_object(
            bucket, key, gzip.compress(data) if compression == "GZIP" else data
        )
        return [{"RecordId": str(uuid.uuid4())} for _ in records]

    with mock.patch.object(FirehoseBackend, "put_s3_records", put_s3_records):
        yield


def read_lines(s3: Any, bucket: str, prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every JSON line of every object under ``prefix``, with its object's key (``.gz`` objects unzipped).

    An object's lines are read once per content: a test that reads a growing trail after every
    step would otherwise fetch and parse every earlier object again each time. The listing is
    always asked, and an object's ETag (its content's digest here) says whether it changed.
    """
    lines: list[tuple[str, dict[str, Any]]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            key, tag = obj["Key"], (bucket, obj["Key"], obj["ETag"])
            if tag not in _LINES_READ:
                body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
                text = (gzip.decompress(body) if key.endswith(".gz") else body).decode()
                if len(_LINES_READ) >= _LINES_KEPT:
                    _LINES_READ.pop(next(iter(_LINES_READ)))
                _LINES_READ[tag] = tuple(line for line in text.splitlines() if line.strip())
            lines += [(key, json.loads(line)) for line in _LINES_READ[tag]]
    return lines


#: Each object's lines read so far, by (bucket, key, ETag), the oldest dropped past the bound.
_LINES_READ: dict[tuple[str, str, str], tuple[str, ...]] = {}
_LINES_KEPT = 4096


@contextmanager
def deliveries_authorized(cloud: Cloud) -> Iterator[None]:
    """Write a stream's records to its bucket only when its role may, as Firehose does.

    Firehose assumes the stream's role (its trust policy must let ``firehose.amazonaws.com`` in)
    and puts objects with it: ``s3:PutObject`` on the bucket (and the bucket policy), and
    ``kms:GenerateDataKey`` on the bucket's key. A refused delivery is kept in the stage's report and
    nothing lands: Firehose keeps retrying for up to a day while the producer's puts succeed.
    """
    from moto.firehose.models import FirehoseBackend

    original = FirehoseBackend.put_s3_records

    def put_s3_records(
        self: FirehoseBackend,
        delivery_stream_name: str,
        version_id: str,
        s3_destination: dict[str, Any],
        records: list[dict[str, bytes]],
    ) -> list[dict[str, str]]:
        guard = cloud.guard
        if guard is not None:
            objects = f"{s3_destination['BucketARN']}/{evaluate_prefix(str(s3_destination.get('Prefix', '')), _now())}"
            stream = f"arn:aws:firehose:{cloud.region}:{cloud.account}:deliverystream/{delivery_stream_name}"
            source = {"aws:SourceAccount": cloud.account, "aws:SourceArn": stream}
            made_by = f"Firehose stream {delivery_stream_name}"
            wanted = [Access("s3:PutObject", objects + delivery_stream_name)]
            role = str(s3_destination["RoleARN"])
            if guard.with_role("firehose.amazonaws.com", role, wanted, made_by, source) is not None:
                return [{"RecordId": str(uuid.uuid4())} for _ in records]
        result: list[dict[str, str]] = original(self, delivery_stream_name, version_id, s3_destination, records)
        return result

    with mock.patch.object(FirehoseBackend, "put_s3_records", put_s3_records):
        yield


def _now() -> datetime:
    return datetime.fromtimestamp(time.time(), UTC)
