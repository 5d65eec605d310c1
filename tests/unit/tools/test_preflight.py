"""``make preflight``: each check's OK, WARN and BLOCKER on real botocore clients answered by Stubber.

No request leaves the process: every client is boto3's own, with fake credentials, and a Stubber
answers each expected call (and fails the test on an unexpected one).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from embedded.synth import stage_config
from stacks.config import with_overrides
from stacks.search_config import AnalyticsSearchConfig
from tools import preflight
from tools.preflight import Finding

REGION = "eu-west-1"
ACCOUNT = "123456789012"
PROFILE = "global.anthropic.claude-haiku-4-5-20251001-v1:0"
MODEL = "anthropic.claude-haiku-4-5-20251001-v1:0"


def _client(service: str) -> Any:
    session = boto3.session.Session(
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return session.client(service)


@pytest.fixture
def stubbed() -> Iterator[dict[str, tuple[Any, Stubber]]]:
    """One stubbed client per service the preflight reads; every queued answer must be used."""
    clients = {}
    for service in ("sts", "bedrock", "lambda", "cloudformation", "sesv2", "ssm"):
        client = _client(service)
        clients[service] = (client, Stubber(client))
    for _, stubber in clients.values():
        stubber.activate()
    yield clients
    for _, stubber in clients.values():
        stubber.assert_no_pending_responses()
        stubber.deactivate()


def _model(model_id: str, status: str = "ACTIVE", **lifecycle: Any) -> dict[str, Any]:
    return {
        "modelDetails": {
            "modelArn": f"arn:aws:bedrock:{REGION}::foundation-model/{model_id}",
            "modelId": model_id,
            "modelLifecycle": {"status": status, **lifecycle},
        }
    }


def _available(model_id: str, **overrides: str) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "modelId": model_id,
        "agreementAvailability": {"status": overrides.pop("agreement", "AVAILABLE")},
        "authorizationStatus": "AUTHORIZED",
        "entitlementAvailability": "AVAILABLE",
        "regionAvailability": "AVAILABLE",
    }
    return {**answer, **overrides}


def _profile(*regions: str) -> dict[str, Any]:
    return {
        "inferenceProfileName": "Global Claude Haiku 4.5",
        "inferenceProfileArn": f"arn:aws:bedrock:{REGION}:{ACCOUNT}:inference-profile/{PROFILE}",
        "inferenceProfileId": PROFILE,
        "status": "ACTIVE",
        "type": "SYSTEM_DEFINED",
        "models": [{"modelArn": f"arn:aws:bedrock:{region}::foundation-model/{MODEL}"} for region in regions],
    }


# ------------------------------------------------------------------ the model


def test_an_active_profile_routes_to_its_regions_and_each_model_behind_it_is_checked(
    stubbed: dict[str, tuple[Any, Stubber]],
) -> None:
    bedrock, stub = stubbed["bedrock"]
    stub.add_response(
        "get_inference_profile", _profile("eu-west-1", "us-east-1", ""), {"inferenceProfileIdentifier": PROFILE}
    )
    stub.add_response("get_foundation_model", _model(MODEL), {"modelIdentifier": MODEL})
    stub.add_response("get_foundation_model_availability", _available(MODEL), {"modelId": MODEL})

    findings = preflight.check_model(bedrock, PROFILE)

    assert [(f.check, f.status) for f in findings] == [("model profile", "OK"), ("model", "OK"), ("model access", "OK")]
    assert findings[0].detail == f"{PROFILE}: ACTIVE, routes to eu-west-1, us-east-1"
    assert findings[1].detail == f"{MODEL}: ACTIVE"


def test_a_legacy_model_warns_with_its_end_of_life(stubbed: dict[str, tuple[Any, Stubber]]) -> None:
    bedrock, stub = stubbed["bedrock"]
    end = datetime(2027, 5, 1, tzinfo=UTC)
    stub.add_response("get_foundation_model", _model(MODEL, "LEGACY", endOfLifeTime=end), {"modelIdentifier": MODEL})

    finding = preflight.check_foundation_model(bedrock, MODEL)

    assert (finding.status, finding.detail) == ("WARN", f"{MODEL}: LEGACY, end of life 2027-05-01")
    assert "Active model" in finding.fix


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("ResourceNotFoundException", "not offered in this region, or past its end of life"),
        ("AccessDeniedException", "access denied"),
    ],
)
def test_a_model_gone_or_denied_blocks(stubbed: dict[str, tuple[Any, Stubber]], code: str, said: str) -> None:
    bedrock, stub = stubbed["bedrock"]
    stub.add_client_error("get_foundation_model", service_error_code=code, http_status_code=404)

    finding = preflight.check_foundation_model(bedrock, "anthropic.claude-3-haiku-20240307-v1:0")

    assert finding.status == "BLOCKER"
    assert finding.detail.startswith(f"anthropic.claude-3-haiku-20240307-v1:0: {said}")


def test_a_profile_the_region_is_not_a_source_of_blocks(stubbed: dict[str, tuple[Any, Stubber]]) -> None:
    bedrock, stub = stubbed["bedrock"]
    stub.add_client_error("get_inference_profile", service_error_code="ResourceNotFoundException", http_status_code=404)

    [finding] = preflight.check_model(bedrock, "us." + MODEL)

    assert finding.status == "BLOCKER"
    assert "list-inference-profiles" in finding.fix


def test_a_plain_model_id_is_checked_without_a_profile_and_missing_access_warns(
    stubbed: dict[str, tuple[Any, Stubber]],
) -> None:
    bedrock, stub = stubbed["bedrock"]
    stub.add_response("get_foundation_model", _model(MODEL), {"modelIdentifier": MODEL})
    stub.add_response(
        "get_foundation_model_availability",
        _available(MODEL, agreement="NOT_AVAILABLE", authorizationStatus="NOT_AUTHORIZED"),
        {"modelId": MODEL},
    )

    model, access = preflight.check_model(bedrock, MODEL)

    assert model.status == "OK"
    assert access.status == "WARN"
    assert "agreement NOT_AVAILABLE, authorization NOT_AUTHORIZED" in access.detail
    assert "aws-marketplace:Subscribe" in access.fix


def test_the_echo_responder_needs_no_model(stubbed: dict[str, tuple[Any, Stubber]]) -> None:
    [finding] = preflight.check_model(stubbed["bedrock"][0], None)
    assert finding.status == "OK"


# ------------------------------------------------------------------ Lambda concurrency


def _limits(limit: int, unreserved: int) -> dict[str, Any]:
    return {"AccountLimit": {"ConcurrentExecutions": limit, "UnreservedConcurrentExecutions": unreserved}}


@pytest.mark.parametrize(
    ("limit", "unreserved", "deployed", "status"),
    [
        (1000, 1000, False, "OK"),  # 100 reserved + 100 kept unreserved fit
        (1000, 199, False, "BLOCKER"),  # other functions hold too much
        (1000, 199, True, "WARN"),  # the stage's own reservation may be among them
        (10, 10, False, "BLOCKER"),  # a new account's limit of 10 holds no reservation at all
        (199, 199, True, "BLOCKER"),  # never enough, deployed or not
    ],
)
def test_reserved_concurrency_must_leave_the_100_lambda_keeps_unreserved(
    stubbed: dict[str, tuple[Any, Stubber]], limit: int, unreserved: int, deployed: bool, status: str
) -> None:
    lambda_client, stub = stubbed["lambda"]
    stub.add_response("get_account_settings", _limits(limit, unreserved), {})

    finding = preflight.check_concurrency(lambda_client, 100, deployed=deployed)

    assert finding.status == status
    assert "Lambda keeps 100 unreserved, so 200 must be free" in finding.detail


def test_the_stage_reserves_what_its_config_says() -> None:
    assert preflight.reserved_concurrency(stage_config("prod")) == 2000  # 500 messages a second for 4 s
    smaller = dataclasses.replace(
        stage_config("dev").capacity, concurrent_chats=10, reply_p95_seconds=1.4, first_frame_p95_seconds=1
    )
    assert preflight.reserved_concurrency(with_overrides(stage_config("dev"), capacity=smaller)) == 7  # 5/s for 1.4 s


def test_a_stage_is_deployed_when_its_api_stack_exists(stubbed: dict[str, tuple[Any, Stubber]]) -> None:
    cloudformation, stub = stubbed["cloudformation"]
    stack = {"StackName": "MangaAssist-dev-Api", "CreationTime": datetime(2026, 11, 1, tzinfo=UTC)}
    stub.add_response(
        "describe_stacks",
        {"Stacks": [{**stack, "StackStatus": "UPDATE_COMPLETE"}]},
        {"StackName": "MangaAssist-dev-Api"},
    )
    stub.add_client_error("describe_stacks", service_error_code="ValidationError", http_status_code=400)

    assert preflight.stage_deployed(cloudformation, "dev", "Api")
    assert not preflight.stage_deployed(cloudformation, "dev", "Api")


# ------------------------------------------------------------------ SES


SENDER = "notices@mangaassist.com"


def _not_found(stub: Stubber, times: int = 1) -> None:
    for _ in range(times):
        stub.add_client_error("get_email_identity", service_error_code="NotFoundException", http_status_code=404)


def _identity(verified: bool, status: str = "SUCCESS") -> dict[str, Any]:
    return {"IdentityType": "EMAIL_ADDRESS", "VerifiedForSendingStatus": verified, "VerificationStatus": status}


def test_before_the_first_deploy_the_sender_is_created_by_the_stage_and_must_then_be_confirmed(
    stubbed: dict[str, tuple[Any, Stubber]],
) -> None:
    sesv2, stub = stubbed["sesv2"]
    stub.add_client_error(
        "get_email_identity", service_error_code="NotFoundException", expected_params={"EmailIdentity": SENDER}
    )
    stub.add_response("get_email_identity", _identity(True), {"EmailIdentity": "mangaassist.com"})

    finding = preflight.check_ses_identity(sesv2, SENDER, deployed=False)

    assert finding.status == "WARN"
    assert (
        finding.detail
        == f"the deploy creates {SENDER} as an SES identity (unverified); its domain mangaassist.com is verified"
    )
    assert finding.fix.startswith(f"confirm the verification mail SES sends to {SENDER}")


def test_a_sender_that_already_is_an_identity_blocks_the_first_deploy(stubbed: dict[str, tuple[Any, Stubber]]) -> None:
    sesv2, stub = stubbed["sesv2"]
    stub.add_response("get_email_identity", _identity(True), {"EmailIdentity": SENDER})

    finding = preflight.check_ses_identity(sesv2, SENDER, deployed=False)

    assert finding.status == "BLOCKER"
    assert "would fail to create (AlreadyExists)" in finding.detail
    assert f"aws sesv2 delete-email-identity --email-identity {SENDER}" in finding.fix


def test_a_deployed_stages_sender_must_be_verified(stubbed: dict[str, tuple[Any, Stubber]]) -> None:
    sesv2, stub = stubbed["sesv2"]
    stub.add_response("get_email_identity", _identity(True))
    stub.add_response("get_email_identity", _identity(False, "PENDING"))
    _not_found(stub, 2)

    verified = preflight.check_ses_identity(sesv2, SENDER, deployed=True)
    pending = preflight.check_ses_identity(sesv2, SENDER, deployed=True)
    gone = preflight.check_ses_identity(sesv2, SENDER, deployed=True)

    assert (verified.status, verified.detail) == ("OK", f"{SENDER} is verified for sending")
    assert (pending.status, pending.detail) == ("WARN", f"{SENDER} is not verified (PENDING)")
    assert gone.status == "WARN"
    assert "deleted outside CloudFormation" in gone.detail
    assert gone.fix.startswith(f"recreate it: aws sesv2 create-email-identity --email-identity {SENDER}")


def test_the_ses_sandbox_warns_that_recipients_must_be_verified(stubbed: dict[str, tuple[Any, Stubber]]) -> None:
    sesv2, stub = stubbed["sesv2"]
    quota = {"Max24HourSend": 200.0, "MaxSendRate": 1.0, "SentLast24Hours": 0.0}
    stub.add_response("get_account", {"ProductionAccessEnabled": False, "SendingEnabled": True, "SendQuota": quota})
    stub.add_response("get_account", {"ProductionAccessEnabled": True, "SendingEnabled": True, "SendQuota": quota})

    sandbox = preflight.check_ses_account(sesv2)
    production = preflight.check_ses_account(sesv2)

    assert sandbox.status == "WARN"
    assert sandbox.detail == "in the SES sandbox (200 a day, 1 a second): it mails only verified recipients"
    assert "request production access" in sandbox.fix
    assert (production.status, production.detail) == ("OK", "production access (200 a day, 1 a second)")


def test_no_sender_mails_nobody() -> None:
    assert preflight.check_ses_identity(_client("sesv2"), None, deployed=False).status == "OK"


# ------------------------------------------------------------------ CDK bootstrap


def _version(value: str) -> dict[str, Any]:
    return {"Parameter": {"Name": preflight.DEFAULT_BOOTSTRAP_PARAMETER, "Type": "String", "Value": value}}


def test_the_bootstrap_version_must_reach_what_the_stage_needs(stubbed: dict[str, tuple[Any, Stubber]]) -> None:
    ssm, stub = stubbed["ssm"]
    need = preflight.BootstrapNeed(6, preflight.DEFAULT_BOOTSTRAP_PARAMETER, "the assembly")
    stub.add_response("get_parameter", _version("30"), {"Name": "/cdk-bootstrap/hnb659fds/version"})
    stub.add_response("get_parameter", _version("5"))
    stub.add_client_error("get_parameter", service_error_code="ParameterNotFound", http_status_code=400)

    current = preflight.check_bootstrap(ssm, need, ACCOUNT, REGION)
    old = preflight.check_bootstrap(ssm, need, ACCOUNT, REGION)
    missing = preflight.check_bootstrap(ssm, need, ACCOUNT, REGION)

    assert (current.status, current.detail) == ("OK", "version 30; the assembly needs 6 or later")
    assert old.status == missing.status == "BLOCKER"
    assert old.fix.startswith(f"npx cdk bootstrap aws://{ACCOUNT}/{REGION}")
    assert "not bootstrapped" in missing.detail


def test_the_needed_version_comes_from_the_assembly_else_from_the_pinned_cdk(tmp_path: Path) -> None:
    manifest = {
        "artifacts": {
            "Stack": {"properties": {"requiresBootstrapStackVersion": 6, "bootstrapStackVersionSsmParameter": "/p"}},
            "Stack.assets": {"properties": {"requiresBootstrapStackVersion": 21}},
            "report": {"properties": {}},
        }
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))

    assert preflight.bootstrap_need(tmp_path).version == 21
    fallback = preflight.bootstrap_need(None)
    assert (fallback.version, fallback.parameter) == (6, "/cdk-bootstrap/hnb659fds/version")
    assert fallback.source.startswith("aws-cdk-lib 2.")


# ------------------------------------------------------------------ Cognito mail and placeholders


def test_cognitos_default_sender_warns_for_a_production_pool_open_to_sign_up() -> None:
    prod, dev = stage_config("prod"), stage_config("dev")
    closed = with_overrides(prod, identity=dataclasses.replace(prod.identity, self_sign_up=False))

    warned = preflight.check_cognito_mail(prod, "COGNITO_DEFAULT")

    assert warned.status == "WARN"
    assert "at most 50 mails a day" in warned.detail
    assert "EmailConfiguration" in warned.fix
    assert preflight.check_cognito_mail(dev).status == "OK"
    assert preflight.check_cognito_mail(closed).status == "OK"
    assert preflight.check_cognito_mail(prod, "DEVELOPER").status == "OK"


def test_the_pool_sender_is_read_from_the_synthesized_storage_template(tmp_path: Path) -> None:
    pool = {"Type": "AWS::Cognito::UserPool", "Properties": {"UserPoolName": "x"}}
    (tmp_path / "MangaAssistdevStorageAB12.template.json").write_text(json.dumps({"Resources": {"Pool": pool}}))

    assert preflight.pool_mail_sender(tmp_path) == "COGNITO_DEFAULT"
    assert preflight.pool_mail_sender(None) is None


def test_example_domain_settings_warn_in_dev_and_block_in_production() -> None:
    dev = preflight.check_placeholders(stage_config("dev"))
    prod = preflight.check_placeholders(stage_config("prod"))

    assert dev.status == "WARN"
    assert "notice_sender=notices@dev.mangaassist.example" in dev.detail
    assert "example.com" not in dev.detail  # a real reserved domain, safe for dev recipients
    assert prod.status == "BLOCKER"
    assert "cors_allowed_origins=https://app.mangaassist.example" in prod.detail
    assert "reviewer_email=reviewer@dev.mangaassist.example" in dev.detail
    owned = with_overrides(
        stage_config("dev"), notice_sender="notices@mangaassist.com", reviewer_email="reviewer@mangaassist.com"
    )
    assert preflight.check_placeholders(owned).status == "OK"


# ------------------------------------------------------------------ the run, the table, the exit code


def test_credentials_of_another_account_block_before_anything_is_read(stubbed: dict[str, tuple[Any, Stubber]]) -> None:
    stub = stubbed["sts"][1]
    stub.add_response("get_caller_identity", {"Account": "999999999999", "Arn": "arn:aws:iam::999999999999:user/x"})
    pinned = with_overrides(stage_config("dev"), account=ACCOUNT, region=REGION)

    findings = preflight.run(pinned, lambda service: stubbed[service][0], REGION)

    assert [(f.check, f.status) for f in findings] == [("credentials", "BLOCKER")]
    assert f"pins account {ACCOUNT}" in findings[0].detail


def _answer_the_account(
    stubbed: dict[str, tuple[Any, Stubber]],
    *,
    deployed: bool = True,
    lambda_throttled: bool = False,
    bootstrap: str | None = "30",
) -> None:
    """Queue the answers of one run: a healthy account where the stage is deployed, unless told otherwise."""
    stubbed["sts"][1].add_response(
        "get_caller_identity", {"Account": ACCOUNT, "Arn": f"arn:aws:iam::{ACCOUNT}:role/deployer"}
    )
    bedrock = stubbed["bedrock"][1]
    bedrock.add_response("get_inference_profile", _profile(""))
    bedrock.add_response("get_foundation_model", _model(MODEL))
    bedrock.add_response("get_foundation_model_availability", _available(MODEL))
    cloudformation = stubbed["cloudformation"][1]
    for part in ("Api", "Events"):  # the reserved concurrency's stack, then the mail's
        name = f"MangaAssist-dev-{part}"
        if deployed:
            stack = {
                "StackName": name,
                "StackStatus": "CREATE_COMPLETE",
                "CreationTime": datetime(2026, 11, 1, tzinfo=UTC),
            }
            cloudformation.add_response("describe_stacks", {"Stacks": [stack]}, {"StackName": name})
        else:
            cloudformation.add_client_error("describe_stacks", service_error_code="ValidationError")
    if lambda_throttled:
        stubbed["lambda"][1].add_client_error(
            "get_account_settings", service_error_code="TooManyRequestsException", service_message="slow down"
        )
    else:
        stubbed["lambda"][1].add_response("get_account_settings", _limits(1000, 1000))
    ses = stubbed["sesv2"][1]
    if deployed:
        ses.add_response("get_email_identity", _identity(True))
    else:
        _not_found(ses, 2)  # neither the address nor its domain
    quota = {"Max24HourSend": 50000.0, "MaxSendRate": 14.0, "SentLast24Hours": 0.0}
    ses.add_response("get_account", {"ProductionAccessEnabled": True, "SendingEnabled": True, "SendQuota": quota})
    if bootstrap is None:
        stubbed["ssm"][1].add_client_error("get_parameter", service_error_code="ParameterNotFound")
    else:
        stubbed["ssm"][1].add_response("get_parameter", _version(bootstrap))


def _owned_sender() -> Any:
    return with_overrides(
        stage_config("dev"), notice_sender="notices@mangaassist.com", reviewer_email="reviewer@mangaassist.com"
    )


def test_a_healthy_account_gives_one_row_per_check_and_no_blocker(stubbed: dict[str, tuple[Any, Stubber]]) -> None:
    _answer_the_account(stubbed)

    findings = preflight.run(_owned_sender(), lambda service: stubbed[service][0], REGION)

    assert [f.check for f in findings] == [
        "credentials",
        "model profile",
        "model",
        "model access",
        "Lambda concurrency",
        "SES sender",
        "SES account",
        "CDK bootstrap",
        "Cognito mail",
        "placeholders",
    ]
    assert {f.status for f in findings} == {"OK"}
    assert "any commercial region (global)" in findings[1].detail
    assert preflight.exit_code(findings) == 0


def test_an_unexpected_error_of_one_check_is_a_warning_and_the_others_still_run(
    stubbed: dict[str, tuple[Any, Stubber]],
) -> None:
    _answer_the_account(stubbed, lambda_throttled=True)

    findings = preflight.run(_owned_sender(), lambda service: stubbed[service][0], REGION)

    [concurrency] = [f for f in findings if f.check == "Lambda concurrency"]
    assert (concurrency.status, concurrency.detail) == ("WARN", "could not check (TooManyRequestsException: slow down)")
    assert [f.check for f in findings][-3:] == ["CDK bootstrap", "Cognito mail", "placeholders"]


def test_the_table_has_a_column_each_wraps_long_text_and_any_blocker_exits_1() -> None:
    findings = [
        Finding("model", "OK", "ACTIVE"),
        Finding("SES account", "WARN", "in the SES sandbox " * 5, "request production access"),
        Finding("CDK bootstrap", "BLOCKER", "not bootstrapped", "npx cdk bootstrap"),
    ]

    lines = preflight.render(findings).splitlines()

    assert [cell.strip() for cell in lines[0].split(" | ")] == ["check", "status", "detail", "fix"]
    assert set(lines[1]) == {"-", "+"}
    assert lines[2].startswith("model         | OK      | ACTIVE ")
    assert lines[2].endswith(" | -")
    # a detail longer than its column goes on in the next line, under its own column
    assert lines[3].startswith("SES account   | WARN    | in the SES sandbox")
    assert lines[4].startswith("              |         | ")
    assert lines[-1].startswith("CDK bootstrap | BLOCKER | not bootstrapped ")
    assert lines[-1].endswith(" | npx cdk bootstrap")
    assert preflight.exit_code(findings) == 1
    assert preflight.exit_code(findings[:2]) == 0


class _Session:
    """What main needs of a boto3 session: a region and stubbed clients."""

    def __init__(self, clients: dict[str, tuple[Any, Stubber]], region: str | None = REGION) -> None:
        self.clients = clients
        self.region_name = region

    def client(self, service: str, region_name: str) -> Any:
        assert region_name == REGION
        return self.clients[service][0]


def test_main_prints_the_table_and_exits_1_on_a_blocker(
    stubbed: dict[str, tuple[Any, Stubber]], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given dev as cdk.json ships it, never deployed, in an account that was never bootstrapped
    _answer_the_account(stubbed, deployed=False, bootstrap=None)

    code = preflight.main(["--stage", "dev", "--assembly", "/nonexistent"], session=_Session(stubbed))

    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith(f"Preflight of stage dev in {REGION}:\ncheck ")
    rows = {line.split(" | ")[0].strip(): line for line in out.splitlines() if " | " in line}
    assert "| BLOCKER | not bootstrapped (/cdk-bootstrap/hnb659fds/version does not " in rows["CDK bootstrap"]
    assert "| WARN    | the deploy creates notices@dev.mangaassist.example" in rows["SES sender"]
    assert "| WARN    | still on .example:" in rows["placeholders"]
    assert "notice_sender=notices@dev.mangaassist.example" in out
    assert out.rstrip().endswith("1 blocker(s): a deploy would fail or break; fix them first.")


def test_main_needs_a_region(capsys: pytest.CaptureFixture[str]) -> None:
    assert preflight.main(["--stage", "dev"], session=_Session({}, region=None)) == 2
    assert "pins no region" in capsys.readouterr().err
    assert preflight.main(["--stage", "qa"], session=_Session({})) == 2


def test_a_stage_with_a_public_search_collection_gets_its_row_last(
    stubbed: dict[str, tuple[Any, Stubber]],
) -> None:
    _answer_the_account(stubbed)
    public = with_overrides(_owned_sender(), analytics_search=AnalyticsSearchConfig(enabled=True, public_access=True))

    findings = preflight.run(public, lambda service: stubbed[service][0], REGION)

    assert (findings[-1].check, findings[-1].status) == ("search collection", "WARN")
    assert [f.check for f in findings][:-1][-1] == "placeholders"
