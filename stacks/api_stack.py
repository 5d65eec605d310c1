"""ApiStack: the REST API and the WebSocket chat API, and the stage's dashboard.

The stack composes the app's API constructs (``stacks/apis/``) and wires them to each other and to
the workflows.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from constructs_lib import SecureWebSocketApi, ServiceAlarms
from constructs_lib.rest_api import HardenedRestApi
from constructs_lib.sfn_start_integration import StepFunctionsStartExecution
from constructs_lib.web_acl import RegionalWebAcl
from stacks.apis.dashboard import StageDashboard
from stacks.apis.rest import MangaAssistRestApi
from stacks.apis.websocket import ChatApi
from stacks.config import StageConfig
from stacks.events_stack import EventsStack
from stacks.functions import StageFunctions
from stacks.operations import watch_stack
from stacks.orchestration_stack import OrchestrationStack, rest_api_url_parameter
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
        # Every function's log group is encrypted with the Storage key, as every function's of the stage.
        functions = StageFunctions(config, log_encryption_key=storage.key)
        self.rest_parts = MangaAssistRestApi(
            self, "RestApi", config=config, storage=storage, orchestration=orchestration, functions=functions
        )
        # The approval gate (Orchestration, deployed before this stack) reads the URL from here.
        ssm.StringParameter(
            self,
            "RestApiUrl",
            parameter_name=rest_api_url_parameter(config.name),
            string_value=self.rest_parts.url,
            description="Base URL of the REST API (the approval gate builds review links from it)",
        )
        self.chat = ChatApi(self, "ChatApi", config=config, storage=storage, events=events, functions=functions)
        self.chat.grant_push(self.rest_parts.agent_function)
        # A customer who leaves while the handoff waits for an agent ends that wait (lambdas/ws/disconnect.py).
        orchestration.handoff.grant_task_failure(self.chat.disconnect_function)

        self.alarms: ServiceAlarms = watch_stack(
            self,
            topic=storage.ops_topic,
            prefix=f"MangaAssist-{config.name}-Api",
            deliberate_errors=self.rest_parts.deliberate_errors,
        )
        self.rest_parts.watch(self.alarms)
        self.chat.watch(self.alarms)
        self.dashboard = StageDashboard(
            self,
            "Dashboard",
            name=f"MangaAssist-{config.name}",
            alarms=[*storage.alarms.alarms, *events.alarms.alarms, *orchestration.alarms.alarms, *self.alarms.alarms],
            storage=storage,
            events=events,
            orchestration=orchestration,
            rest=self.rest_parts,
            chat=self.chat,
        )

        self.rest: HardenedRestApi = self.rest_parts.rest
        self.rest_api: apigw.RestApi = self.rest_parts.api
        self.rest_authorizer_function: lambda_.Function = self.rest_parts.authorizer_function
        self.session_function: lambda_.Function = self.rest_parts.session_function
        self.start_integrations: dict[str, StepFunctionsStartExecution] = self.rest_parts.start_integrations
        self.agent_function: lambda_.Function = self.rest_parts.agent_function
        self.registry_function: lambda_.Function = self.rest_parts.registry_function
        if self.rest_parts.web_acl is not None:
            self.web_acl: RegionalWebAcl = self.rest_parts.web_acl
        self.chat_api: SecureWebSocketApi = self.chat.chat_api
        self.websocket_api: apigwv2.WebSocketApi = self.chat.websocket_api
        self.websocket_stage: apigwv2.WebSocketStage = self.chat.websocket_stage
        self.onboarding_workflow: OnboardingWorkflow = self.chat.onboarding_workflow
        self.message_function: lambda_.Function = self.chat.message_function
        self.customer_notifier: lambda_.IFunction = self.chat.customer_notifier
