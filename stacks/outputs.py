"""The stage's stack outputs: what a deployer, an operator and a client read after ``cdk deploy``.

Each output's logical id is its name (a construct directly under its stack keeps its id), so the
names below are stable across releases: scripts and CI may read them with
``aws cloudformation describe-stacks --stack-name MangaAssist-<stage>-<Part>``. docs/deploy.md
lists them; ``tests/infra/test_outputs.py`` holds the names to this table. Outputs carry no
export names: another app that needs a value reads it, instead of pinning our stacks with an
import that would block their updates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from aws_cdk import CfnOutput, Stack

if TYPE_CHECKING:
    from stacks.stage import MangaAssistStage


@dataclass(frozen=True)
class Output:
    """One documented output: the stack part that holds it and what it is for."""

    part: str
    description: str


#: Every output of a stage, by name. The value comes from :func:`add_stage_outputs`.
OUTPUTS: Final[Mapping[str, Output]] = {
    "RestApiBaseUrl": Output("Api", "REST API base URL (the stage's invoke URL, ending in /)"),
    "WebSocketUrl": Output("Api", "WebSocket chat URL for clients (wss://...; pass ?token=<ID token>)"),
    "WebSocketCallbackUrl": Output("Api", "WebSocket management endpoint (https://...) for PostToConnection"),
    "DashboardUrl": Output("Api", "CloudWatch dashboard of the stage, in the console"),
    "HandoffStateMachineArn": Output("Orchestration", "Human handoff workflow"),
    "CleanupStateMachineArn": Output("Orchestration", "Session cleanup workflow"),
    "ExportStateMachineArn": Output("Orchestration", "Data export workflow (behind the approval gate)"),
    "OpsTopicArn": Output("Storage", "Alarm notifications topic (subscribe on-call here)"),
    "TableName": Output("Storage", "The single DynamoDB table"),
    "ArchiveBucketName": Output("Storage", "Session archives and table exports"),
    "TokenIssuerUrl": Output("Storage", "Issuer of the tokens both APIs accept (iss; its JWKS is below it)"),
    "UserPoolId": Output("Storage", "Cognito user pool of the stage's users (absent with an external OIDC issuer)"),
    "UserPoolClientId": Output(
        "Storage", "App client id for web and mobile sign-in (absent with an external OIDC issuer)"
    ),
}

#: Outputs only a stage with its own Cognito user pool has.
COGNITO_OUTPUTS: Final = frozenset({"UserPoolId", "UserPoolClientId"})


def add_stage_outputs(stage: MangaAssistStage) -> None:
    """Add every output of :data:`OUTPUTS` to the stack that holds its value."""
    api, orchestration, storage = stage.api, stage.orchestration, stage.storage
    websocket_stage = api.websocket_stage
    region = Stack.of(api).region
    values: dict[str, tuple[Stack, str]] = {
        "RestApiBaseUrl": (api, api.rest_api.url),
        "WebSocketUrl": (api, websocket_stage.url),
        "WebSocketCallbackUrl": (api, websocket_stage.callback_url),
        "DashboardUrl": (
            api,
            f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}"
            f"#dashboards:name={api.dashboard.dashboard.dashboard_name}",
        ),
        "HandoffStateMachineArn": (orchestration, orchestration.handoff_state_machine.state_machine_arn),
        "CleanupStateMachineArn": (orchestration, orchestration.cleanup_state_machine.state_machine_arn),
        "ExportStateMachineArn": (orchestration, orchestration.export_state_machine.state_machine_arn),
        "OpsTopicArn": (storage, storage.ops_topic.topic_arn),
        "TableName": (storage, storage.table.table_name),
        "ArchiveBucketName": (storage, storage.archive.bucket.bucket_name),
    }
    users = storage.users
    if users is not None:
        values["TokenIssuerUrl"] = (storage, users.issuer_url)
        values["UserPoolId"] = (storage, users.user_pool.user_pool_id)
        values["UserPoolClientId"] = (storage, users.client.user_pool_client_id)
    else:
        values["TokenIssuerUrl"] = (storage, str(stage.config.identity.issuer))
    expected = set(OUTPUTS) - (set() if users is not None else COGNITO_OUTPUTS)
    missing = expected ^ set(values)
    if missing:  # the table and the values are edited together
        raise ValueError(f"outputs without a value or a description: {sorted(missing)}")
    for name, (stack, value) in values.items():
        CfnOutput(stack, name, value=value, description=OUTPUTS[name].description)
