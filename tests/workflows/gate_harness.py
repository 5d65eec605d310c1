"""Run HumanApprovalGate state machines, as synthesized, on moto's executor (helpers for tests).

A CDK test stack holds the gate(s); :func:`deploy_gate_machine` resolves one state machine's
definition and the request Lambda's environment against moto resources (table, topic, secret,
in-process Lambda functions via ``embedded.runtime``) and creates it on moto. The
reviewer's e-mails land on an SQS queue subscribed to the topic (raw delivery), so a test reads
the links exactly as a person would, and clicks them through the gate's deployed decision function.
"""

from __future__ import annotations

import html
import json
import os
import re
import secrets
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock
from urllib.parse import parse_qsl, urlencode, urlsplit

import boto3
from moto.core.responses import EmptyResult
from moto.stepfunctions.responses import StepFunctionResponse

from constructs_lib.approval_gate.gate_runtime.records import KeyLayout, ReviewStore
from embedded.events import Api, rest_proxy_event
from embedded.runtime import deploy_function
from embedded.services.dynamodb import create_sessions_table

LINK_BASE_URL = "https://api.example.test/prod"
REGION = "us-east-1"


@contextmanager
def task_failure_cause() -> Iterator[None]:
    """Make moto pass SendTaskFailure's ``cause`` on to the execution, as Step Functions does.

    moto 5.2.5's ``StepFunctionResponse.send_task_failure`` reads only ``taskToken`` and
    ``error`` and drops ``cause`` (its executor backend accepts one), so a Catch would see no
    Cause. This restores the documented behaviour for the duration of the block.
    """

    def send_task_failure(self: StepFunctionResponse) -> EmptyResult:
        backend: Any = self.stepfunction_backend  # the executor's backend, whose method takes cause
        backend.send_task_failure(
            self._get_param("taskToken"), error=self._get_param("error"), cause=self._get_param("cause")
        )
        return EmptyResult()

    with mock.patch.object(StepFunctionResponse, "send_task_failure", send_task_failure):
        yield


def resolve(value: Any, refs: Mapping[str, str]) -> Any:
    """Resolve Ref / Fn::GetAtt(Arn) / Fn::Join of a CloudFormation value with ``refs``."""
    if isinstance(value, dict):
        if "Ref" in value:
            return refs[value["Ref"]]
        if "Fn::GetAtt" in value:
            logical_id, attribute = value["Fn::GetAtt"]
            return refs[f"{logical_id}.{attribute}"]
        if "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return separator.join(str(resolve(part, refs)) for part in parts)
        return {k: resolve(v, refs) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, refs) for v in value]
    return value


#: Error names AWS defines that moto 5.2.5's ASL parser does not know (it refuses the whole
#: definition: "Custom Error Names MUST NOT begin with the prefix 'States.'").
_UNKNOWN_TO_MOTO = ("States.Http.Socket",)


def moto_compatible(definition: str) -> str:
    """The definition without error names moto cannot parse in Retry/Catch ``ErrorEquals``.

    Only those names go; every state, transition, retry and catch stays. On AWS they match HTTP
    Task socket errors, which none of the gate's or the export's states can raise.
    """
    document = json.loads(definition)

    def strip(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "ErrorEquals" and isinstance(value, list):
                    node[key] = [name for name in value if name not in _UNKNOWN_TO_MOTO] or value
                else:
                    strip(value)
        elif isinstance(node, list):
            for item in node:
                strip(item)

    strip(document)
    return json.dumps(document)


def logical_id_of(template: Mapping[str, Any], kind: str, path_part: str) -> str:
    """The logical id of the one resource of ``kind`` whose construct path contains ``path_part``."""
    found = [
        lid
        for lid, res in template["Resources"].items()
        if res["Type"] == kind and path_part in res.get("Metadata", {}).get("aws:cdk:path", "")
    ]
    if len(found) != 1:
        raise KeyError(f"expected one {kind} under {path_part!r}, found {found}")
    return found[0]


@dataclass
class GateMachine:
    """A gate state machine deployed on moto, with what a test needs to drive it."""

    state_machine_arn: str
    table_name: str
    topic_arn: str
    queue_url: str
    secret_arn: str
    review_function: str
    key: bytes
    layout: dict[str, str]

    # ------------------------------------------------------------------ executions

    def start(self, state: Mapping[str, Any]) -> str:
        sfn = boto3.client("stepfunctions", region_name=REGION)
        # Always name it: moto 5.2.5 names an unnamed execution "None", so a second unnamed start
        # with the same input returns the first execution (idempotent start) instead of a new one.
        name = f"run-{uuid.uuid4().hex}"
        response = sfn.start_execution(stateMachineArn=self.state_machine_arn, name=name, input=json.dumps(state))
        return str(response["executionArn"])

    def describe(self, execution_arn: str) -> dict[str, Any]:
        return dict(boto3.client("stepfunctions", region_name=REGION).describe_execution(executionArn=execution_arn))

    def wait_done(self, execution_arn: str, timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            description = self.describe(execution_arn)
            if description["status"] != "RUNNING":
                return description
            time.sleep(0.1)
        raise AssertionError(f"execution {execution_arn} still RUNNING after {timeout} s")

    def history(self, execution_arn: str) -> list[dict[str, Any]]:
        sfn = boto3.client("stepfunctions", region_name=REGION)
        return list(sfn.get_execution_history(executionArn=execution_arn, maxResults=1000)["events"])

    def entered(self, execution_arn: str, state_name: str) -> int:
        """How often the execution entered ``state_name``."""
        return sum(
            1
            for event in self.history(execution_arn)
            if event.get("stateEnteredEventDetails", {}).get("name") == state_name
        )

    # ------------------------------------------------------------------ e-mail and links

    def next_email(self, timeout: float = 15.0) -> str:
        sqs = boto3.client("sqs", region_name=REGION)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            messages = sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=1).get("Messages", [])
            if messages:
                sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=messages[0]["ReceiptHandle"])
                return str(messages[0]["Body"])
            time.sleep(0.1)
        raise AssertionError(f"no reviewer e-mail within {timeout} s")

    def open_link(self, url: str, *, source_ip: str = "203.0.113.9", form: str | None = None) -> tuple[int, str]:
        """GET ``url`` (or POST ``form`` to it) through the deployed link handler; status and HTML."""
        parts = urlsplit(url)
        base_path = urlsplit(LINK_BASE_URL).path
        path = parts.path[len(base_path) :] if parts.path.startswith(base_path) else parts.path
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        event = api_gateway_event(path, query, source_ip=source_ip, form=form)
        response = boto3.client("lambda", region_name=REGION).invoke(
            FunctionName=self.review_function, Payload=json.dumps(event).encode()
        )
        payload = json.loads(response["Payload"].read())
        if "FunctionError" in response:
            raise AssertionError(f"link handler crashed: {payload}")
        return int(payload["statusCode"]), str(payload["body"])

    def click(self, url: str, *, source_ip: str = "203.0.113.9") -> tuple[int, str]:
        """What a reviewer does: open the link, then press the confirmation page's button."""
        status, body = self.open_link(url, source_ip=source_ip)
        form = confirmation_form(body) if status == 200 else None
        if form is None:
            return status, body
        return self.open_link(url, source_ip=source_ip, form=form)

    def review(self, review_id: str) -> dict[str, Any] | None:
        """The review record, read where the gate's functions keep it (their key layout)."""
        with mock.patch.dict(os.environ, self.layout):
            layout = KeyLayout.from_environment()
        found = ReviewStore(self.table_name, layout=layout).get_review(review_id)
        return None if found is None else {"status": str(found.status), "review": found}


def links_of(email: str) -> dict[str, str]:
    """The approve and reject URLs in a reviewer e-mail."""
    found = dict(re.findall(r"^(Approve|Reject): (\S+)$", email, flags=re.MULTILINE))
    return {"approve": found["Approve"], "reject": found["Reject"]}


def review_id_of(url: str) -> str:
    return urlsplit(url).path.rstrip("/").split("/")[-2]


REVIEW_API = Api(api_id="abc123", stage="prod", custom_domain="api.example.test")


def confirmation_form(page: str) -> str | None:
    """The url-encoded body the confirmation page's button POSTs; None when the page has no form."""
    if '<form method="post"' not in page:
        return None
    fields = re.findall(r'<input type="hidden" name="([a-z]+)" value="([^"]*)">', page)
    return urlencode([(name, html.unescape(value)) for name, value in fields])


def api_gateway_event(
    path: str, query: Mapping[str, str], *, source_ip: str = "203.0.113.9", form: str | None = None
) -> dict[str, Any]:
    """The REST API (v1) Lambda proxy event of a reviewer's browser: ``GET path?query``, or the
    confirmation page's ``POST`` of ``form`` to the same address."""
    segments = path.strip("/").split("/")
    is_review = len(segments) == 3 and segments[0] == "reviews"
    headers = {"Host": REVIEW_API.domain, "User-Agent": "Mozilla/5.0", "Accept": "text/html"}
    if form is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    return rest_proxy_event(
        "GET" if form is None else "POST",
        f"/reviews/{{id}}/{segments[2]}" if is_review else path,
        path,
        api=REVIEW_API,
        path_parameters={"id": segments[1]} if is_review else None,
        query=query,
        headers=headers,
        body=form,
        source_ip=source_ip,
        epoch_ms=int(time.time() * 1000),
    )


def deploy_gate_machine(
    template: Mapping[str, Any],
    *,
    gate_path: str,
    machine_path: str,
    table_path: str,
    extra_refs: Callable[[dict[str, str]], None] | None = None,
    topic_path: str | None = None,
) -> GateMachine:
    """Create the moto resources behind one gate state machine of ``template`` (inside mock_aws).

    ``*_path`` are fragments of CDK construct paths (``GateTest/Quick/``) that pick the gate's
    function, topic and secret, the state machine, and the table.
    """
    suffix = uuid.uuid4().hex[:8]
    ddb = boto3.client("dynamodb", region_name=REGION)
    table_name = f"gate-test-{suffix}"
    create_sessions_table(ddb, table_name)

    sns = boto3.client("sns", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    topic_arn = sns.create_topic(Name=f"reviewers-{suffix}")["TopicArn"]
    queue_url = sqs.create_queue(QueueName=f"reviewer-inbox-{suffix}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "true"})

    secret_value = secrets.token_urlsafe(48)
    secret_arn = boto3.client("secretsmanager", region_name=REGION).create_secret(
        Name=f"review-signing-{suffix}", SecretString=secret_value
    )["ARN"]

    function_id = logical_id_of(template, "AWS::Lambda::Function", f"{gate_path}RequestFunction/")
    refs: dict[str, str] = {
        "AWS::Partition": "aws",
        "AWS::Region": REGION,
        "AWS::AccountId": "123456789012",
        logical_id_of(template, "AWS::DynamoDB::Table", table_path): table_name,
        logical_id_of(template, "AWS::SNS::Topic", topic_path or gate_path): topic_arn,
        logical_id_of(template, "AWS::SecretsManager::Secret", gate_path): secret_arn,
    }
    if extra_refs is not None:
        extra_refs(refs)
    function = template["Resources"][function_id]["Properties"]
    environment = resolve(function["Environment"]["Variables"], refs)
    request_arn = deploy_function(function["Handler"], environment, name=f"review-request-{suffix}")
    refs[f"{function_id}.Arn"] = request_arn

    decision_id = logical_id_of(template, "AWS::Lambda::Function", f"{gate_path}DecisionFunction/")
    decision = template["Resources"][decision_id]["Properties"]
    review_function = f"review-links-{suffix}"
    decision_environment = resolve(decision["Environment"]["Variables"], refs)
    deploy_function(decision["Handler"], decision_environment, name=review_function)
    layout = {k: v for k, v in decision_environment.items() if k.startswith("REVIEW_") and k != "REVIEW_SECRET_ARN"}

    machine_id = logical_id_of(template, "AWS::StepFunctions::StateMachine", machine_path)
    definition = moto_compatible(resolve(template["Resources"][machine_id]["Properties"]["DefinitionString"], refs))
    role_arn = boto3.client("iam", region_name=REGION).get_role(RoleName="in-process-lambda-role")["Role"]["Arn"]
    state_machine_arn = boto3.client("stepfunctions", region_name=REGION).create_state_machine(
        name=f"gate-{suffix}", definition=definition, roleArn=role_arn
    )["stateMachineArn"]
    return GateMachine(
        state_machine_arn=state_machine_arn,
        table_name=table_name,
        topic_arn=topic_arn,
        queue_url=queue_url,
        secret_arn=secret_arn,
        review_function=review_function,
        key=secret_value.encode(),
        layout=layout,
    )
