"""Stage settings reach every function one way, and the Bedrock grant fits the configured model id."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from embedded.synth import PARTS, SynthesizedStage, stage_config, synthesize
from lambdas.shared.settings import STAGE_VARIABLES
from stacks.config import with_overrides
from stacks.functions import STAGE_VARIABLE_NAMES, grant_invoke_model, grant_stage_models, stage_environment
from stacks.guardrail_config import GuardrailConfig

#: Functions a library construct builds with its own runtime, not the app's stage functions: the
#: approval gate's writes only review records, which expire after the stage's review_ttl_days
#: (passed as a prop), not a session's TTL.
OWN_RUNTIME = ("Orchestration/ExportApproval",)

#: Set only on a stage that names a guardrail.
GUARDRAIL_VARIABLES = frozenset({"BEDROCK_GUARDRAIL_ID", "BEDROCK_GUARDRAIL_VERSION"})

#: Actions that let a role create or change items (TransactWriteItems is checked per item action).
TABLE_WRITES = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:BatchWriteItem", "dynamodb:TransactWriteItems"}


def _actions(statement: dict[str, Any]) -> set[str]:
    value = statement["Action"]
    return {value} if isinstance(value, str) else set(value)


def _writes_the_sessions_table(statement: dict[str, Any]) -> bool:
    """An Allow statement with a write action on the sessions table (same or another stack's reference)."""
    if statement["Effect"] != "Allow" or not _actions(statement) & TABLE_WRITES:
        return False
    return "SessionsTable" in json.dumps(statement["Resource"])


def _functions(stage: SynthesizedStage) -> Iterator[tuple[str, str, dict[str, Any], set[str]]]:
    """(part, logical id, properties, ids of the policies on its role) for every Lambda function."""
    for part in PARTS:
        resources = stage.templates[part]["Resources"]
        policies_by_role: dict[str, set[str]] = {}
        for lid, res in resources.items():
            if res["Type"] == "AWS::IAM::Policy":
                for role in res["Properties"].get("Roles", []):
                    if isinstance(role, dict) and "Ref" in role:
                        policies_by_role.setdefault(role["Ref"], set()).add(lid)
        for lid, res in resources.items():
            if res["Type"] == "AWS::Lambda::Function":
                role = res["Properties"]["Role"]["Fn::GetAtt"][0]
                yield part, lid, res["Properties"], policies_by_role.get(role, set())


def _table_writers(stage: SynthesizedStage) -> dict[str, dict[str, Any]]:
    """``part/logical id`` -> properties of every function whose role may write the sessions table."""
    writers = {}
    for part, lid, properties, policies in _functions(stage):
        resources = stage.templates[part]["Resources"]
        statements = [s for p in policies for s in resources[p]["Properties"]["PolicyDocument"]["Statement"]]
        if any(_writes_the_sessions_table(s) for s in statements):
            writers[f"{part}/{lid}"] = properties
    return writers


def test_every_function_that_writes_the_table_keeps_the_stages_session_ttl(
    dev: SynthesizedStage, prod: SynthesizedStage
) -> None:
    # Given the stages' TTLs (prod keeps sessions 72 h, dev 24 h)
    assert (dev.stage.config.session_ttl_hours, prod.stage.config.session_ttl_hours) == (24, 72)
    for stage in (dev, prod):
        # When the writers are found from the template's IAM policies
        writers = _table_writers(stage)
        # Then there are many (the notifier, summaries, dashboard, APIs, workflows) and each has the TTL
        assert len(writers) >= 15, sorted(writers)
        assert any("CustomerNotifier" in name for name in writers)
        assert any("SummaryGenerator" in name for name in writers)
        assert any("AgentDashboardUpdater" in name for name in writers)
        assert any(name.startswith(OWN_RUNTIME) for name in writers)
        wrong = {
            name: props.get("Environment", {}).get("Variables", {}).get("SESSION_TTL_HOURS")
            for name, props in writers.items()
            if not name.startswith(OWN_RUNTIME)
            and props.get("Environment", {}).get("Variables", {}).get("SESSION_TTL_HOURS")
            != str(stage.stage.config.session_ttl_hours)
        }
        assert wrong == {}, f"{stage.stage.config.name}: writers without the stage's TTL"


def test_every_function_gets_every_stage_variable_from_the_config(any_stage: SynthesizedStage) -> None:
    expected = stage_environment(any_stage.stage.config)
    assert set(expected) == STAGE_VARIABLE_NAMES - GUARDRAIL_VARIABLES  # this stage has a model, no guardrail
    for part, lid, properties, _ in _functions(any_stage):
        variables = properties.get("Environment", {}).get("Variables", {})
        if f"{part}/{lid}".startswith(OWN_RUNTIME) or not properties["Handler"].startswith("lambdas."):
            continue  # a library construct's own runtime, or CDK's provider functions
        assert {k: variables.get(k) for k in expected} == expected, f"{part}/{lid}"


def test_the_deploy_side_sets_exactly_the_variables_the_lambda_side_reads() -> None:
    guarded = with_overrides(
        stage_config("prod"),
        bedrock_guardrail_id="gr0abc123",
        bedrock_guardrail_version="2",
        guardrail=GuardrailConfig(create=False),
    )
    assert set(stage_environment(guarded)) == set(STAGE_VARIABLES)
    assert {k: stage_environment(guarded)[k] for k in GUARDRAIL_VARIABLES} == {
        "BEDROCK_GUARDRAIL_ID": "gr0abc123",
        "BEDROCK_GUARDRAIL_VERSION": "2",
    }


def test_stage_environment_leaves_the_model_out_when_the_stage_has_none() -> None:
    config = with_overrides(stage_config("dev"), bedrock_model_id=None, session_ttl_hours=48)
    environment = stage_environment(config)
    assert "BEDROCK_MODEL_ID" not in environment
    assert not GUARDRAIL_VARIABLES & set(environment)
    assert environment["SESSION_TTL_HOURS"] == "48"
    assert environment["CORS_ALLOWED_ORIGINS"] == "http://localhost:3000"


# ------------------------------------------------------------------ Bedrock grant


def _bedrock_statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        s
        for res in template["Resources"].values()
        if res["Type"] == "AWS::IAM::Policy"
        for s in res["Properties"]["PolicyDocument"]["Statement"]
        if any(a.startswith("bedrock:") for a in _actions(s))
    ]


def _granted(model_id: str, **options: Any) -> tuple[list[str], list[str]]:
    """The actions and resources granted (one statement per action set), in template order."""
    stack = Stack(App(), "Probe", env={"account": "111111111111", "region": "eu-west-1"})
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    grant_invoke_model(role, model_id, **options)
    actions: list[str] = []
    resources: list[str] = []
    for statement in _bedrock_statements(Template.from_stack(stack).to_json()):
        listed = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        actions += sorted(_actions(statement))
        resources += [json.dumps(r) for r in listed]
    return actions, resources


def test_a_streaming_caller_may_stream_and_nothing_else() -> None:
    actions, resources = _granted("anthropic.claude-3-haiku-20240307-v1:0", streaming=True)
    assert actions == ["bedrock:InvokeModelWithResponseStream"]
    assert resources == [
        '{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, '
        '":bedrock:eu-west-1::foundation-model/anthropic.claude-3-haiku-20240307-v1:0"]]}'
    ]


def test_a_guardrail_adds_apply_guardrail_on_that_guardrail_only() -> None:
    actions, resources = _granted("anthropic.claude-3-haiku-20240307-v1:0", streaming=True, guardrail_id="gr0abc123")
    assert actions == ["bedrock:InvokeModelWithResponseStream", "bedrock:ApplyGuardrail"]
    assert resources[1] == (
        '{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":bedrock:eu-west-1:111111111111:guardrail/gr0abc123"]]}'
    )
    arn = "arn:aws:bedrock:us-east-1:222222222222:guardrail/gr0shared1"
    actions, resources = _granted("anthropic.claude-3-haiku-20240307-v1:0", guardrail_id=arn)
    assert actions == ["bedrock:InvokeModel", "bedrock:ApplyGuardrail"]
    assert resources[1] == json.dumps(arn)


def test_a_foundation_model_id_grants_that_model_in_the_stacks_region() -> None:
    actions, resources = _granted("anthropic.claude-3-haiku-20240307-v1:0")
    assert actions == ["bedrock:InvokeModel"]
    assert resources == [
        '{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, '
        '":bedrock:eu-west-1::foundation-model/anthropic.claude-3-haiku-20240307-v1:0"]]}'
    ]


@pytest.mark.parametrize("prefix", ["us.", "eu.", "apac.", "jp.", "au.", "global."])
def test_an_inference_profile_id_grants_the_profile_and_its_model_in_every_region(prefix: str) -> None:
    actions, resources = _granted(f"{prefix}anthropic.claude-3-haiku-20240307-v1:0")
    assert actions == ["bedrock:InvokeModel"]
    assert resources == [
        '{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":bedrock:eu-west-1:111111111111:'
        f'inference-profile/{prefix}anthropic.claude-3-haiku-20240307-v1:0"]]}}',
        '{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, '
        '":bedrock:*::foundation-model/anthropic.claude-3-haiku-20240307-v1:0"]]}',
    ]


@pytest.fixture(scope="module")
def profile_stage() -> SynthesizedStage:
    """dev with a cross-region inference profile as its model, and a guardrail on the chat's replies."""
    config = with_overrides(
        stage_config("dev"),
        name="profile",
        bedrock_model_id="us.anthropic.claude-3-haiku-v1:0",
        bedrock_guardrail_id="gr0abc123",
        bedrock_guardrail_version="DRAFT",
        guardrail=GuardrailConfig(create=False),  # an existing guardrail instead of the stage's own
    )
    return synthesize(config)["profile"]


@pytest.mark.slow
def test_chat_rewind_and_summary_functions_may_invoke_an_inference_profile(profile_stage: SynthesizedStage) -> None:
    # Api: the chat and the session function (a rewound turn is answered over REST); Events: the summary
    for part, count in (("Api", 2), ("Events", 1)):
        template = profile_stage.templates[part]
        statements = [s for s in _bedrock_statements(template) if "bedrock:ApplyGuardrail" not in _actions(s)]
        assert len(statements) == count, part
        for statement in statements:
            text = json.dumps(statement["Resource"])
            assert "inference-profile/us.anthropic.claude-3-haiku-v1:0" in text, part
            assert ":bedrock:*::foundation-model/anthropic.claude-3-haiku-v1:0" in text, part


@pytest.mark.slow
def test_only_the_functions_that_call_the_model_may_apply_the_guardrail_and_every_function_is_told_of_it(
    profile_stage: SynthesizedStage,
) -> None:
    applying = {
        part: [s for s in _bedrock_statements(profile_stage.templates[part]) if "bedrock:ApplyGuardrail" in _actions(s)]
        for part in PARTS
    }
    answering = applying.pop("Api")  # the chat and the session function (a rewound turn)
    summarizing = applying.pop("Events")  # the summaries, written from the same turns
    assert (len(answering), len(summarizing)) == (2, 1)
    for statement in answering + summarizing:
        assert _actions(statement) == {"bedrock:ApplyGuardrail"}
        assert json.dumps(statement["Resource"]).endswith(
            ':bedrock:", {"Ref": "AWS::Region"}, ":", {"Ref": "AWS::AccountId"}, ":guardrail/gr0abc123"]]}'
        )
    assert all(found == [] for found in applying.values())
    for part, lid, properties, _ in _functions(profile_stage):
        variables = properties.get("Environment", {}).get("Variables", {})
        if properties["Handler"].startswith("lambdas."):
            assert variables.get("BEDROCK_GUARDRAIL_VERSION") == "DRAFT", f"{part}/{lid}"


def test_stage_models_grants_the_model_and_the_fallback_and_nothing_without_a_model() -> None:
    # Given a stage whose model and fallback are both cross-region profiles
    stack = Stack(App(), "Probe", env={"account": "111111111111", "region": "eu-west-1"})
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    echo = iam.Role(stack, "Echo", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    # When its grants are made, and those of the same stage without a model
    grant_stage_models(role, stage_config("dev"))
    grant_stage_models(echo, with_overrides(stage_config("dev"), bedrock_model_id=None))
    # Then both models' profiles and foundation models are granted, once each, and nothing else
    statements = _bedrock_statements(Template.from_stack(stack).to_json())
    assert {a for s in statements for a in _actions(s)} == {"bedrock:InvokeModel"}
    granted = sorted(json.dumps(r) for s in statements for r in s["Resource"])
    assert len(granted) == 4
    assert sum("inference-profile/global.anthropic.claude-sonnet-4-6" in r for r in granted) == 1
    assert sum(":bedrock:*::foundation-model/anthropic.claude-sonnet-4-6" in r for r in granted) == 1
    assert sum("inference-profile/global.anthropic.claude-haiku-4-5-20251001-v1:0" in r for r in granted) == 1
    policies = Template.from_stack(stack).find_resources("AWS::IAM::Policy")
    assert all("Echo" not in json.dumps(p["Properties"]["Roles"]) for p in policies.values())


def test_stage_environment_names_the_fallback_and_the_model_call_cap() -> None:
    environment = stage_environment(stage_config("prod"))
    assert environment["BEDROCK_FALLBACK_MODEL_ID"] == "global.anthropic.claude-sonnet-4-6"
    assert environment["MODEL_CALLS_PER_SECOND"] == "500"
    assert environment["MODEL_CALL_BUCKETS"] == "2"
    assert "BEDROCK_FALLBACK_MODEL_ID" not in stage_environment(
        with_overrides(stage_config("dev"), bedrock_model_id=None)
    )
