"""Reading a delivery stream's objects back: each object's lines fetched once per content."""

from __future__ import annotations

import gzip
import uuid
from typing import Any

import boto3
from moto import mock_aws

from embedded.services.firehose import read_lines


def test_a_trail_read_again_fetches_only_the_objects_new_or_changed_since() -> None:
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        bucket = f"trail-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        fetched: list[str] = []
        fetch = "before-parameter-build.s3.GetObject"
        s3.meta.events.register(fetch, lambda params, **_: fetched.append(params["Key"]))
        s3.put_object(Bucket=bucket, Key="t/1.gz", Body=gzip.compress(b'{"n": 1}\n{"n": 2}\n'))
        assert read_lines(s3, bucket, "t/") == [("t/1.gz", {"n": 1}), ("t/1.gz", {"n": 2})]

        # When a second object lands and the first is rewritten, then both are read again
        s3.put_object(Bucket=bucket, Key="t/2", Body=b'{"n": 3}\n')
        assert read_lines(s3, bucket, "t/")[-1] == ("t/2", {"n": 3})
        s3.put_object(Bucket=bucket, Key="t/1.gz", Body=gzip.compress(b'{"n": 1}\n'))
        lines: list[tuple[str, Any]] = read_lines(s3, bucket, "t/")

        # Then each object was fetched once per content, and the read sees the current contents
        assert lines == [("t/1.gz", {"n": 1}), ("t/2", {"n": 3})]
        assert fetched == ["t/1.gz", "t/2", "t/1.gz"]
        lines[0][1]["n"] = 99  # a caller's change to a line is its own
        assert read_lines(s3, bucket, "t/")[0] == ("t/1.gz", {"n": 1})
