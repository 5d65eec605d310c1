"""Run the OrchestrationStack's state machines, as synthesized, on moto's executor.

:func:`synthesize_orchestration` builds Storage, Events and Orchestration of one stage config
(the API stack is not needed to run the workflows) and returns their templates.
:func:`deploy` creates, on moto, what the workflows touch -- the sessions table (from the
schema), the keys, buckets, queues, topics and the SSM parameter -- then every Lambda function
of the Orchestration template (in-process, through ``embedded.runtime``, with its
Environment resolved) and every state machine from its synthesized ``DefinitionString``, with
Ref / Fn::GetAtt / Fn::Join / Fn::GetStackOutput (cross-stack) resolved to the moto resources.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aws_cdk import Stage

from embedded.cloudformation.loaders.base import physical_name
from embedded.once_per_run import made_once
from embedded.runtime import deploy_function, mock_client
from embedded.services.dynamodb import create_sessions_table
from embedded.services.kms import key_id_of
from embedded.synth import cdk_context
from stacks.config import StageConfig
from stacks.events_stack import EventsStack
from stacks.orchestration_stack import OrchestrationStack, rest_api_url_parameter
from stacks.stage import stage_app
from stacks.storage_stack import StorageStack

REGION = "us-east-1"
ACCOUNT = "123456789012"
PARTS = ("Storage", "Events", "Orchestration")
LINK_BASE_URL = "https://api.example.test/prod"


def synthesize_orchestration(config: StageConfig, variant: str = "") -> dict[str, dict[str, Any]]:
    """Templates of Storage, Events and Orchestration for ``config``, keyed by part; synthesized once per test run.

    The run's copy is found by ``config`` alone: a test that patches the stacks' code before it
    synthesizes names what it changed in ``variant``, or it would get the unpatched templates.
    """

    def make(directory: Path) -> None:
        (directory / "templates.json").write_text(json.dumps(_synthesized(config)))

    made = made_once(f"orchestration {config!r} {variant}", make)
    templates: dict[str, dict[str, Any]] = json.loads((made / "templates.json").read_text())
    return templates


def _synthesized(config: StageConfig) -> dict[str, dict[str, Any]]:
    app = stage_app(context=cdk_context())
    stage = Stage(app, f"MangaAssist-{config.name}")
    prefix = f"MangaAssist-{config.name}"
    storage = StorageStack(stage, "Storage", stack_name=f"{prefix}-Storage", config=config)
    events = EventsStack(stage, "Events", stack_name=f"{prefix}-Events", config=config, storage=storage)
    orchestration = OrchestrationStack(
        stage, "Orchestration", stack_name=f"{prefix}-Orchestration", config=config, storage=storage, events=events
    )
    assembly = stage.synth()
    stacks = {"Storage": storage, "Events": events, "Orchestration": orchestration}
    templates = {part: assembly.get_stack_artifact(stack.artifact_id).template for part, stack in stacks.items()}
    return {**templates, "_stack_names": {stack.stack_name: part for part, stack in stacks.items()}}


@dataclass
class Deployed:
    """The moto resources a test drives, by the construct path fragment that names them."""

    templates: dict[str, Any]
    refs: dict[tuple[str, str], str] = field(default_factory=dict)
    table_name: str = ""

    @property
    def sfn(self) -> Any:
        """The mock's Step Functions client, for every start, poll and history read."""
        return mock_client("stepfunctions", REGION)

    def _find(self, part: str, kind: str, id_prefix: str) -> str:
        """The logical id ``<id_prefix><8 hex>`` of a resource of ``kind`` (CDK's naming)."""
        pattern = re.compile(rf"^{re.escape(id_prefix)}[0-9A-F]{{8}}$")
        resources = self.templates[part]["Resources"]
        found = [lid for lid, res in resources.items() if res["Type"] == kind and pattern.match(lid)]
        if len(found) != 1:
            raise KeyError(f"expected one {kind} named {id_prefix}* in {part}, found {found}")
        return found[0]

    def ref(self, part: str, kind: str, id_prefix: str, attribute: str | None = None) -> str:
        lid = self._find(part, kind, id_prefix)
        return self.refs[(part, f"{lid}.{attribute}" if attribute else lid)]

    def state_machine(self, name: str) -> str:
        return self.ref("Orchestration", "AWS::StepFunctions::StateMachine", name)

    def function(self, name: str) -> str:
        return self.ref("Orchestration", "AWS::Lambda::Function", name, "Arn")

    def queue(self, part: str, name: str) -> str:
        return self.ref(part, "AWS::SQS::Queue", name)

    def topic(self, part: str, name: str) -> str:
        return self.ref(part, "AWS::SNS::Topic", name)

    # ------------------------------------------------------------------ executions

    def start(self, state_machine_arn: str, state: Mapping[str, Any], name: str | None = None) -> str:
        response = self.sfn.start_execution(
            stateMachineArn=state_machine_arn, name=name or f"run-{uuid.uuid4().hex}", input=json.dumps(state)
        )
        return str(response["executionArn"])

    def describe(self, execution_arn: str) -> dict[str, Any]:
        return dict(self.sfn.describe_execution(executionArn=execution_arn))

    def wait_done(self, execution_arn: str, timeout: float = 90.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            description = self.describe(execution_arn)
            if description["status"] != "RUNNING":
                return description
            time.sleep(0.1)
        raise AssertionError(f"execution {execution_arn} still RUNNING after {timeout} s")

    def states_entered(self, execution_arn: str) -> list[str]:
        events = self.sfn.get_execution_history(executionArn=execution_arn, maxResults=1000)["events"]
        return [e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e]

    def wait_for_state(self, execution_arn: str, state_name: str, timeout: float = 45.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if state_name in self.states_entered(execution_arn):
                return
            time.sleep(0.1)
        raise AssertionError(f"{execution_arn} never entered {state_name}: {self.states_entered(execution_arn)}")


def _resolve(value: Any, part: str, deployed: Deployed) -> Any:
    templates, refs = deployed.templates, deployed.refs
    if isinstance(value, dict):
        if "Ref" in value:
            name = value["Ref"]
            pseudo = {
                "AWS::Region": REGION,
                "AWS::AccountId": ACCOUNT,
                "AWS::Partition": "aws",
                "AWS::URLSuffix": "amazonaws.com",
            }
            return pseudo.get(name) or refs[(part, name)]
        if "Fn::GetAtt" in value:
            logical_id, attribute = value["Fn::GetAtt"]
            return refs[(part, f"{logical_id}.{attribute}")]
        if "Fn::Join" in value:
            separator, pieces = value["Fn::Join"]
            return separator.join(str(_resolve(p, part, deployed)) for p in pieces)
        if "Fn::GetStackOutput" in value:
            spec = value["Fn::GetStackOutput"]
            producer = templates["_stack_names"][spec["StackName"]]
            output = templates[producer]["Outputs"][spec["OutputName"]]["Value"]
            return _resolve(output, producer, deployed)
        if "Fn::ImportValue" in value:
            export = value["Fn::ImportValue"]
            for producer in PARTS:
                for output in templates[producer].get("Outputs", {}).values():
                    if output.get("Export", {}).get("Name") == export:
                        return _resolve(output["Value"], producer, deployed)
            raise KeyError(f"no export {export!r}")
        return {k: _resolve(v, part, deployed) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, part, deployed) for v in value]
    return value


def deploy(templates: dict[str, Any]) -> Deployed:
    """Create the moto resources and the functions and state machines (call inside mock_aws).

    Names are the embedded stage's (``physical_name``) and key ids derived too: the same at every
    deploy, each test deploying into an account of its own, so the definitions that name them are
    the same text every time and parsed once per process.
    """
    deployed = Deployed(templates)
    refs = deployed.refs

    def client(service: str) -> Any:  # the mock's client, made when a template first needs the service
        return mock_client(service, REGION)

    for part in PARTS:
        for lid, res in templates[part]["Resources"].items():
            kind = res["Type"]
            if kind == "AWS::DynamoDB::Table":
                name = physical_name(part, lid)
                stream_arn = create_sessions_table(client("dynamodb"), name)
                client("dynamodb").update_continuous_backups(
                    TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
                )
                deployed.table_name = name
                refs[(part, lid)] = name
                refs[(part, f"{lid}.Arn")] = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"
                refs[(part, f"{lid}.StreamArn")] = stream_arn
            elif kind == "AWS::KMS::Key":
                with key_id_of(f"{part}/{lid}"):
                    arn = client("kms").create_key()["KeyMetadata"]["Arn"]
                refs[(part, lid)] = arn.split("/")[-1]
                refs[(part, f"{lid}.Arn")] = arn
            elif kind == "AWS::S3::Bucket":
                name = physical_name(part, lid, max_length=63, lower=True)
                client("s3").create_bucket(Bucket=name)
                refs[(part, lid)] = name
                refs[(part, f"{lid}.Arn")] = f"arn:aws:s3:::{name}"
            elif kind == "AWS::SQS::Queue":
                name = physical_name(part, lid, max_length=80)
                url = client("sqs").create_queue(QueueName=name)["QueueUrl"]
                refs[(part, lid)] = url
                refs[(part, f"{lid}.Arn")] = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
                refs[(part, f"{lid}.QueueName")] = name
            elif kind == "AWS::SNS::Topic":
                arn = client("sns").create_topic(Name=physical_name(part, lid, max_length=80))["TopicArn"]
                refs[(part, lid)] = arn
                refs[(part, f"{lid}.TopicArn")] = arn
                refs[(part, f"{lid}.TopicName")] = arn.rsplit(":", 1)[-1]
            elif kind == "AWS::Events::EventBus":
                name = physical_name(part, lid)
                arn = client("events").create_event_bus(Name=name)["EventBusArn"]
                refs[(part, lid)] = name
                refs[(part, f"{lid}.Name")] = name
                refs[(part, f"{lid}.Arn")] = arn
            elif kind == "AWS::IAM::Role":  # moto enforces no IAM: an ARN is all a function is given
                refs[(part, f"{lid}.Arn")] = f"arn:aws:iam::{ACCOUNT}:role/{lid}"
            elif kind == "AWS::SES::ConfigurationSet":  # functions get only its name
                refs[(part, lid)] = physical_name(part, lid)
            elif kind == "AWS::Scheduler::ScheduleGroup":  # the test creates the group it uses
                name = str(res.get("Properties", {}).get("Name") or lid)
                refs[(part, lid)] = name
                refs[(part, f"{lid}.Arn")] = f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule-group/{name}"
            elif kind == "AWS::Cognito::UserPool":  # the erasure's user function is given its id
                pool = client("cognito-idp").create_user_pool(PoolName=physical_name(part, lid))["UserPool"]
                refs[(part, lid)] = pool["Id"]
                refs[(part, f"{lid}.Arn")] = pool["Arn"]
            elif kind == "AWS::SecretsManager::Secret":
                arn = client("secretsmanager").create_secret(Name=physical_name(part, lid), SecretString="s" * 64)[
                    "ARN"
                ]
                refs[(part, lid)] = arn
    for part in PARTS:
        for lid, param in templates[part].get("Parameters", {}).items():
            default = param.get("Default")
            if isinstance(default, str) and default.startswith("/mangaassist/"):
                client("ssm").put_parameter(Name=default, Value=LINK_BASE_URL, Type="String", Overwrite=True)
                refs[(part, lid)] = LINK_BASE_URL
            elif isinstance(default, str) and default.startswith("/aws/service/powertools"):
                refs[(part, lid)] = "arn:aws:lambda:us-east-1:017000801446:layer:AWSLambdaPowertoolsPythonV3:1"

    orchestration = templates["Orchestration"]["Resources"]
    # State machine ARNs are known before they exist, so a function may be given one (a cycle otherwise).
    machine_names = {
        lid: physical_name("Orchestration", lid, max_length=80)
        for lid, res in orchestration.items()
        if res["Type"] == "AWS::StepFunctions::StateMachine"
    }
    for lid, name in machine_names.items():
        refs[("Orchestration", lid)] = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{name}"
    for lid, res in orchestration.items():
        if res["Type"] != "AWS::Lambda::Function":
            continue
        props = res["Properties"]
        environment = _resolve(props.get("Environment", {}).get("Variables", {}), "Orchestration", deployed)
        arn = deploy_function(props["Handler"], environment, name=physical_name("Orchestration", lid))
        refs[("Orchestration", f"{lid}.Arn")] = arn
        refs[("Orchestration", lid)] = arn.rsplit(":", 1)[-1]
    role = f"arn:aws:iam::{ACCOUNT}:role/sfn-test"
    for lid, res in orchestration.items():
        if res["Type"] != "AWS::StepFunctions::StateMachine":
            continue
        definition = _resolve(res["Properties"]["DefinitionString"], "Orchestration", deployed)
        arn = deployed.sfn.create_state_machine(name=machine_names[lid], definition=definition, roleArn=role)[
            "stateMachineArn"
        ]
        assert arn == refs[("Orchestration", lid)], (arn, refs[("Orchestration", lid)])
    client("ssm").put_parameter(Name=rest_api_url_parameter("test"), Value=LINK_BASE_URL, Type="String", Overwrite=True)
    return deployed
