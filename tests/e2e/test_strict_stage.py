"""The strict embedded stage refuses what AWS refuses: grants deleted from the synthesized templates break the story.

Each test loads the story's synthesized stage, deletes one grant from its templates (a function's
Bedrock permission, a queue key's statement for SNS, a Step Functions task permission of a role
or of the workflow, API Gateway's Lambda permission), deploys the result and runs the story: it
must fail at the first step that needs the grant, naming the refused action.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from embedded import embedded_stage
from embedded.cloudformation.assembly import StackTemplate, load_assembly
from embedded.synth import StageAssembly
from local.story import StoryError, run_story
from local.story.stage import story_config

pytestmark = pytest.mark.slow


def _templates(synthesized: StageAssembly) -> list[StackTemplate]:
    return load_assembly(synthesized.assembly_dir)


def _resources(templates: list[StackTemplate], resource_type: str) -> list[tuple[StackTemplate, str, dict[str, Any]]]:
    return [(t, lid, r) for t in templates for lid, r in t.resources.items() if r["Type"] == resource_type]


def _role_of(templates: list[StackTemplate], handler: str) -> str:
    (role,) = [
        r["Properties"]["Role"]["Fn::GetAtt"][0]
        for _, _, r in _resources(templates, "AWS::Lambda::Function")
        if r["Properties"].get("Handler") == handler
    ]
    return str(role)


def _drop_actions(templates: list[StackTemplate], role: str, doomed: set[str]) -> None:
    """Remove ``doomed`` actions from every identity policy statement of ``role`` (fails if none was there)."""
    removed = 0
    for _, _, policy in _resources(templates, "AWS::IAM::Policy"):
        if {"Ref": role} not in policy["Properties"].get("Roles", []):
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            kept = [a for a in actions if a not in doomed]
            removed += len(actions) - len(kept)
            statement["Action"] = kept or ["none:Nothing"]
    assert removed, f"role {role} had none of {doomed} to remove"


def _story_fails(templates: list[StackTemplate], *needles: str) -> StoryError:
    with embedded_stage(templates) as stage, pytest.raises(StoryError) as failure:
        run_story(stage, story_config())
    message = str(failure.value)
    assert "AWS would refuse" in message, message
    for needle in needles:
        assert needle in message, message
    return failure.value


def _mutated(synthesized: StageAssembly, change: Callable[[list[StackTemplate]], None]) -> list[StackTemplate]:
    templates = _templates(synthesized)
    change(templates)
    return templates


def test_without_the_chat_functions_bedrock_grant_the_first_chat_is_refused(synthesized: StageAssembly) -> None:
    def change(templates: list[StackTemplate]) -> None:
        role = _role_of(templates, "lambdas.ws.message.handler")
        _drop_actions(templates, role, {"bedrock:InvokeModelWithResponseStream"})

    error = _story_fails(_mutated(synthesized, change), "bedrock:InvokeModelWithResponseStream", "AccessDenied")
    assert str(error).startswith("step chat:")


def test_without_the_queue_keys_statements_for_sns_no_handoff_reaches_its_queues(
    synthesized: StageAssembly,
) -> None:
    def change(templates: list[StackTemplate]) -> None:
        for _, lid, key in _resources(templates, "AWS::KMS::Key"):
            if lid.startswith("QueuesKey"):
                statements = key["Properties"]["KeyPolicy"]["Statement"]
                kept = [s for s in statements if s.get("Principal") != {"Service": "sns.amazonaws.com"}]
                assert len(kept) < len(statements)
                key["Properties"]["KeyPolicy"]["Statement"] = kept

    _story_fails(_mutated(synthesized, change), "sns.amazonaws.com", "kms:GenerateDataKey")


def test_without_the_agent_routes_task_token_grant_an_agents_accept_is_refused(synthesized: StageAssembly) -> None:
    def change(templates: list[StackTemplate]) -> None:
        _drop_actions(templates, _role_of(templates, "lambdas.api.agent.handler"), {"states:SendTaskSuccess"})

    _story_fails(_mutated(synthesized, change), "states:SendTaskSuccess")


def test_without_the_handoff_workflows_queue_permission_no_agent_is_ever_asked(synthesized: StageAssembly) -> None:
    def change(templates: list[StackTemplate]) -> None:
        (machine,) = [
            r for _, lid, r in _resources(templates, "AWS::StepFunctions::StateMachine") if lid.startswith("Handoff")
        ]
        _drop_actions(templates, str(machine["Properties"]["RoleArn"]["Fn::GetAtt"][0]), {"sqs:SendMessage"})

    _story_fails(_mutated(synthesized, change), "sqs:SendMessage", "state machine")


def test_without_api_gateways_permission_on_the_session_function_creating_a_session_fails(
    synthesized: StageAssembly,
) -> None:
    def change(templates: list[StackTemplate]) -> None:
        for template, lid, _ in _resources(templates, "AWS::Lambda::Permission"):
            if lid.startswith("RestApisessionsPOST"):
                del template.resources[lid]
                return
        raise AssertionError("no Lambda permission for POST /sessions")

    error = _story_fails(_mutated(synthesized, change), "lambda:InvokeFunction", "apigateway.amazonaws.com")
    assert str(error).startswith("step create_session:")
