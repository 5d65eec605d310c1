"""lambdas.orchestration.erasure: the erasure workflow's steps on moto (objects, table items, the user)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from embedded.events import lambda_context
from embedded.services.dynamodb import atomic_requests, create_sessions_table
from lambdas.orchestration import erasure
from lambdas.shared import env as lambda_env
from lambdas.shared.serialize import marshal_item
from lambdas.shared.store import DynamoSessionStore

TABLE = "erasure-table"
BUCKET = "erasure-archive"
CONTEXT = lambda_context("erasure")
ALICE = "5f0c3a52-7c1e-4d0b-9a55-0d6f1b7e2c11"
BOB = "8b1d2e33-0a4f-4c6e-b2d7-3e9a5c6f7d80"


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoSessionStore]:
    with mock_aws(), atomic_requests():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_sessions_table(client, TABLE)
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        for name, value in {
            "TABLE_NAME": TABLE,
            "ARCHIVE_BUCKET": BUCKET,
            "EXPORT_PREFIX": "exports",
            "ARCHIVE_PREFIX": "sessions",
        }.items():
            monkeypatch.setenv(name, value)
        lambda_env.reset()
        yield DynamoSessionStore(TABLE, client=client)
        lambda_env.reset()


def _export_file(rows: list[dict[str, Any]]) -> bytes:
    return gzip.compress("".join(json.dumps({"Item": marshal_item(row)}) + "\n" for row in rows).encode())


def _versions(prefix: str) -> list[str]:
    listed = boto3.client("s3", region_name="us-east-1").list_object_versions(Bucket=BUCKET, Prefix=prefix)
    return [v["VersionId"] for v in [*listed.get("Versions", []), *listed.get("DeleteMarkers", [])]]


def test_objects_removes_every_archive_version_and_her_export_rows_only(cloud: DynamoSessionStore) -> None:
    # Given her archived session in two versions and a delete marker, bob's archive, and one export of both
    s3 = boto3.client("s3", region_name="us-east-1")
    mine = cloud.sessions.create_session(ALICE).session_id
    theirs = cloud.sessions.create_session(BOB).session_id
    for body in (b"v1", b"v2"):
        s3.put_object(Bucket=BUCKET, Key=f"sessions/{mine}.jsonl", Body=body)
    s3.delete_object(Bucket=BUCKET, Key=f"sessions/{mine}.jsonl")
    s3.put_object(Bucket=BUCKET, Key=f"sessions/{theirs}.jsonl", Body=b"kept")
    rows = [
        {"PK": f"SESSION#{mine}", "SK": "META", "customer_id": ALICE},
        {"PK": f"SESSION#{mine}", "SK": "TURN#0000000001", "content": "her words"},
        {"PK": f"SESSION#{theirs}", "SK": "META", "customer_id": BOB},
    ]
    data_key = "exports/e-1/AWSDynamoDB/x/data/y.json.gz"
    s3.put_object(Bucket=BUCKET, Key=data_key, Body=_export_file(rows))
    s3.put_object(Bucket=BUCKET, Key="exports/e-1/AWSDynamoDB/x/manifest-summary.json", Body=b"{}")
    # When the step runs
    counts = erasure.objects({"customer_id": ALICE}, CONTEXT)
    # Then her archive has no version left, the export file holds bob's row alone in one version
    assert counts == {"archive_versions": 3, "export_files": 1, "export_rows": 2}
    assert _versions(f"sessions/{mine}.") == []
    assert len(_versions(f"sessions/{theirs}.")) == 1
    assert len(_versions(data_key)) == 1
    left = gzip.decompress(s3.get_object(Bucket=BUCKET, Key=data_key)["Body"].read()).decode()
    assert ALICE not in left
    assert "her words" not in left
    assert BOB in left
    # And a second run finds nothing more
    assert erasure.objects({"customer_id": ALICE}, CONTEXT) == {
        "archive_versions": 0,
        "export_files": 0,
        "export_rows": 0,
    }


def test_table_ends_her_sessions_items(cloud: DynamoSessionStore) -> None:
    session_id = cloud.sessions.create_session(ALICE).session_id
    cloud.turns.add_turn(session_id, "user", "hello")
    counts = erasure.table({"customer_id": ALICE}, CONTEXT)
    assert (counts["sessions"], counts["turns"]) == (1, 1)
    assert cloud.sessions.get_session(session_id) is None


def test_user_deletes_the_pool_user_named_by_her_sub_once(monkeypatch: pytest.MonkeyPatch) -> None:
    with mock_aws():
        cognito = boto3.client("cognito-idp", region_name="us-east-1")
        pool = cognito.create_user_pool(PoolName="p", UsernameAttributes=["email"])["UserPool"]["Id"]
        user = cognito.admin_create_user(UserPoolId=pool, Username="alice@example.com")["User"]
        sub = next(a["Value"] for a in user["Attributes"] if a["Name"] == "sub")
        monkeypatch.setenv("USER_POOL_ID", pool)
        lambda_env.reset()
        assert erasure.user({"customer_id": sub}, CONTEXT) == {"users": 1}
        assert erasure.user({"customer_id": sub}, CONTEXT) == {"users": 0}
        with pytest.raises(cognito.exceptions.UserNotFoundException):
            cognito.admin_get_user(UserPoolId=pool, Username="alice@example.com")


def test_user_without_a_pool_of_the_stage_counts_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("USER_POOL_ID", raising=False)
    lambda_env.reset()
    assert erasure.user({"customer_id": ALICE}, CONTEXT) == {"users": 0}


@pytest.mark.parametrize("event", [{}, {"customer_id": ""}, {"customer_id": "a/b"}, {"customer_id": 7}])
def test_fails_without_a_well_formed_customer_id(event: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="customer_id"):
        erasure.user(event, CONTEXT)
