"""A customer's data as a whole: its erasure, and the erasure's receipt.

* ``DELETE /customers/{id}/data`` (header ``Idempotency-Key`` optional): 202 ``{"execution_arn",
  "status", "status_url", "request_key"}``. Starts the erasure workflow under a name derived from
  the customer id and the request key (no key: the key ``default``), so a repeated request answers
  the same execution and erases nothing twice; a new key starts a new run (which finds nothing
  more to erase and writes a receipt of zeros). The erasure record
  (``ERASURE#<pseudonym>`` / ``META``) is written first, ``erasure_status`` ``requested``.
* ``GET /customers/{id}/data/erasure``: 200 with the record: ``erasure_status`` (``requested``,
  ``completed``, ``failed``), ``execution_arn``, ``requested_at``, and once done ``finished_at`` and
  ``counts`` (per kind, no personal data); 404 before any erasure.

An admin may name any customer; a customer only themselves (another id answers 404, as the
session listing does). Errors: :func:`lambdas.api.responses.register_error_handlers`.

Environment: ``TABLE_NAME``, ``ERASURE_STATE_MACHINE_ARN`` and the stage settings.
"""

from __future__ import annotations

import json
from typing import Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from lambdas.api import access, validation
from lambdas.api.responses import Forbidden, json_response, register_error_handlers
from lambdas.shared import aws, env, idempotency, keys
from lambdas.shared.errors import NotFound
from lambdas.shared.logs import masked_formatter
from lambdas.shared.serialize import marshal_item, unmarshal_item
from lambdas.shared.settings import resource
from lambdas.shared.settings import store as store
from lambdas.shared.tracing import tracer
from lambdas.usecases import erasure

logger = Logger(logger_formatter=masked_formatter())

ERASE_ROUTE: Final = "/customers/{id}/data"
STATUS_ROUTE: Final = "/customers/{id}/data/erasure"
#: The request key of an erasure asked for without an ``Idempotency-Key``.
DEFAULT_REQUEST_KEY: Final = "default"


def _customer(resolver: APIGatewayRestResolver, method: str, path: str, customer_id: str) -> str:
    """The addressed customer id, when the caller may act on it: an admin any, a customer only themselves."""
    context = resolver.current_event.request_context.authorizer.get_context() or {}
    sub, role = context.get("sub"), context.get("role")
    if not isinstance(sub, str) or not sub or role not in access.route(method, path).roles:
        raise Forbidden()
    cid = validation.parse_path(customer_id, validation.CUSTOMER_ID, "id")
    if role != access.ADMIN and cid != sub:
        raise NotFound("customer", cid)
    return str(cid)


def _execution_arn(machine_arn: str, name: str) -> str:
    prefix, _, machine = machine_arn.rpartition(":stateMachine:")
    return f"{prefix}:execution:{machine}:{name}"


def _record_request(customer_id: str, execution_arn: str, role: str) -> None:
    """The erasure record of this request, unless this execution's record is there already (a repeat)."""
    table = store().table
    item = {
        **keys.erasure_key(customer_id),
        "erasure_status": "requested",
        "execution_arn": execution_arn,
        "requested_at": table.now(),
        "requested_by_role": role,
    }
    try:
        table.client.put_item(
            TableName=table.table_name,
            Item=marshal_item(item),
            ConditionExpression="attribute_not_exists(PK) OR execution_arn <> :arn",
            ExpressionAttributeValues={":arn": {"S": execution_arn}},
        )
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise


def start_erasure(customer_id: str, request_key: str, role: str) -> dict[str, Any]:
    """Record and start the erasure of ``customer_id`` for ``request_key``; a repeat answers the same execution."""
    machine = resource("ERASURE_STATE_MACHINE_ARN")
    name = erasure.execution_name(customer_id, request_key)
    arn = _execution_arn(machine, name)
    _record_request(customer_id, arn, role)
    state = {"customer_id": customer_id, "record": keys.erasure_key(customer_id)}
    try:
        aws.client("stepfunctions").start_execution(stateMachineArn=machine, name=name, input=json.dumps(state))
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") != "ExecutionAlreadyExists":
            raise
    return {"execution_arn": arn, "request_key": request_key}


def erasure_record(customer_id: str) -> dict[str, Any]:
    """The customer's erasure record as the API shows it; NotFound before any erasure."""
    table = store().table
    raw = table.client.get_item(TableName=table.table_name, Key=marshal_item(keys.erasure_key(customer_id)))
    if "Item" not in raw:
        raise NotFound("erasure", customer_id)
    item = unmarshal_item(raw["Item"])
    shown = ("erasure_status", "execution_arn", "requested_at", "finished_at", "failure")
    record: dict[str, Any] = {name: item[name] for name in shown if name in item}
    if "requested_at" in record:
        record["requested_at"] = int(record["requested_at"])
    if "counts_json" in item:
        record["counts"] = json.loads(str(item["counts_json"]))
    return record


@env.once
def app() -> APIGatewayRestResolver:
    """The resolver, built once per container."""
    resolver = APIGatewayRestResolver()

    @resolver.delete("/customers/<customer_id>/data")
    @tracer.capture_method(capture_response=False)
    def erase_route(customer_id: str) -> Response:
        cid = _customer(resolver, "DELETE", ERASE_ROUTE, customer_id)
        key = resolver.current_event.headers.get("Idempotency-Key") or DEFAULT_REQUEST_KEY
        if not idempotency.KEY_PATTERN.fullmatch(key):
            raise idempotency.InvalidKey("header.Idempotency-Key must be 1-80 letters, digits, - or _")
        context = resolver.current_event.request_context.authorizer.get_context() or {}
        started = start_erasure(cid, key, str(context.get("role")))
        logger.info("erasure requested", extra={"execution_arn": started["execution_arn"]})
        record = erasure_record(cid)
        return json_response(
            202,
            {
                **started,
                "erasure_status": record.get("erasure_status", "requested"),
                "status_url": f"/customers/{cid}/data/erasure",
            },
        )

    @resolver.get("/customers/<customer_id>/data/erasure")
    @tracer.capture_method(capture_response=False)
    def status_route(customer_id: str) -> Response:
        cid = _customer(resolver, "GET", STATUS_ROUTE, customer_id)
        return json_response(200, erasure_record(cid))

    register_error_handlers(resolver, logger)
    return resolver


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app().resolve(event, context)
