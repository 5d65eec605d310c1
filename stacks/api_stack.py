"""ApiStack: the REST API and the WebSocket chat API, and the stage's dashboard.

The stack composes: the builders in ``stacks/apis/`` create each part in this stack, with the
construct ids the parts always had.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from constructs_lib import OpsDashboard, SecureWebSocketApi, ServiceAlarms
from constructs_lib.rest_api import HardenedRestApi
from constructs_lib.sfn_start_integration import StepFunctionsStartExecution
from constructs_lib.web_acl import RegionalWebAcl
from stacks.apis.dashboard import build_api_alarms, build_dashboard
from stacks.apis.rest import build_rest_api
from stacks.apis.websocket import build_websocket_api
from stacks.config import StageConfig
from stacks.events_stack import EventsStack
from stacks.functions import stage_function
from stacks.orchestration_stack import OrchestrationStack
from stacks.storage_stack import StorageStack
from stacks.workflows import OnboardingWorkflow


class ApiStack(Stack):
    """The client-facing APIs. Receives everything it fronts."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        storage: StorageStack,
        events: EventsStack,
        orchestration: OrchestrationStack,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.config = config
        # Every function's log group is encrypted with the Storage key, as the workflows' are.
        self._log_key = storage.key
        # First the REST API: the WebSocket part wires the agent routes' function it makes.
        rest = build_rest_api(
            self, config=config, storage=storage, orchestration=orchestration, function=self._function
        )
        self.rest: HardenedRestApi = rest.rest
        self.rest_api: apigw.RestApi = rest.rest.api
        self.rest_authorizer_function: lambda_.Function = rest.rest_authorizer_function
        self.session_function: lambda_.Function = rest.session_function
        self.start_integrations: dict[str, StepFunctionsStartExecution] = rest.start_integrations
        self.agent_function: lambda_.Function = rest.agent_function
        self.registry_function: lambda_.Function = rest.registry_function
        if rest.web_acl is not None:
            self.web_acl: RegionalWebAcl = rest.web_acl

        chat = build_websocket_api(
            self,
            config=config,
            storage=storage,
            events=events,
            agent_function=rest.agent_function,
            function=self._function,
        )
        self.chat_api: SecureWebSocketApi = chat.chat_api
        self.websocket_api: apigwv2.WebSocketApi = chat.websocket_api
        self.websocket_stage: apigwv2.WebSocketStage = chat.websocket_stage
        self.onboarding_workflow: OnboardingWorkflow = chat.onboarding_workflow
        self.message_function: lambda_.Function = chat.message_function
        self.customer_notifier: lambda_.IFunction = chat.customer_notifier
        # A customer who leaves while the handoff waits for an agent ends that wait (lambdas/ws/disconnect.py).
        iam.Grant.add_to_principal(
            grantee=chat.disconnect_function,
            actions=["states:SendTaskFailure"],
            resource_arns=[orchestration.handoff_state_machine.state_machine_arn],
        )

        self.alarms: ServiceAlarms = build_api_alarms(
            self, config=config, storage=storage, rest_api=self.rest_api, chat=chat
        )
        self.dashboard: OpsDashboard = build_dashboard(
            self,
            config=config,
            storage=storage,
            events=events,
            orchestration=orchestration,
            alarms=self.alarms,
            rest_api=self.rest_api,
            chat=chat,
        )

    def _function(
        self, construct_id: str, handler: str, environment: dict[str, str], **options: Any
    ) -> lambda_.Function:
        """A function of this stack, built the app's one way; its service name is ``mangaassist-<id>``.

        Its log group is encrypted with the Storage key, as every function's of the stage.
        """
        return stage_function(
            self,
            construct_id,
            self.config,
            handler=handler,
            environment=environment,
            service_name=f"mangaassist-{construct_id}",
            log_encryption_key=self._log_key,
            **options,
        ).function
