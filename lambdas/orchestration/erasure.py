"""Steps of the erasure workflow: one customer's objects, table items and user, each step idempotent.

Handlers (``lambdas.orchestration.erasure.<name>``), each ``{"customer_id": str}`` -> counts:

* ``objects``: every version and delete marker of the archive objects of the customer's sessions
  (``<ARCHIVE_PREFIX>/<session id>.jsonl`` and its later parts), then every export data file under
  ``EXPORT_PREFIX`` that holds a row of theirs, rewritten without those rows, with every older
  version of it deleted -> ``{"archive_versions", "export_files", "export_rows"}``. It runs first:
  the customer's sessions are still in the table to name the archive objects.
* ``table``: the customer's running handoffs ended, then every item of theirs deleted
  (:func:`lambdas.usecases.erasure.erase_table`) -> the counts per kind and ``handoffs_ended``.
* ``user``: the Cognito user whose ``sub`` is the customer id deleted (AdminDeleteUser; the pool's
  user names are their ``sub``, e-mail being a sign-in alias) -> ``{"users": 0 | 1}``.

No step logs the customer id or any of their data: the execution input holds the id, and the
logs hold counts only.

Environment: ``TABLE_NAME``, ``ARCHIVE_BUCKET``, ``EXPORT_PREFIX``, ``USER_POOL_ID``,
``HANDOFF_STATE_MACHINE_ARN`` (unused by name: the handoff wait's token names its execution), and
the stage settings (``ARCHIVE_PREFIX``).
"""

from __future__ import annotations

import gzip
import re
from typing import Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from contracts.requests import CUSTOMER_ID_PATTERN
from lambdas.shared import aws
from lambdas.shared.logs import masked_formatter
from lambdas.shared.settings import optional_resource, resource, settings
from lambdas.shared.settings import store as store
from lambdas.shared.tracing import tracer
from lambdas.shared.waits import fail_wait
from lambdas.usecases import erasure

logger = Logger(logger_formatter=masked_formatter())

#: The data files of a DynamoDB export (``<prefix>/<export>/AWSDynamoDB/<id>/data/<file>.gz``).
EXPORT_DATA_MARKER: Final = "/data/"
_CUSTOMER_ID: Final = re.compile(CUSTOMER_ID_PATTERN)


def s3() -> Any:
    return aws.client("s3")


def _customer(event: dict[str, Any]) -> str:
    customer_id = event.get("customer_id")
    if not isinstance(customer_id, str) or not _CUSTOMER_ID.fullmatch(customer_id):
        raise ValueError("customer_id must be a customer id (a user pool sub)")
    return customer_id


def _versions(bucket: str, prefix: str) -> list[tuple[str, str]]:
    """Every (key, version id) under ``prefix``: object versions and delete markers alike."""
    found: list[tuple[str, str]] = []
    for page in s3().get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for entry in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
            found.append((str(entry["Key"]), str(entry["VersionId"])))
    return found


def _delete_versions(bucket: str, versions: list[tuple[str, str]]) -> int:
    for object_key, version in versions:
        s3().delete_object(Bucket=bucket, Key=object_key, VersionId=version)
    return len(versions)


def _archive_versions(bucket: str, session_ids: list[str]) -> int:
    prefix = settings().archive_prefix
    deleted = 0
    for session_id in session_ids:
        # "<id>." matches the archive's parts (<id>.jsonl, <id>.1.jsonl, ...) and nothing of another session.
        deleted += _delete_versions(bucket, _versions(bucket, f"{prefix}/{session_id}."))
    return deleted


def _export_files(bucket: str, customer_id: str) -> tuple[int, int]:
    """Rewrite every export data file holding the customer's rows without them; drop its older versions."""
    files = rows = 0
    for page in s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{resource('EXPORT_PREFIX')}/"):
        for entry in page.get("Contents", []):
            object_key = str(entry["Key"])
            if EXPORT_DATA_MARKER not in object_key:
                continue
            body = gzip.decompress(s3().get_object(Bucket=bucket, Key=object_key)["Body"].read()).decode()
            kept, removed = erasure.export_rows_without(body, customer_id)
            if not removed:
                continue
            written = s3().put_object(Bucket=bucket, Key=object_key, Body=gzip.compress(kept.encode()))
            older = [(k, v) for k, v in _versions(bucket, object_key) if k == object_key and v != written["VersionId"]]
            _delete_versions(bucket, older)
            files, rows = files + 1, rows + removed
    return files, rows


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def objects(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    customer_id = _customer(event)
    bucket = resource("ARCHIVE_BUCKET")
    archive = _archive_versions(bucket, erasure.customer_sessions(store(), customer_id))
    files, rows = _export_files(bucket, customer_id)
    counts = {"archive_versions": archive, "export_files": files, "export_rows": rows}
    logger.info("customer objects erased", extra=counts)
    return counts


def _stop_wait(token: str, handoff_id: str) -> bool:
    return fail_wait(aws.client("stepfunctions"), token, handoff_id, erasure.ERASED_BY)


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def table(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    counts = erasure.erase_table(store(), _customer(event), stop_wait=_stop_wait)
    logger.info("customer items erased", extra=counts)
    return counts


@logger.inject_lambda_context
@tracer.capture_lambda_handler(capture_response=False)
def user(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    customer_id = _customer(event)
    pool = optional_resource("USER_POOL_ID")
    if not pool:
        return {"users": 0}  # an external identity provider: its users are deleted there
    try:
        aws.client("cognito-idp").admin_delete_user(UserPoolId=pool, Username=customer_id)
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") != "UserNotFoundException":
            raise
        return {"users": 0}  # erased before: nothing more to do
    logger.info("customer user deleted")
    return {"users": 1}
