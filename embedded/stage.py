"""A whole synthesized stage on moto: deploy every stack, then drive it (pumps, routers, clock).

Usage::

    with embedded_stage(assembly_dir) as stage:
        table = stage.only("AWS::DynamoDB::Table")
        ... call the REST/WebSocket routers, write to the table ...
        stage.settle()          # streams, queues, rules, workflows until nothing moves
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from moto import mock_aws

from embedded import models, moto_gaps, moto_responses, payloads, throttles
from embedded.clock import Clock
from embedded.cloudformation.assembly import StackTemplate, load_assembly
from embedded.cloudformation.deploy import DeployedStack, DeploymentError, deploy_stack
from embedded.cloudformation.intrinsics import Deployed
from embedded.cloudformation.loaders import Cloud, EventSourceMapping
from embedded.iam import deployment
from embedded.iam.authority import Authority
from embedded.iam.guard import Guard, Refusal
from embedded.runtime import Invocations, in_process
from embedded.services import firehose, kms, sns, stepfunctions
from embedded.services.apigateway_rest import RestRouter
from embedded.services.apigateway_websocket import WebSocketRouter
from embedded.services.bedrock import BedrockStub
from embedded.services.cognito import auth_flows_enforced, jwks_transport
from embedded.services.dynamodb import atomic_requests
from embedded.services.dynamodb_streams import StreamPump
from embedded.services.eventbridge import EventLog, delivering, fire_schedule
from embedded.services.lambda_async import asynchronous_invocations
from embedded.services.lambda_concurrency import Concurrency
from embedded.services.scheduler import FiredSchedule, fire_due
from embedded.services.sqs import SqsPump

MOTO_CONFIG: Any = {"stepfunctions": {"execute_state_machine": True}}


class RefusedWhileWaiting(RuntimeError):
    """A wait ended early: something made during it is a call or delivery AWS would refuse
    (see :meth:`EmbeddedStage.waits_end_on_refusal`)."""


@dataclass
class FunctionInfo:
    """A deployed Lambda function as the template declares it."""

    logical_id: str
    part: str
    name: str
    arn: str
    handler: str
    environment: dict[str, str]


@dataclass
class EmbeddedStage:
    """The deployed stacks and everything that drives them (see module docstring)."""

    cloud: Cloud
    stacks: list[DeployedStack]
    clock: Clock
    calls: Invocations
    events: EventLog
    bedrock: BedrockStub = field(default_factory=BedrockStub)
    guard: Guard | None = None
    concurrency: Concurrency = field(default_factory=Concurrency)
    streams: StreamPump = field(init=False)
    queues: SqsPump = field(init=False)
    rest_apis: dict[str, RestRouter] = field(init=False)
    websocket_apis: dict[str, WebSocketRouter] = field(init=False)
    _waits_end_on_refusal: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        mappings = self.cloud.registry.mappings
        self.streams = StreamPump(self.cloud, [m for m in mappings if ":dynamodb:" in m.event_source_arn], self.clock)
        self.queues = SqsPump(self.cloud, [m for m in mappings if ":sqs:" in m.event_source_arn])
        self.rest_apis = {}
        self.websocket_apis = {}
        account = throttles.account_bucket(self.clock)  # API Gateway's regional limit, over every API
        for stack in self.stacks:
            for api in stack.of_type("AWS::ApiGateway::RestApi"):
                self.rest_apis[api.logical_id] = RestRouter(self.cloud, stack, api.logical_id, self.clock, account)
            for api in stack.of_type("AWS::ApiGatewayV2::Api"):
                if str(api.properties.get("ProtocolType", "")).upper() == "WEBSOCKET":
                    router = WebSocketRouter(self.cloud, stack, api.logical_id, self.clock, account)
                    self.websocket_apis[api.logical_id] = router

    @property
    def refusals(self) -> list[Refusal]:
        """Every call and delivery AWS would have refused so far (empty when not strict)."""
        return list(self.guard.refusals) if self.guard is not None and self.cloud.guard is not None else []

    @contextmanager
    def waits_end_on_refusal(self) -> Iterator[None]:
        """While open, a wait (:meth:`settle`, :meth:`wait_execution`) ends as soon as a call or
        delivery made during it is one AWS would refuse, raising :class:`RefusedWhileWaiting`.

        For a caller that fails on any refusal anyway (the story): a refused grant usually means
        the awaited notice, message or workflow end never comes, and the wait would run to its
        real-time timeout for nothing.
        """
        before, self._waits_end_on_refusal = self._waits_end_on_refusal, True
        try:
            yield
        finally:
            self._waits_end_on_refusal = before

    @property
    def rest(self) -> RestRouter:
        """The stage's REST API (exactly one expected)."""
        if len(self.rest_apis) != 1:
            raise LookupError(f"expected one REST API, the stage has {sorted(self.rest_apis)}")
        return next(iter(self.rest_apis.values()))

    @property
    def websocket(self) -> WebSocketRouter:
        """The stage's WebSocket API (exactly one expected)."""
        if len(self.websocket_apis) != 1:
            raise LookupError(f"expected one WebSocket API, the stage has {sorted(self.websocket_apis)}")
        return next(iter(self.websocket_apis.values()))

    # ------------------------------------------------------------------ lookups

    def client(self, service: str) -> Any:
        return self.cloud.client(service)

    def stack(self, part: str) -> DeployedStack:
        for stack in self.stacks:
            if stack.part == part:
                return stack
        raise KeyError(f"no stack {part!r}; deployed: {[s.part for s in self.stacks]}")

    def has(self, resource_type: str, part: str | None = None) -> bool:
        return bool(self.all(resource_type, part))

    def all(
        self, resource_type: str, part: str | None = None, where: Callable[[Deployed], bool] | None = None
    ) -> list[Deployed]:
        return [
            r
            for s in self.stacks
            if part is None or s.part == part
            for r in s.of_type(resource_type)
            if r.live and (where is None or where(r))
        ]

    def only(
        self, resource_type: str, part: str | None = None, where: Callable[[Deployed], bool] | None = None
    ) -> Deployed:
        found = self.all(resource_type, part, where)
        if len(found) != 1:
            raise LookupError(f"expected exactly one {resource_type} in {part or 'the stage'}, found {len(found)}")
        return found[0]

    def at_path(self, part: str, path: str) -> Deployed:
        """The resource at a construct path below a stack (``SessionsTable``)."""
        stack = self.stack(part)
        return stack.resources[stack.template.logical_id(path)]

    def template_of(self, part: str) -> StackTemplate:
        return self.stack(part).template

    def functions(self) -> list[FunctionInfo]:
        result = []
        for stack in self.stacks:
            for fn in stack.of_type("AWS::Lambda::Function"):
                env = (fn.properties.get("Environment") or {}).get("Variables", {})
                result.append(
                    FunctionInfo(
                        fn.logical_id,
                        stack.part,
                        fn.ref,
                        str(fn.attributes["Arn"]),
                        str(fn.properties.get("Handler", "")),
                        {str(k): str(v) for k, v in env.items()},
                    )
                )
        return result

    def function(self, handler: str) -> FunctionInfo:
        """The one function whose Handler is ``handler`` (e.g. ``lambdas.events.router.handler``)."""
        found = [f for f in self.functions() if f.handler == handler]
        if len(found) != 1:
            known = sorted(f.handler for f in self.functions())
            raise LookupError(f"expected one function with handler {handler!r}, found {len(found)}; handlers: {known}")
        return found[0]

    def mappings_of(self, function_name: str) -> list[EventSourceMapping]:
        return [m for m in self.cloud.registry.mappings if m.function_name == function_name]

    # ------------------------------------------------------------------ driving

    def invoke(self, function_name: str, event: Any) -> Any:
        from embedded.services.lambda_invoke import invoke

        return invoke(self.client("lambda"), function_name, event)

    def fire_schedule(self, rule: Deployed) -> None:
        name = str(rule.attributes["Arn"]).rsplit("/", 1)[-1]
        fire_schedule(self.cloud, name, log=self.events, now=self.clock())

    def fire_due_schedules(self) -> list[FiredSchedule]:
        """Run the EventBridge Scheduler one-time schedules that are due on the stage's clock."""
        return fire_due(self.cloud, self.clock())

    def running_executions(self) -> list[str]:
        return stepfunctions.running_executions(self.client("stepfunctions"), self.state_machine_arns())

    def state_machine_arns(self) -> list[str]:
        return [machine.ref for machine in self.all("AWS::StepFunctions::StateMachine")]

    def settle(
        self,
        *,
        timeout: float = 30.0,
        until: Callable[[], bool] | None = None,
        poll: float = 0.05,
        wait_executions: bool = True,
        tick: float = 0.0,
    ) -> int:
        """Pump streams and queues until nothing is pending and no workflow runs (or ``until()``).

        ``wait_executions=False`` stops waiting for workflows (one that waits for a callback would
        otherwise keep the stage busy until its timeout). ``tick`` lets time pass on the stage's
        clock while nothing moves (that many seconds per idle poll): a workflow's ``Wait`` state
        ends under a frozen clock. ``timeout`` is real time.
        """
        deadline = time.monotonic() + timeout
        refused_before = len(self.refusals) if self._waits_end_on_refusal else None
        moved = 0
        while True:
            step = self.streams.pump() + self.queues.pump() + self.concurrency.retry_deferred(self.client("lambda"))
            moved += step
            if until is not None and until():
                return moved
            if refused_before is not None and len(self.refusals) > refused_before:
                refused = "; ".join(dict.fromkeys(str(r) for r in self.refusals[refused_before:]))
                raise RefusedWhileWaiting(f"stopped waiting: AWS would refuse {refused}")
            quiet = step == 0 and self.streams.pending() == 0
            if until is None and quiet and (not wait_executions or not self.running_executions()):
                return moved
            if time.monotonic() > deadline:
                what = "the condition" if until is not None else f"quiet (running: {self.running_executions()})"
                raise TimeoutError(f"stage did not reach {what} within {timeout:.0f}s")
            if step == 0:
                if tick:
                    self.clock.advance(tick)
                time.sleep(poll)

    def wait_execution(self, execution_arn: str, *, timeout: float = 30.0, tick: float = 0.0) -> dict[str, Any]:
        """Pump while one execution runs (letting ``tick`` seconds pass per idle poll, see ``settle``);
        return its description once it has ended."""
        sfn = self.client("stepfunctions")
        state: dict[str, Any] = {}

        def done() -> bool:
            state.update(sfn.describe_execution(executionArn=execution_arn))
            return state["status"] != "RUNNING"

        self.settle(timeout=timeout, until=done, tick=tick)
        return state

    def states_entered(self, execution_arn: str) -> list[str]:
        """The names of the states an execution entered so far, in order (a state entered twice, twice)."""
        history = self.client("stepfunctions").get_execution_history(executionArn=execution_arn, maxResults=1000)
        return [e["stateEnteredEventDetails"]["name"] for e in history["events"] if "stateEnteredEventDetails" in e]

    def execution_errors(self, execution_arn: str) -> list[str]:
        """The failure events of an execution's history (what failed, with its cause), for messages."""
        history = self.client("stepfunctions").get_execution_history(executionArn=execution_arn, maxResults=1000)
        found = []
        for event in history["events"]:
            for key, value in event.items():
                if key.endswith("EventDetails") and isinstance(value, dict) and ("error" in value or "cause" in value):
                    found.append(f"{event['type']}: {value.get('error')}: {str(value.get('cause'))[:300]}")
        return found

    def queue_messages(self, queue: Deployed, *, delete: bool = True) -> list[dict[str, Any]]:
        """Every message now on a queue (received with its attributes; deleted unless told not to)."""
        sqs = self.client("sqs")
        messages: list[dict[str, Any]] = []
        while True:
            batch = sqs.receive_message(
                QueueUrl=queue.ref, MaxNumberOfMessages=10, MessageAttributeNames=["All"], AttributeNames=["All"]
            ).get("Messages", [])
            if not batch:
                break
            messages.extend(batch)
            for message in batch:
                if delete:
                    sqs.delete_message(QueueUrl=queue.ref, ReceiptHandle=message["ReceiptHandle"])
                else:
                    sqs.change_message_visibility(
                        QueueUrl=queue.ref, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
                    )
            if not delete:
                break
        return messages

    def describe(self) -> dict[str, Any]:
        """What is deployed: counts per stack and type, mappings, passive resources."""
        return {
            "stacks": {
                s.name: {t: len(s.of_type(t)) for t in sorted({r.type for r in s.resources.values() if r.live})}
                for s in self.stacks
            },
            "mappings": [
                {"function": m.function_name, "source": m.event_source_arn.split(":")[2], "batch_size": m.batch_size}
                for m in self.cloud.registry.mappings
            ],
            "passive": len(self.cloud.registry.passive),
            "policies": self._policy_count(),
            "refusals": len(self.refusals),
        }

    def _policy_count(self) -> int:
        if self.guard is None:
            return 0
        authority = self.guard.authority
        roles = sum(len(authority.identity(arn)) + 1 for arn in authority.roles)
        resources = sum(len(p) for p in authority.resource_policies.values())
        return roles + resources + len(authority.keys)


@contextmanager
def embedded_stage(
    source: Path | Sequence[StackTemplate],
    *,
    clock: Clock | None = None,
    region: str = "us-east-1",
    parameters: dict[str, dict[str, Any]] | None = None,
    before_deploy: Callable[[Cloud], None] | None = None,
    bedrock: BedrockStub | None = None,
    passthrough_urls: Sequence[str] = (),
    strict: bool = True,
) -> Iterator[EmbeddedStage]:
    """Deploy every stack onto a fresh moto account, for the block's duration.

    ``source`` is a cloud assembly directory, or stack templates in deployment order (tests of
    the harness itself use small hand-made ones).

    ``parameters`` overrides template parameters per stack name; ``before_deploy`` may prepare
    the account (e.g. SSM parameters the templates read). ``bedrock`` answers the functions'
    Bedrock Runtime Converse calls at the client (moto has no Converse); by default a
    ``BedrockStub`` that echoes the last user message. Its calls are ``stage.bedrock.calls``.
    ``passthrough_urls`` (regular expressions) are requests moto lets through to the real service.

    ``strict`` (the default) enforces the stage's IAM, resource and key policies on every call a
    function, a workflow or a service delivery makes (``embedded.iam``), and refuses to deploy what
    AWS would refuse to create. ``strict=False`` is for tests of the emulator's other mechanics on
    small hand-made templates that carry no policies; the refusals are still decided, never enforced.
    """
    clock = clock or Clock()
    bedrock = bedrock or BedrockStub()
    templates = load_assembly(source) if isinstance(source, Path) else list(source)
    models.install()  # every session moto and the functions start parses botocore's models once, for the process
    moto_responses.install()  # moto answers without the work it repeats for every request
    with ExitStack() as stack:
        calls, concurrency = _emulating(stack, clock, bedrock, passthrough_urls)
        account = boto3.client("sts", region_name=region).get_caller_identity()["Account"]
        cloud = Cloud(region=region, account=str(account))
        cloud.registry.guardrails = bedrock.guardrails  # the stub screens calls with the guardrails deployed
        log = stack.enter_context(delivering(cloud))
        stack.enter_context(asynchronous_invocations(cloud))
        if before_deploy is not None:
            before_deploy(cloud)
        exports: dict[str, Any] = {}
        outputs: dict[str, dict[str, Any]] = {}
        deployed = [
            deploy_stack(cloud, t, exports, parameters=(parameters or {}).get(t.stack_name), stack_outputs=outputs)
            for t in templates
        ]
        guard = Guard(Authority.of(region, str(account), deployed, clock))
        if strict:
            refused = deployment.problems(guard, deployed)
            if refused:
                raise DeploymentError("AWS would refuse to create:\n  " + "\n  ".join(refused))
            cloud.guard = guard
            stack.enter_context(guard.installed())
            stack.enter_context(sns.deliveries_authorized(cloud))
            stack.enter_context(firehose.deliveries_authorized(cloud))
        embedded = EmbeddedStage(cloud, deployed, clock, calls, log, bedrock, guard, concurrency)
        for router in embedded.websocket_apis.values():
            stack.enter_context(router.management_api())
        # First on the way out: stop what still runs (a handoff watching a quiet agent waits for
        # minutes), then refuse new invocations and let those in flight return (a stopped
        # workflow's task may still be running), so no thread calls AWS after moto's mock is gone.
        stack.callback(concurrency.close)
        stack.callback(_stop_running_executions, embedded)
        yield embedded


def _emulating(
    stack: ExitStack, clock: Clock, bedrock: BedrockStub, passthrough_urls: Sequence[str]
) -> tuple[Invocations, Concurrency]:
    """Start moto, with the stage's layers over it, for ``stack``'s duration: the functions' calls
    (the Lambda bridge's record) and the concurrency in force."""
    config = MOTO_CONFIG
    if passthrough_urls:
        passthrough = {"urls": list(passthrough_urls), "services": []}
        config = {**MOTO_CONFIG, "core": {"mock_credentials": True, "passthrough": passthrough}}
    stack.enter_context(mock_aws(config=config))
    stack.enter_context(moto_gaps.patched())
    stack.enter_context(kms.key_pairs_on_use())
    stack.enter_context(atomic_requests())
    calls = stack.enter_context(in_process())
    concurrency = stack.enter_context(Concurrency().installed())
    stack.enter_context(payloads.enforced())
    stack.enter_context(clock.installed())
    stack.enter_context(stepfunctions.timers_on(clock))
    stack.enter_context(stepfunctions.definitions_parsed_once())
    stack.enter_context(bedrock.installed())
    stack.enter_context(stepfunctions.task_clients_reused())  # after the stub: its clients are the stub's
    stack.enter_context(jwks_transport())
    stack.enter_context(auth_flows_enforced())
    return calls, concurrency


def _stop_running_executions(stage: EmbeddedStage) -> None:
    stepfunctions.stop_running(stage.client("stepfunctions"), stage.state_machine_arns())


def dump(value: Any) -> str:
    """Compact JSON for demo output."""
    return json.dumps(value, default=str, separators=(",", ":"))[:300]
