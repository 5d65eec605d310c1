"""Where moto 5.2 lags AWS in ways the synthesized templates reach, and the harness's narrow fixes.

Each fix makes moto accept what AWS accepts; none makes moto more lenient than AWS.

* Step Functions: AWS defines ``States.Http.Socket`` (HTTP Task socket errors) and accepts it in
  ``ErrorEquals``; moto's ASL lexer predates it and rejects the definition as a custom error
  name starting with ``States.``. Only the AWS-defined names below are let through.
* DynamoDB Streams: botocore >= 1.38 calls ``<account>.streams-ddb.<region>`` endpoints that
  moto does not route (handled in ``Cloud.client`` of ``cloudformation/loaders/base.py`` with the
  classic endpoint).
* DynamoDB exports: moto names an export ``table/<table ARN>/import/<id>``; AWS names it
  ``table/<table name>/export/<id>``, the ARN a ``DescribeExport`` grant on ``<table ARN>/export/*``
  matches.
* Firehose: moto writes every S3 delivery under ``<prefix>YYYY/MM/DD/HH/``, uncompressed, and
  ignores the prefix's ``!{timestamp:...}`` expressions; Firehose evaluates them (the stage's
  ``year=/month=/day=`` partitions, which the trail's tables project) and writes GZIP objects as
  ``.gz``. ``embedded.services.firehose.delivering_like_firehose`` names and writes objects as
  Firehose documents.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from moto.dynamodb.models.table_export import TableExport
from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.error_name import ErrorName

from embedded.services.firehose import delivering_like_firehose

#: Error names AWS Step Functions defines that moto's lexer does not know.
AWS_STATES_ERRORS_UNKNOWN_TO_MOTO = frozenset({"States.Http.Socket"})


@contextmanager
def patched() -> Iterator[None]:
    """Apply every fix above for the block's duration."""
    original = CustomErrorName.__init__

    def init(self: CustomErrorName, error_name: str | None) -> None:
        if error_name in AWS_STATES_ERRORS_UNKNOWN_TO_MOTO:
            ErrorName.__init__(self, error_name=error_name)
            return
        original(self, error_name)

    export_init = TableExport.__init__

    def export(self: TableExport, *args: Any, **kwargs: Any) -> None:
        export_init(self, *args, **kwargs)
        self.arn = f"{self.table.table_arn}/export/{uuid.uuid4().hex}"

    with (
        mock.patch.object(CustomErrorName, "__init__", init),
        mock.patch.object(TableExport, "__init__", export),
        delivering_like_firehose(),
    ):
        yield
