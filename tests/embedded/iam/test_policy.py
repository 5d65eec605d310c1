"""The IAM policy evaluator (embedded.iam.policy): matching, conditions, the same-account rule, KMS
key policies and role trust policies, each rule checked with small literal policies.

The rules follow AWS's IAM User Guide (the "IAM JSON policy elements" reference pages, "Condition
operators", "Single-valued vs. multivalued context keys", "Policy evaluation for requests within a
single account") and the AWS KMS Developer Guide ("Key policies in AWS KMS").
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest

from embedded.iam import (
    ContextValue,
    Decision,
    Outcome,
    Policy,
    PolicyError,
    Principal,
    Request,
    UnsupportedCondition,
    decide,
    decide_assume_role,
    decide_kms,
    principal_context,
)

ACCOUNT = "123456789012"
OTHER_ACCOUNT = "210987654321"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/Worker"
ROLE = Principal.role(ROLE_ARN)
OTHER_ROLE = Principal.role(f"arn:aws:iam::{ACCOUNT}:role/Other")
SNS = Principal.service("sns.amazonaws.com")
SQS_SERVICE = Principal.service("sqs.amazonaws.com")
QUEUE = f"arn:aws:sqs:us-east-1:{ACCOUNT}:orders"
OTHER_QUEUE = f"arn:aws:sqs:us-east-1:{ACCOUNT}:refunds"
TOPIC = f"arn:aws:sns:us-east-1:{ACCOUNT}:handoff"
KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
ROOT = f"arn:aws:iam::{ACCOUNT}:root"


def policy(*statements: Mapping[str, Any], source: str = "test policy") -> Policy:
    return Policy.parse({"Version": "2012-10-17", "Statement": list(statements)}, source)


def allow_all_identity(**extra: Any) -> Policy:
    return policy({"Effect": "Allow", "Action": "*", "Resource": "*", **extra})


def identity_allows(statement: Mapping[str, Any], action: str, resource: str) -> bool:
    return decide(Request(action, resource, ROLE), identity=[policy(statement)]).allowed


def condition_holds(condition: Mapping[str, Any], context: Mapping[str, ContextValue]) -> bool:
    """Whether an identity Allow for everything, guarded by ``condition``, allows a request with ``context``."""
    statement = {"Effect": "Allow", "Action": "*", "Resource": "*", "Condition": condition}
    return decide(Request("sqs:SendMessage", QUEUE, ROLE, context), identity=[policy(statement)]).allowed


# --- Parsing ---------------------------------------------------------------------------------------------------------


def test_a_policy_parses_the_same_from_json_text_and_from_a_dict() -> None:
    document = {
        "Version": "2012-10-17",
        "Statement": [{"Sid": "Send", "Effect": "Allow", "Action": "sqs:SendMessage", "Resource": QUEUE}],
    }
    assert Policy.parse(json.dumps(document), "p") == Policy.parse(document, "p")


def test_a_single_statement_object_and_single_string_elements_are_accepted() -> None:
    parsed = Policy.parse(
        {"Statement": {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": QUEUE}}, "single statement"
    )
    assert len(parsed.statements) == 1
    assert parsed.statements[0].actions == ("sqs:SendMessage",)
    assert parsed.statements[0].resources == (QUEUE,)
    assert decide(Request("sqs:SendMessage", QUEUE, ROLE), identity=[parsed]).allowed


def test_the_parsed_statement_keeps_its_sid_effect_and_elements() -> None:
    statement = policy(
        {
            "Sid": "FromTopic",
            "Effect": "Allow",
            "Principal": {"Service": "sns.amazonaws.com"},
            "NotAction": ["sqs:DeleteQueue"],
            "NotResource": OTHER_QUEUE,
            "Condition": {"ArnEquals": {"aws:SourceArn": TOPIC}},
        }
    ).statements[0]
    assert statement.sid == "FromTopic"
    assert statement.effect == "Allow"
    assert statement.actions is None
    assert statement.not_actions == ("sqs:DeleteQueue",)
    assert statement.not_resources == (OTHER_QUEUE,)
    assert statement.principals is not None
    assert statement.principals.services == frozenset({"sns.amazonaws.com"})
    assert [(c.operator, c.key, c.values) for c in statement.conditions] == [("ArnEquals", "aws:SourceArn", (TOPIC,))]


def test_a_statement_without_effect_is_malformed() -> None:
    with pytest.raises(PolicyError, match="Effect"):
        policy({"Action": "sqs:SendMessage", "Resource": QUEUE})


@pytest.mark.parametrize("effect", ["allow", "DENY", "Permit", "", None])
def test_an_effect_other_than_exactly_allow_or_deny_is_malformed(effect: object) -> None:
    with pytest.raises(PolicyError, match="Effect"):
        policy({"Effect": effect, "Action": "sqs:SendMessage", "Resource": QUEUE})


def test_a_statement_with_both_action_and_notaction_is_malformed() -> None:
    with pytest.raises(PolicyError, match="Action"):
        policy({"Effect": "Allow", "Action": "sqs:*", "NotAction": "sqs:DeleteQueue", "Resource": QUEUE})


def test_a_statement_with_neither_action_nor_notaction_is_malformed() -> None:
    with pytest.raises(PolicyError, match="Action"):
        policy({"Effect": "Allow", "Resource": QUEUE})


def test_a_statement_with_both_resource_and_notresource_is_malformed() -> None:
    with pytest.raises(PolicyError, match="Resource"):
        policy({"Effect": "Allow", "Action": "sqs:*", "Resource": QUEUE, "NotResource": OTHER_QUEUE})


def test_a_statement_with_both_principal_and_notprincipal_is_malformed() -> None:
    with pytest.raises(PolicyError, match="Principal"):
        policy(
            {
                "Effect": "Deny",
                "Principal": "*",
                "NotPrincipal": {"AWS": ROLE_ARN},
                "Action": "sqs:*",
                "Resource": QUEUE,
            }
        )


def test_an_unknown_statement_element_is_malformed() -> None:
    with pytest.raises(PolicyError, match="Actions"):
        policy({"Effect": "Allow", "Actions": "sqs:*", "Resource": QUEUE})


@pytest.mark.parametrize(
    "document",
    [
        "{not json",
        "[]",
        {"Version": "2012-10-17"},
        {"Statement": "Allow everything"},
        {"Version": "2020-01-01", "Statement": []},
        {"Statement": [], "Extra": 1},
        {"Statement": [["Allow"]]},
    ],
)
def test_a_document_that_is_not_a_policy_is_malformed(document: Any) -> None:
    with pytest.raises(PolicyError):
        Policy.parse(document, "broken")


def test_duplicate_keys_in_the_json_text_are_malformed() -> None:
    text = '{"Statement": [{"Effect": "Allow", "Effect": "Deny", "Action": "sqs:*", "Resource": "*"}]}'
    with pytest.raises(PolicyError, match="duplicate"):
        Policy.parse(text, "duplicates")


@pytest.mark.parametrize(
    "element",
    [
        {"Action": [], "Resource": QUEUE},
        {"Action": "SendMessage", "Resource": QUEUE},
        {"Action": ["sqs:SendMessage", 7], "Resource": QUEUE},
        {"Action": "sqs:SendMessage", "Resource": "orders"},
        {"Action": "sqs:SendMessage", "Resource": []},
        {"Action": "sqs:SendMessage", "Resource": "arn:aws:*:us-east-1:123456789012:orders"},
        {"Action": "sqs:SendMessage", "Resource": QUEUE, "Condition": {"StringEquals": "aws:SourceAccount"}},
        {"Action": "sqs:SendMessage", "Resource": QUEUE, "Condition": {"StringEquals": {"aws:SourceAccount": []}}},
        {"Action": "sqs:SendMessage", "Resource": QUEUE, "Condition": {"StringEquals": {"aws:SourceAccount": {}}}},
        {"Action": "sqs:SendMessage", "Resource": QUEUE, "Sid": 3},
    ],
)
def test_a_malformed_element_is_a_policy_error(element: Mapping[str, Any]) -> None:
    with pytest.raises(PolicyError):
        policy({"Effect": "Allow", **element})


def test_a_policy_error_names_the_policy_and_the_statement_by_sid_or_by_index() -> None:
    with pytest.raises(PolicyError, match=r"Queue policy.*'Second'"):
        Policy.parse(
            {
                "Statement": [
                    {"Effect": "Allow", "Action": "sqs:*", "Resource": QUEUE},
                    {"Sid": "Second", "Effect": "Maybe", "Action": "sqs:*", "Resource": QUEUE},
                ]
            },
            "Queue policy",
        )
    with pytest.raises(PolicyError, match=r"Queue policy.*\[1\]"):
        Policy.parse(
            {
                "Statement": [
                    {"Effect": "Allow", "Action": "sqs:*", "Resource": QUEUE},
                    {"Effect": "Maybe", "Action": "sqs:*", "Resource": QUEUE},
                ]
            },
            "Queue policy",
        )


@pytest.mark.parametrize(
    ("operator", "value"),
    [
        ("NumericLessThan", "one point two"),
        ("NumericEquals", "NaN"),
        ("DateGreaterThan", "tomorrow"),
        ("Bool", "yes"),
        ("Null", "maybe"),
        ("IpAddress", "999.1.1.1"),
        ("BinaryEquals", "not base64!"),
    ],
)
def test_a_condition_value_the_operator_cannot_read_is_malformed(operator: str, value: str) -> None:
    key = {
        "NumericLessThan": "s3:TlsVersion",
        "NumericEquals": "s3:TlsVersion",
        "DateGreaterThan": "aws:CurrentTime",
        "Bool": "aws:SecureTransport",
        "Null": "aws:SourceArn",
        "IpAddress": "aws:SourceIp",
        "BinaryEquals": "kms:EncryptionContext:blob",
    }[operator]
    with pytest.raises(PolicyError, match=operator):
        allow_all_identity(Condition={operator: {key: value}})


# --- Errors for what the evaluator does not understand ------------------------------------------------------------


def test_an_unknown_condition_key_is_unsupported_and_named_with_the_policy_and_statement() -> None:
    with pytest.raises(UnsupportedCondition, match=r"aws:username.*Role policy.*'Mine'"):
        Policy.parse(
            {
                "Statement": {
                    "Sid": "Mine",
                    "Effect": "Allow",
                    "Action": "s3:*",
                    "Resource": "*",
                    "Condition": {"StringEquals": {"aws:username": "carlos"}},
                }
            },
            "Role policy",
        )


@pytest.mark.parametrize(
    "operator",
    [
        "StringStartsWith",
        "stringequals",
        "NullIfExists",
        "ForAllValues:Null",
        "ForSomeValues:StringEquals",
        "BoolNot",
        "IfExists",
    ],
)
def test_an_unknown_condition_operator_is_unsupported(operator: str) -> None:
    with pytest.raises(UnsupportedCondition, match=operator):
        allow_all_identity(Condition={operator: {"aws:SourceArn": "true"}})


def test_a_policy_variable_in_a_resource_is_unsupported() -> None:
    with pytest.raises(UnsupportedCondition, match=r"\$\{aws:username\}"):
        policy({"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::home/${aws:username}/*"})


def test_a_policy_variable_in_a_condition_value_is_unsupported() -> None:
    with pytest.raises(UnsupportedCondition, match=r"\$\{aws:PrincipalAccount\}"):
        allow_all_identity(Condition={"StringEquals": {"aws:SourceAccount": "${aws:PrincipalAccount}"}})


def test_a_plain_operator_on_a_multivalued_key_is_unsupported_because_aws_requires_a_set_operator() -> None:
    # "Single-valued vs. multivalued context keys": multivalued context keys require a condition set operator.
    with pytest.raises(UnsupportedCondition, match="kms:EncryptionContextKeys"):
        allow_all_identity(Condition={"StringEquals": {"kms:EncryptionContextKeys": "aws:logs:arn"}})


def test_an_arn_condition_value_with_fewer_than_six_segments_is_unsupported() -> None:
    with pytest.raises(UnsupportedCondition, match="ArnLike"):
        allow_all_identity(Condition={"ArnLike": {"aws:SourceArn": "arn:aws:sns:*"}})


def test_a_request_naming_an_unknown_context_key_is_refused() -> None:
    with pytest.raises(ValueError, match="aws:MultiFactorAuthPresent"):
        Request("sqs:SendMessage", QUEUE, ROLE, {"aws:MultiFactorAuthPresent": True})


def test_a_request_giving_a_multivalued_key_a_single_string_or_a_single_valued_key_a_list_is_refused() -> None:
    with pytest.raises(ValueError, match="kms:EncryptionContextKeys"):
        Request("kms:Decrypt", KEY, ROLE, {"kms:EncryptionContextKeys": "aws:logs:arn"})
    with pytest.raises(ValueError, match="aws:SourceArn"):
        Request("sqs:SendMessage", QUEUE, ROLE, {"aws:SourceArn": [TOPIC]})


def test_a_request_with_an_action_or_resource_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="action"):
        Request("SendMessage", QUEUE, ROLE)
    with pytest.raises(ValueError, match="resource"):
        Request("sqs:SendMessage", "orders", ROLE)


def test_a_condition_whose_request_value_has_the_wrong_type_is_unsupported_not_guessed() -> None:
    with pytest.raises(UnsupportedCondition, match="s3:TlsVersion"):
        condition_holds({"NumericLessThan": {"s3:TlsVersion": "1.2"}}, {"s3:TlsVersion": "tls-one-two"})


def test_an_identity_policy_with_a_principal_is_malformed() -> None:
    with_principal = policy({"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "Resource": QUEUE})
    with pytest.raises(PolicyError, match="Principal"):
        decide(Request("sqs:SendMessage", QUEUE, ROLE), identity=[with_principal])


def test_a_resource_policy_without_a_principal_is_malformed() -> None:
    without = policy({"Effect": "Allow", "Action": "sqs:*", "Resource": QUEUE})
    with pytest.raises(PolicyError, match="Principal"):
        decide(Request("sqs:SendMessage", QUEUE, ROLE), resource=[without])


def test_a_statement_without_resource_is_malformed_outside_a_trust_policy() -> None:
    without = policy({"Effect": "Allow", "Action": "sqs:*"})
    with pytest.raises(PolicyError, match="Resource"):
        decide(Request("sqs:SendMessage", QUEUE, ROLE), identity=[without])


def test_notprincipal_with_allow_is_malformed() -> None:
    # "AWS JSON policy elements: NotPrincipal": NotPrincipal must be used with "Effect": "Deny".
    with pytest.raises(PolicyError, match="NotPrincipal"):
        policy({"Effect": "Allow", "NotPrincipal": {"AWS": ROLE_ARN}, "Action": "sqs:*", "Resource": QUEUE})


@pytest.mark.parametrize(
    "principal",
    [
        {"AWS": f"arn:aws:iam::{ACCOUNT}:role/*"},
        {"AWS": "Worker"},
        {"Service": "*"},
        {"Service": []},
        {"Robot": "r2d2"},
        {},
        "everyone",
    ],
)
def test_a_principal_that_aws_would_reject_is_malformed(principal: object) -> None:
    with pytest.raises(PolicyError, match="Principal"):
        policy({"Effect": "Allow", "Principal": principal, "Action": "sqs:*", "Resource": QUEUE})


def test_a_service_principal_has_no_identity_policies() -> None:
    with pytest.raises(ValueError, match="identity"):
        decide(Request("sqs:SendMessage", QUEUE, SNS), identity=[allow_all_identity()])


def test_a_cross_account_request_is_refused_because_only_the_same_account_rule_is_implemented() -> None:
    other_queue = f"arn:aws:sqs:us-east-1:{OTHER_ACCOUNT}:orders"
    with pytest.raises(ValueError, match="account"):
        decide(Request("sqs:SendMessage", other_queue, ROLE), identity=[allow_all_identity()])


# --- Action and NotAction ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "action", "matches"),
    [
        ("sqs:SendMessage", "sqs:SendMessage", True),
        ("SQS:sendmessage", "sqs:SendMessage", True),
        ("sqs:SendMessage", "sqs:SendMessageBatch", False),
        ("kms:GenerateDataKey*", "kms:GenerateDataKey", True),
        ("kms:GenerateDataKey*", "kms:GenerateDataKeyWithoutPlaintext", True),
        ("kms:GenerateDataKey*", "kms:Decrypt", False),
        ("s3:Get*", "s3:GetObject", True),
        ("s3:Get*", "s3:PutObject", False),
        ("s3:Get*", "sqs:GetQueueUrl", False),
        ("s3:Get?bject", "s3:GetObject", True),
        ("s3:Get?bject", "s3:GetObbject", False),
        ("*", "states:StartExecution", True),
        ("sqs:*", "sqs:DeleteQueue", True),
    ],
)
def test_an_action_matches_case_insensitively_with_star_and_question_mark_wildcards(
    pattern: str, action: str, matches: bool
) -> None:
    assert identity_allows({"Effect": "Allow", "Action": pattern, "Resource": "*"}, action, QUEUE) is matches


def test_any_action_of_a_list_may_match() -> None:
    statement = {"Effect": "Allow", "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage"], "Resource": QUEUE}
    assert identity_allows(statement, "sqs:DeleteMessage", QUEUE)
    assert not identity_allows(statement, "sqs:SendMessage", QUEUE)


def test_notaction_with_allow_grants_every_action_except_the_listed_ones() -> None:
    statement = {"Effect": "Allow", "NotAction": ["iam:*", "sqs:DeleteQueue"], "Resource": "*"}
    assert identity_allows(statement, "sqs:SendMessage", QUEUE)
    assert not identity_allows(statement, "sqs:DeleteQueue", QUEUE)
    assert not identity_allows(statement, "IAM:PassRole", ROLE_ARN)


def test_notaction_with_deny_denies_every_action_except_the_listed_ones_and_grants_nothing() -> None:
    deny = policy({"Effect": "Deny", "NotAction": "sqs:ReceiveMessage", "Resource": QUEUE})
    receive = decide(Request("sqs:ReceiveMessage", QUEUE, ROLE), identity=[deny, allow_all_identity()])
    send = decide(Request("sqs:SendMessage", QUEUE, ROLE), identity=[deny, allow_all_identity()])
    assert receive.outcome is Outcome.ALLOW
    assert send.outcome is Outcome.EXPLICIT_DENY
    assert decide(Request("sqs:ReceiveMessage", QUEUE, ROLE), identity=[deny]).outcome is Outcome.IMPLICIT_DENY


# --- Resource and NotResource --------------------------------------------------------------------------------------

TABLE = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/Sessions"
LOG_GROUP = f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:/aws/lambda/router"
STATE_MACHINE = f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:Onboarding"


@pytest.mark.parametrize(
    ("pattern", "resource", "matches"),
    [
        ("*", QUEUE, True),
        ("*", "*", True),
        (QUEUE, QUEUE, True),
        (QUEUE, OTHER_QUEUE, False),
        (f"arn:aws:sqs:us-east-1:{ACCOUNT}:Orders", QUEUE, False),
        (f"arn:aws:sqs:us-east-1:{ACCOUNT}:order?", QUEUE, True),
        (f"arn:aws:sqs:us-east-1:{ACCOUNT}:order?", f"{QUEUE}s", False),
        (f"arn:aws:sqs:*:{ACCOUNT}:orders", QUEUE, True),
        (f"arn:aws:sqs:us-*:{ACCOUNT}:orders", QUEUE, True),
        (f"arn:aws:sqs:eu-*:{ACCOUNT}:orders", QUEUE, False),
        ("arn:aws:sqs:us-east-1:*:orders", QUEUE, True),
        (f"arn:aws:sqs:us-east-1:{OTHER_ACCOUNT}:orders", QUEUE, False),
        ("arn:*:sqs:us-east-1:123456789012:orders", QUEUE, True),
        # DynamoDB: the table ARN does not cover its indexes, the index pattern does not cover the table.
        (f"{TABLE}/index/*", f"{TABLE}/index/GSI1", True),
        (f"{TABLE}/index/*", TABLE, False),
        (TABLE, f"{TABLE}/index/GSI1", False),
        (f"{TABLE}*", f"{TABLE}/index/GSI1", True),
        # S3: object ARNs are the bucket ARN, a slash, and a key that may itself contain slashes.
        ("arn:aws:s3:::archive/*", "arn:aws:s3:::archive/2024/01/02/session.json", True),
        ("arn:aws:s3:::archive/*", "arn:aws:s3:::archive", False),
        ("arn:aws:s3:::archive/*", "arn:aws:s3:::archive-old/a.json", False),
        ("arn:aws:s3:::archive", "arn:aws:s3:::archive/a.json", False),
        ("arn:aws:s3:::archive/exports/*.csv", "arn:aws:s3:::archive/exports/2024/a.csv", True),
        ("arn:aws:s3:::archive/file?.txt", "arn:aws:s3:::archive/file1.txt", True),
        ("arn:aws:s3:::archive/file?.txt", "arn:aws:s3:::archive/file10.txt", False),
        ("arn:aws:s3:*:*:archive", "arn:aws:s3:::archive", True),
        # CloudWatch Logs: a log group's ":*" covers its streams, whose ARNs carry more colons.
        (f"{LOG_GROUP}:*", f"{LOG_GROUP}:log-stream:2024/01/01/[$LATEST]0123abcd", True),
        (f"{LOG_GROUP}:*", f"{LOG_GROUP}-canary:log-stream:x", False),
        (f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:/aws/lambda/*", f"{LOG_GROUP}:log-stream:x", True),
        # Step Functions: the resource part has its own colons.
        (f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:*", STATE_MACHINE, True),
        (
            f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:*",
            f"arn:aws:states:us-east-1:{ACCOUNT}:execution:Onboarding:run-1",
            False,
        ),
        # A pattern with fewer segments than the ARN only matches when a trailing * expands across the colons.
        ("arn:aws:sqs:*", QUEUE, True),
        (f"arn:aws:sqs:us-east-1:{ACCOUNT}", QUEUE, False),
        ("arn:aws:sqs:*:orders", QUEUE, False),
        ("arn:aws:sqs:us-*", QUEUE, True),
        # ... and only a * that ends the segment: one inside it stays within the segment.
        ("arn:aws:sqs:us-*s", QUEUE, False),
        ("arn:aws:sqs", QUEUE, False),
        # A wildcard within a segment of a full pattern stays within that segment.
        ("arn:aws:sqs:*:orders:*", QUEUE, False),
        ("arn:aws:states:us-east-1:*:Onboarding", STATE_MACHINE, False),
        # An ARN pattern never matches a request made on "*" (an action without resource-level permissions).
        ("arn:aws:sqs:*", "*", False),
    ],
)
def test_a_resource_is_matched_segment_by_segment_and_its_resource_part_as_a_glob(
    pattern: str, resource: str, matches: bool
) -> None:
    assert identity_allows({"Effect": "Allow", "Action": "*", "Resource": pattern}, "sqs:SendMessage", resource) is (
        matches
    )


def test_any_resource_of_a_list_may_match() -> None:
    statement = {"Effect": "Allow", "Action": "s3:*", "Resource": ["arn:aws:s3:::archive", "arn:aws:s3:::archive/*"]}
    assert identity_allows(statement, "s3:ListBucket", "arn:aws:s3:::archive")
    assert identity_allows(statement, "s3:GetObject", "arn:aws:s3:::archive/a")
    assert not identity_allows(statement, "s3:GetObject", "arn:aws:s3:::logs/a")


def test_notresource_with_allow_grants_on_every_resource_except_the_listed_ones() -> None:
    statement = {"Effect": "Allow", "Action": "sqs:*", "NotResource": [OTHER_QUEUE, "arn:aws:sqs:eu-*"]}
    assert identity_allows(statement, "sqs:SendMessage", QUEUE)
    assert not identity_allows(statement, "sqs:SendMessage", OTHER_QUEUE)
    assert not identity_allows(statement, "sqs:SendMessage", f"arn:aws:sqs:eu-west-1:{ACCOUNT}:orders")


def test_notresource_with_deny_denies_every_resource_except_the_listed_ones() -> None:
    deny = policy({"Effect": "Deny", "Action": "s3:*", "NotResource": "arn:aws:s3:::archive/*"})
    assert decide(
        Request("s3:GetObject", "arn:aws:s3:::archive/a", ROLE), identity=[deny, allow_all_identity()]
    ).allowed
    refused = decide(Request("s3:GetObject", "arn:aws:s3:::logs/a", ROLE), identity=[deny, allow_all_identity()])
    assert refused.outcome is Outcome.EXPLICIT_DENY


# --- Principal and NotPrincipal in resource policies ------------------------------------------------------------


def queue_policy(principal: object, *, effect: str = "Allow", **extra: Any) -> Policy:
    return policy(
        {"Effect": effect, "Principal": principal, "Action": "sqs:SendMessage", "Resource": QUEUE, **extra},
        source="Orders queue policy",
    )


def send(principal: Principal, *resource_policies: Policy, identity: tuple[Policy, ...] = ()) -> Decision:
    return decide(Request("sqs:SendMessage", QUEUE, principal), identity=identity, resource=resource_policies)


@pytest.mark.parametrize("principal", ["*", {"AWS": "*"}, {"AWS": ["*"]}])
def test_a_star_principal_matches_every_principal_services_included(principal: object) -> None:
    grant = queue_policy(principal)
    assert send(ROLE, grant).allowed
    assert send(OTHER_ROLE, grant).allowed
    assert send(SNS, grant).allowed


def test_a_role_arn_principal_matches_that_role_only() -> None:
    grant = queue_policy({"AWS": [ROLE_ARN]})
    assert send(ROLE, grant).allowed
    assert not send(OTHER_ROLE, grant).allowed
    assert not send(SNS, grant).allowed


def test_a_service_principal_matches_that_service_only() -> None:
    grant = queue_policy({"Service": ["sns.amazonaws.com"]})
    assert send(SNS, grant).allowed
    assert not send(SQS_SERVICE, grant).allowed
    assert not send(ROLE, grant).allowed


def test_a_principal_element_may_name_several_kinds_and_any_of_them_matches() -> None:
    grant = queue_policy({"AWS": ROLE_ARN, "Service": "sns.amazonaws.com"})
    assert send(ROLE, grant).allowed
    assert send(SNS, grant).allowed
    assert not send(OTHER_ROLE, grant).allowed


@pytest.mark.parametrize("account", [ACCOUNT, ROOT])
def test_an_account_principal_in_a_resource_policy_does_not_grant_a_role_by_itself(account: str) -> None:
    grant = queue_policy({"AWS": account})
    alone = send(ROLE, grant)
    assert alone.outcome is Outcome.IMPLICIT_DENY
    # It delegates to IAM: with an identity Allow the role may send (the identity policy is what allows it).
    assert send(ROLE, grant, identity=(allow_all_identity(),)).allowed


@pytest.mark.parametrize("account", [ACCOUNT, ROOT])
def test_an_account_principal_in_a_resource_policy_deny_matches_every_role_of_that_account(account: str) -> None:
    deny = queue_policy({"AWS": account}, effect="Deny")
    assert send(ROLE, deny, identity=(allow_all_identity(),)).outcome is Outcome.EXPLICIT_DENY
    assert send(OTHER_ROLE, deny, queue_policy("*")).outcome is Outcome.EXPLICIT_DENY
    # A service principal belongs to no account: the deny does not reach it.
    assert send(SNS, deny, queue_policy({"Service": "sns.amazonaws.com"})).allowed


def test_an_account_principal_of_another_account_denies_nothing_here() -> None:
    deny = queue_policy({"AWS": OTHER_ACCOUNT}, effect="Deny")
    assert send(ROLE, deny, identity=(allow_all_identity(),)).allowed


def test_a_star_principal_deny_reaches_service_principals() -> None:
    deny = queue_policy({"AWS": "*"}, effect="Deny")
    assert send(SNS, deny, queue_policy({"Service": "sns.amazonaws.com"})).outcome is Outcome.EXPLICIT_DENY


def test_a_federated_principal_matches_neither_roles_nor_services() -> None:
    grant = queue_policy({"Federated": "cognito-identity.amazonaws.com"})
    assert not send(ROLE, grant).allowed
    assert not send(SNS, grant).allowed


def test_notprincipal_with_deny_denies_everyone_except_the_named_role_and_its_account() -> None:
    # "AWS JSON policy elements: NotPrincipal": name the account as well as the role, or the account is denied.
    deny = policy(
        {
            "Effect": "Deny",
            "NotPrincipal": {"AWS": [ROLE_ARN, ROOT], "Service": "sns.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": QUEUE,
        }
    )
    grant = queue_policy("*")
    assert send(ROLE, deny, grant).allowed
    assert send(SNS, deny, grant).allowed
    assert send(OTHER_ROLE, deny, grant).outcome is Outcome.EXPLICIT_DENY
    assert send(SQS_SERVICE, deny, grant).outcome is Outcome.EXPLICIT_DENY


def test_notprincipal_naming_only_the_role_and_not_its_account_still_denies_the_role() -> None:
    deny = policy({"Effect": "Deny", "NotPrincipal": {"AWS": ROLE_ARN}, "Action": "sqs:*", "Resource": QUEUE})
    assert send(ROLE, deny, queue_policy("*")).outcome is Outcome.EXPLICIT_DENY


def test_a_session_arn_of_the_role_makes_a_deny_apply_but_grants_nothing() -> None:
    # The evaluator knows the role, not its session's name: it fails closed both ways.
    session = f"arn:aws:sts::{ACCOUNT}:assumed-role/Worker/router-function"
    assert not send(ROLE, queue_policy({"AWS": session})).allowed
    denied = send(ROLE, queue_policy({"AWS": session}, effect="Deny"), queue_policy({"AWS": ROLE_ARN}))
    assert denied.outcome is Outcome.EXPLICIT_DENY
    assert send(OTHER_ROLE, queue_policy({"AWS": session}, effect="Deny"), queue_policy("*")).allowed


def test_a_canonical_user_grants_nothing_and_cannot_be_denied_to() -> None:
    canonical = {"CanonicalUser": "79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be"}
    assert not send(ROLE, queue_policy(canonical)).allowed
    with pytest.raises(PolicyError, match="CanonicalUser"):
        queue_policy(canonical, effect="Deny")


# --- The same-account evaluation rule ----------------------------------------------------------------------------


def test_without_any_statement_the_request_is_implicitly_denied_with_a_reason() -> None:
    decision = decide(Request("sqs:SendMessage", QUEUE, ROLE))
    assert decision.outcome is Outcome.IMPLICIT_DENY
    assert not decision.allowed
    assert decision.reason == f"no statement allows sqs:SendMessage on {QUEUE} for {ROLE_ARN}"


def test_an_identity_allow_alone_allows_a_role_and_the_reason_names_the_statement() -> None:
    decision = decide(
        Request("sqs:SendMessage", QUEUE, ROLE),
        identity=[
            policy({"Sid": "Send", "Effect": "Allow", "Action": "sqs:SendMessage", "Resource": QUEUE}, source="W")
        ],
    )
    assert decision.outcome is Outcome.ALLOW
    assert decision.allowed
    assert "W" in decision.reason
    assert "'Send'" in decision.reason


def test_a_resource_policy_allow_alone_allows_the_principal_it_names() -> None:
    assert send(ROLE, queue_policy({"AWS": ROLE_ARN})).allowed


def test_identity_and_resource_allows_form_a_union_in_one_account() -> None:
    identity = policy({"Effect": "Allow", "Action": "sqs:ReceiveMessage", "Resource": QUEUE})
    resource = policy(
        {"Effect": "Allow", "Principal": {"AWS": ROLE_ARN}, "Action": "sqs:SendMessage", "Resource": QUEUE}
    )
    for action in ("sqs:ReceiveMessage", "sqs:SendMessage"):
        assert decide(Request(action, QUEUE, ROLE), identity=[identity], resource=[resource]).allowed
    purge = decide(Request("sqs:PurgeQueue", QUEUE, ROLE), identity=[identity], resource=[resource])
    assert purge.outcome is Outcome.IMPLICIT_DENY


def test_explicit_deny_in_a_resource_policy_wins_over_an_identity_allow() -> None:
    deny = policy(
        {"Sid": "NoSend", "Effect": "Deny", "Principal": "*", "Action": "sqs:SendMessage", "Resource": QUEUE},
        source="Orders queue policy",
    )
    decision = decide(Request("sqs:SendMessage", QUEUE, ROLE), identity=[allow_all_identity()], resource=[deny])
    assert decision.outcome is Outcome.EXPLICIT_DENY
    assert "Orders queue policy" in decision.reason
    assert "'NoSend'" in decision.reason


def test_explicit_deny_in_an_identity_policy_wins_over_a_resource_allow() -> None:
    deny = policy({"Effect": "Deny", "Action": "sqs:*", "Resource": QUEUE}, source="Worker deny")
    decision = send(ROLE, queue_policy({"AWS": ROLE_ARN}), identity=(deny,))
    assert decision.outcome is Outcome.EXPLICIT_DENY
    assert "Worker deny" in decision.reason
    assert "[0]" in decision.reason


def test_explicit_deny_in_the_same_policy_wins_over_its_allow() -> None:
    both = policy(
        {"Effect": "Allow", "Action": "sqs:*", "Resource": "*"},
        {"Effect": "Deny", "Action": "sqs:DeleteQueue", "Resource": "*"},
    )
    assert decide(Request("sqs:SendMessage", QUEUE, ROLE), identity=[both]).allowed
    assert decide(Request("sqs:DeleteQueue", QUEUE, ROLE), identity=[both]).outcome is Outcome.EXPLICIT_DENY


def test_a_deny_whose_condition_is_false_does_not_apply() -> None:
    deny = queue_policy("*", effect="Deny", Condition={"Bool": {"aws:SecureTransport": "false"}})
    grant = queue_policy({"Service": "sns.amazonaws.com"})
    secure = decide(Request("sqs:SendMessage", QUEUE, SNS, {"aws:SecureTransport": True}), resource=[deny, grant])
    plain = decide(Request("sqs:SendMessage", QUEUE, SNS, {"aws:SecureTransport": False}), resource=[deny, grant])
    assert secure.allowed
    assert plain.outcome is Outcome.EXPLICIT_DENY


def test_a_service_principal_is_allowed_only_by_a_resource_policy() -> None:
    assert not decide(Request("sqs:SendMessage", QUEUE, SNS)).allowed
    assert send(SNS, queue_policy({"Service": "sns.amazonaws.com"})).allowed


# --- Documented example: "Policy evaluation for requests within a single account" -------------------------------
#
# IAM User Guide, "Policy evaluation for requests within a single account", section "Example identity-based and
# resource-based policy evaluation" (read with the search tool). The identity policy is the page's current one. The
# bucket policy is the page's ("Principal": {"AWS": "arn:aws:iam::111122223333:user/carlossalazar"}, "s3:*" on "*"),
# read from an earlier revision of the page in awsdocs/iam-user-guide, with the bucket names as the page now spells
# them. Carlos is an IAM user on that page; this evaluator's principals are roles, services and accounts, so Carlos
# is a role of the same name here. The page's flow charts for a role and for a user in one account are the same.

CARLOS_ACCOUNT = "111122223333"
CARLOS = Principal.role(f"arn:aws:iam::{CARLOS_ACCOUNT}:role/carlossalazar")
CARLOS_IDENTITY = Policy.parse(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AllowS3ListRead",
                "Effect": "Allow",
                "Action": [
                    "s3:GetBucketLocation",
                    "s3:GetAccountPublicAccessBlock",
                    "s3:ListAccessPoints",
                    "s3:ListAllMyBuckets",
                ],
                "Resource": "arn:aws:s3:::*",
            },
            {
                "Sid": "AllowS3Self",
                "Effect": "Allow",
                "Action": "s3:*",
                "Resource": [
                    "arn:aws:s3:::amzn-s3-demo-bucket-carlossalazar/*",
                    "arn:aws:s3:::amzn-s3-demo-bucket-carlossalazar",
                ],
            },
            {"Sid": "DenyS3Logs", "Effect": "Deny", "Action": "s3:*", "Resource": "arn:aws:s3:::*log*"},
        ],
    },
    "carlossalazar identity policy",
)
CARLOS_BUCKET_POLICY = Policy.parse(
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "s3:*", "Principal": {"AWS": CARLOS.arn}, "Resource": "*"},
        ],
    },
    "amzn-s3-demo-bucket-carlossalazar bucket policy",
)
CARLOS_OBJECT = "arn:aws:s3:::amzn-s3-demo-bucket-carlossalazar/report.txt"
#: The identity policy's first statement alone: it allows listing, not saving.
CARLOS_LIST_ONLY = Policy.parse(
    {
        "Statement": [
            {
                "Sid": "AllowS3ListRead",
                "Effect": "Allow",
                "Action": ["s3:GetBucketLocation", "s3:ListAllMyBuckets"],
                "Resource": "arn:aws:s3:::*",
            }
        ]
    },
    "list-only identity policy",
)


def test_carlos_saving_to_the_logs_bucket_is_denied_by_the_deny_in_his_identity_policy() -> None:
    decision = decide(
        Request("s3:PutObject", "arn:aws:s3:::amzn-s3-demo-bucket-carlossalazar-logs/report.txt", CARLOS),
        identity=[CARLOS_IDENTITY],
        resource=[CARLOS_BUCKET_POLICY],
    )
    assert decision.outcome is Outcome.EXPLICIT_DENY
    assert "DenyS3Logs" in decision.reason


def test_carlos_saving_to_his_own_bucket_is_allowed_by_both_policies() -> None:
    decision = decide(
        Request("s3:PutObject", CARLOS_OBJECT, CARLOS), identity=[CARLOS_IDENTITY], resource=[CARLOS_BUCKET_POLICY]
    )
    assert decision.outcome is Outcome.ALLOW


def test_carlos_is_still_allowed_when_only_one_of_the_two_policies_allows() -> None:
    # "If either the identity-based policy or the resource-based policy within the same account allows the request
    # and the other doesn't, the request is still allowed."
    request = Request("s3:PutObject", CARLOS_OBJECT, CARLOS)
    assert decide(request, identity=[CARLOS_IDENTITY]).allowed
    assert decide(request, resource=[CARLOS_BUCKET_POLICY]).allowed
    assert decide(request, identity=[CARLOS_LIST_ONLY], resource=[CARLOS_BUCKET_POLICY]).allowed
    assert not decide(request, identity=[CARLOS_LIST_ONLY]).allowed


def test_carlos_is_denied_when_either_policy_explicitly_denies() -> None:
    # "If either of them explicitly denied the statement, the request would have been denied."
    bucket_deny = Policy.parse(
        {
            "Statement": [
                {"Effect": "Deny", "Principal": {"AWS": CARLOS.arn}, "Action": "s3:PutObject", "Resource": "*"}
            ]
        },
        "bucket policy with a deny",
    )
    decision = decide(
        Request("s3:PutObject", CARLOS_OBJECT, CARLOS),
        identity=[CARLOS_IDENTITY],
        resource=[CARLOS_BUCKET_POLICY, bucket_deny],
    )
    assert decision.outcome is Outcome.EXPLICIT_DENY


def test_carlos_deny_pattern_star_log_star_also_reaches_an_object_key_containing_log() -> None:
    # "*" in the resource part matches slashes too: arn:aws:s3:::*log* covers any object whose key contains "log".
    decision = decide(
        Request("s3:GetObject", "arn:aws:s3:::amzn-s3-demo-bucket-carlossalazar/catalog.txt", CARLOS),
        identity=[CARLOS_IDENTITY],
        resource=[CARLOS_BUCKET_POLICY],
    )
    assert decision.outcome is Outcome.EXPLICIT_DENY


def test_carlos_may_list_his_bucket_location_but_not_put_a_bucket_policy_on_another_bucket() -> None:
    location = Request("s3:GetBucketLocation", "arn:aws:s3:::amzn-s3-demo-bucket-team", CARLOS)
    put_policy = Request("s3:PutBucketPolicy", "arn:aws:s3:::amzn-s3-demo-bucket-team", CARLOS)
    assert decide(location, identity=[CARLOS_IDENTITY]).allowed
    assert decide(put_policy, identity=[CARLOS_IDENTITY]).outcome is Outcome.IMPLICIT_DENY


# --- Documented example: "IAM JSON policy elements: NotAction", section "NotAction with Deny" ------------------------
#
# Read with the search tool. The page's policy denies every action outside IAM to a user not signed in with MFA:
NOT_ACTION_WITH_DENY: dict[str, Any] = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "DenyAllUsersNotUsingMFA",
            "Effect": "Deny",
            "NotAction": "iam:*",
            "Resource": "*",
            "Condition": {"BoolIfExists": {"aws:MultiFactorAuthPresent": "false"}},
        }
    ],
}


def test_the_documented_notaction_with_deny_policy_is_refused_because_its_mfa_key_is_not_supported() -> None:
    # aws:MultiFactorAuthPresent is not among the keys this evaluator knows (roles of Lambda functions and state
    # machines never sign in with MFA); it refuses the policy rather than guess.
    with pytest.raises(UnsupportedCondition, match=r"aws:MultiFactorAuthPresent.*DenyAllUsersNotUsingMFA"):
        Policy.parse(NOT_ACTION_WITH_DENY, "MFA policy")


def test_the_documented_notaction_with_deny_policy_denies_everything_outside_iam_and_grants_nothing() -> None:
    # The same statement with a supported Bool key in place of the MFA key: the structure the page explains.
    statement = dict(NOT_ACTION_WITH_DENY["Statement"][0])
    statement["Condition"] = {"BoolIfExists": {"aws:SecureTransport": "false"}}
    deny = Policy.parse({"Version": "2012-10-17", "Statement": [statement]}, "NotAction with Deny")
    everything = allow_all_identity()

    def outcome(action: str, resource: str, context: Mapping[str, ContextValue]) -> Outcome:
        return decide(Request(action, resource, ROLE, context), identity=[deny, everything]).outcome

    # The condition holds (the key is false, or absent with IfExists): everything but IAM is denied.
    assert outcome("sqs:SendMessage", QUEUE, {"aws:SecureTransport": False}) is Outcome.EXPLICIT_DENY
    assert outcome("sqs:SendMessage", QUEUE, {}) is Outcome.EXPLICIT_DENY
    assert outcome("iam:GetRole", ROLE_ARN, {}) is Outcome.ALLOW
    # The condition fails: the deny has no effect.
    assert outcome("sqs:SendMessage", QUEUE, {"aws:SecureTransport": True}) is Outcome.ALLOW
    # The deny grants nothing by itself: "You must still allow actions that you want to allow."
    alone = decide(Request("iam:GetRole", ROLE_ARN, ROLE), identity=[deny])
    assert alone.outcome is Outcome.IMPLICIT_DENY


# --- Conditions: how the block combines -------------------------------------------------------------------------

SOURCE_ARN = f"arn:aws:events:us-east-1:{ACCOUNT}:rule/sessions/started"


def test_every_operator_of_a_condition_block_must_hold() -> None:
    condition = {
        "ArnLike": {"aws:SourceArn": f"arn:aws:events:us-east-1:{ACCOUNT}:rule/*"},
        "StringEquals": {"aws:SourceAccount": ACCOUNT},
    }
    assert condition_holds(condition, {"aws:SourceArn": SOURCE_ARN, "aws:SourceAccount": ACCOUNT})
    assert not condition_holds(condition, {"aws:SourceArn": SOURCE_ARN, "aws:SourceAccount": OTHER_ACCOUNT})
    assert not condition_holds(condition, {"aws:SourceArn": SOURCE_ARN})


def test_every_key_of_an_operator_must_hold() -> None:
    condition = {"StringEquals": {"aws:SourceAccount": ACCOUNT, "aws:RequestedRegion": "us-east-1"}}
    assert condition_holds(condition, {"aws:SourceAccount": ACCOUNT, "aws:RequestedRegion": "us-east-1"})
    assert not condition_holds(condition, {"aws:SourceAccount": ACCOUNT, "aws:RequestedRegion": "eu-west-1"})


def test_any_value_of_a_key_may_match() -> None:
    condition = {"StringEquals": {"aws:RequestedRegion": ["us-east-1", "us-west-2"]}}
    assert condition_holds(condition, {"aws:RequestedRegion": "us-west-2"})
    assert not condition_holds(condition, {"aws:RequestedRegion": "eu-west-1"})


def test_condition_keys_are_case_insensitive_and_values_case_sensitive() -> None:
    assert condition_holds({"StringEquals": {"AWS:SOURCEACCOUNT": ACCOUNT}}, {"aws:sourceaccount": ACCOUNT})
    assert not condition_holds({"StringEquals": {"sns:Protocol": "HTTPS"}}, {"sns:Protocol": "https"})


def test_the_name_in_an_encryption_context_key_is_case_sensitive() -> None:
    value = f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:/aws/lambda/router"
    condition = {"StringEquals": {"kms:EncryptionContext:aws:logs:arn": value}}
    assert condition_holds(condition, {"KMS:encryptioncontext:aws:logs:arn": value})
    assert not condition_holds(condition, {"kms:EncryptionContext:AWS:Logs:ARN": value})


# --- Conditions: every operator ----------------------------------------------------------------------------------

BLOB = base64.b64encode(b"session-42").decode()
OTHER_BLOB = base64.b64encode(b"session-43").decode()


@pytest.mark.parametrize(
    ("condition", "context", "holds"),
    [
        # String operators
        ({"StringEquals": {"aws:SourceAccount": ACCOUNT}}, {"aws:SourceAccount": ACCOUNT}, True),
        ({"StringEquals": {"aws:SourceAccount": ACCOUNT}}, {"aws:SourceAccount": OTHER_ACCOUNT}, False),
        ({"StringEquals": {"s3:prefix": "home/*"}}, {"s3:prefix": "home/carlos"}, False),
        ({"StringNotEquals": {"aws:SourceAccount": ACCOUNT}}, {"aws:SourceAccount": OTHER_ACCOUNT}, True),
        ({"StringNotEquals": {"aws:SourceAccount": ACCOUNT}}, {"aws:SourceAccount": ACCOUNT}, False),
        ({"StringEqualsIgnoreCase": {"sns:Protocol": "HTTPS"}}, {"sns:Protocol": "https"}, True),
        ({"StringEqualsIgnoreCase": {"sns:Protocol": "HTTPS"}}, {"sns:Protocol": "http"}, False),
        ({"StringNotEqualsIgnoreCase": {"sns:Protocol": "HTTPS"}}, {"sns:Protocol": "https"}, False),
        ({"StringNotEqualsIgnoreCase": {"sns:Protocol": "HTTPS"}}, {"sns:Protocol": "sqs"}, True),
        ({"StringLike": {"s3:prefix": "home/*/inbox/?"}}, {"s3:prefix": "home/carlos/x/inbox/a"}, True),
        ({"StringLike": {"s3:prefix": "home/*/inbox/?"}}, {"s3:prefix": "home/carlos/inbox/ab"}, False),
        ({"StringLike": {"s3:prefix": "Home/*"}}, {"s3:prefix": "home/carlos"}, False),
        ({"StringNotLike": {"s3:prefix": "home/*"}}, {"s3:prefix": "tmp/x"}, True),
        ({"StringNotLike": {"s3:prefix": "home/*"}}, {"s3:prefix": "home/x"}, False),
        ({"StringEquals": {"aws:SecureTransport": "true"}}, {"aws:SecureTransport": True}, True),
        # Numeric operators (CDK writes the TLS version as a JSON number)
        ({"NumericEquals": {"s3:TlsVersion": "1.2"}}, {"s3:TlsVersion": 1.2}, True),
        ({"NumericEquals": {"s3:TlsVersion": 1.2}}, {"s3:TlsVersion": "1.20"}, True),
        ({"NumericEquals": {"s3:TlsVersion": "1.2"}}, {"s3:TlsVersion": 1.3}, False),
        ({"NumericNotEquals": {"s3:TlsVersion": "1.2"}}, {"s3:TlsVersion": 1.3}, True),
        ({"NumericNotEquals": {"s3:TlsVersion": "1.2"}}, {"s3:TlsVersion": 1.2}, False),
        ({"NumericLessThan": {"s3:TlsVersion": 1.2}}, {"s3:TlsVersion": 1.1}, True),
        ({"NumericLessThan": {"s3:TlsVersion": 1.2}}, {"s3:TlsVersion": 1.2}, False),
        ({"NumericLessThanEquals": {"s3:TlsVersion": 1.2}}, {"s3:TlsVersion": 1.2}, True),
        ({"NumericLessThanEquals": {"s3:TlsVersion": 1.2}}, {"s3:TlsVersion": 1.3}, False),
        ({"NumericGreaterThan": {"aws:EpochTime": "1700000000"}}, {"aws:EpochTime": 1700000001}, True),
        ({"NumericGreaterThan": {"aws:EpochTime": "1700000000"}}, {"aws:EpochTime": 1700000000}, False),
        ({"NumericGreaterThanEquals": {"aws:EpochTime": 1700000000}}, {"aws:EpochTime": 1700000000}, True),
        ({"NumericGreaterThanEquals": {"aws:EpochTime": 1700000000}}, {"aws:EpochTime": 1699999999}, False),
        # Date operators (ISO 8601 or epoch seconds on either side)
        (
            {"DateEquals": {"aws:CurrentTime": "2024-01-01T00:00:00Z"}},
            {"aws:CurrentTime": "2024-01-01T00:00:00Z"},
            True,
        ),
        ({"DateEquals": {"aws:CurrentTime": "2024-01-01"}}, {"aws:CurrentTime": "2024-01-01T00:00:00+00:00"}, True),
        (
            {"DateEquals": {"aws:CurrentTime": "2024-01-01T00:00:00Z"}},
            {"aws:CurrentTime": "2024-01-01T00:00:01Z"},
            False,
        ),
        ({"DateNotEquals": {"aws:CurrentTime": "2024-01-01T00:00:00Z"}}, {"aws:CurrentTime": "2024-01-02"}, True),
        ({"DateNotEquals": {"aws:CurrentTime": "2024-01-01T00:00:00Z"}}, {"aws:CurrentTime": "2024-01-01"}, False),
        (
            {"DateLessThan": {"aws:CurrentTime": "2024-06-01T00:00:00Z"}},
            {"aws:CurrentTime": "2024-05-31T23:59:59Z"},
            True,
        ),
        (
            {"DateLessThan": {"aws:CurrentTime": "2024-06-01T00:00:00Z"}},
            {"aws:CurrentTime": "2024-06-01T00:00:00Z"},
            False,
        ),
        ({"DateLessThanEquals": {"aws:CurrentTime": "2024-06-01T00:00:00Z"}}, {"aws:CurrentTime": "2024-06-01"}, True),
        ({"DateLessThanEquals": {"aws:CurrentTime": "2024-06-01T00:00:00Z"}}, {"aws:CurrentTime": "2024-06-02"}, False),
        ({"DateGreaterThan": {"aws:CurrentTime": "1704067200"}}, {"aws:CurrentTime": "2024-01-01T00:00:01Z"}, True),
        ({"DateGreaterThan": {"aws:CurrentTime": "1704067200"}}, {"aws:CurrentTime": "2024-01-01T00:00:00Z"}, False),
        ({"DateGreaterThanEquals": {"aws:EpochTime": "2024-01-01T00:00:00Z"}}, {"aws:EpochTime": 1704067200}, True),
        ({"DateGreaterThanEquals": {"aws:EpochTime": "2024-01-01T00:00:00Z"}}, {"aws:EpochTime": 1704067199}, False),
        # Bool (a JSON boolean in the policy reads as its text)
        ({"Bool": {"aws:SecureTransport": "true"}}, {"aws:SecureTransport": True}, True),
        ({"Bool": {"aws:SecureTransport": "true"}}, {"aws:SecureTransport": False}, False),
        ({"Bool": {"aws:SecureTransport": False}}, {"aws:SecureTransport": False}, True),
        ({"Bool": {"aws:ViaAWSService": "true"}}, {"aws:ViaAWSService": "true"}, True),
        ({"Bool": {"kms:GrantIsForAWSResource": "true"}}, {"kms:GrantIsForAWSResource": True}, True),
        # BinaryEquals (base64 on both sides)
        ({"BinaryEquals": {"kms:EncryptionContext:blob": BLOB}}, {"kms:EncryptionContext:blob": BLOB}, True),
        ({"BinaryEquals": {"kms:EncryptionContext:blob": BLOB}}, {"kms:EncryptionContext:blob": OTHER_BLOB}, False),
        # IP address operators (CIDR or a single address, IPv4 or IPv6)
        ({"IpAddress": {"aws:SourceIp": "203.0.113.0/24"}}, {"aws:SourceIp": "203.0.113.7"}, True),
        ({"IpAddress": {"aws:SourceIp": "203.0.113.0/24"}}, {"aws:SourceIp": "198.51.100.7"}, False),
        ({"IpAddress": {"aws:SourceIp": "203.0.113.7"}}, {"aws:SourceIp": "203.0.113.7"}, True),
        ({"IpAddress": {"aws:SourceIp": "2001:db8::/32"}}, {"aws:SourceIp": "2001:db8::1"}, True),
        ({"IpAddress": {"aws:SourceIp": "2001:db8::/32"}}, {"aws:SourceIp": "203.0.113.7"}, False),
        ({"NotIpAddress": {"aws:SourceIp": "203.0.113.0/24"}}, {"aws:SourceIp": "198.51.100.7"}, True),
        ({"NotIpAddress": {"aws:SourceIp": "203.0.113.0/24"}}, {"aws:SourceIp": "203.0.113.7"}, False),
        # ARN operators: each of the six segments compared separately, wildcards within them; ArnEquals = ArnLike
        (
            {"ArnLike": {"aws:SourceArn": f"arn:aws:events:us-east-1:{ACCOUNT}:rule/*"}},
            {"aws:SourceArn": SOURCE_ARN},
            True,
        ),
        ({"ArnEquals": {"aws:SourceArn": f"arn:aws:events:*:{ACCOUNT}:rule/*"}}, {"aws:SourceArn": SOURCE_ARN}, True),
        ({"ArnEquals": {"aws:SourceArn": SOURCE_ARN}}, {"aws:SourceArn": SOURCE_ARN}, True),
        (
            {"ArnLike": {"aws:SourceArn": f"arn:aws:events:*:{OTHER_ACCOUNT}:rule/*"}},
            {"aws:SourceArn": SOURCE_ARN},
            False,
        ),
        (
            {"ArnLike": {"aws:SourceArn": f"arn:aws:events:us-east-1:{ACCOUNT}:Rule/*"}},
            {"aws:SourceArn": SOURCE_ARN},
            False,
        ),
        (
            {"ArnLike": {"aws:SourceArn": f"arn:aws:states:*:{ACCOUNT}:stateMachine:*"}},
            {"aws:SourceArn": STATE_MACHINE},
            True,
        ),
        ({"ArnLike": {"aws:SourceArn": "arn:aws:states:*:*:Onboarding"}}, {"aws:SourceArn": STATE_MACHINE}, False),
        ({"ArnNotLike": {"aws:SourceArn": f"arn:aws:events:*:{ACCOUNT}:rule/*"}}, {"aws:SourceArn": SOURCE_ARN}, False),
        ({"ArnNotLike": {"aws:SourceArn": f"arn:aws:sns:*:{ACCOUNT}:*"}}, {"aws:SourceArn": SOURCE_ARN}, True),
        ({"ArnNotEquals": {"aws:SourceArn": SOURCE_ARN}}, {"aws:SourceArn": SOURCE_ARN}, False),
        ({"ArnNotEquals": {"aws:SourceArn": TOPIC}}, {"aws:SourceArn": SOURCE_ARN}, True),
        # Null: "true" holds when the key is absent, "false" when it is present
        ({"Null": {"aws:SourceArn": "true"}}, {}, True),
        ({"Null": {"aws:SourceArn": "true"}}, {"aws:SourceArn": SOURCE_ARN}, False),
        ({"Null": {"aws:SourceArn": "false"}}, {"aws:SourceArn": SOURCE_ARN}, True),
        ({"Null": {"aws:SourceArn": False}}, {}, False),
        ({"Null": {"kms:EncryptionContextKeys": "true"}}, {"kms:EncryptionContextKeys": []}, True),
    ],
)
def test_each_condition_operator_compares_as_documented(
    condition: Mapping[str, Any], context: Mapping[str, ContextValue], holds: bool
) -> None:
    assert condition_holds(condition, context) is holds


POSITIVE_OPERATORS = {
    "StringEquals": ("aws:SourceAccount", ACCOUNT),
    "StringEqualsIgnoreCase": ("sns:Protocol", "https"),
    "StringLike": ("s3:prefix", "home/*"),
    "NumericEquals": ("s3:TlsVersion", "1.2"),
    "NumericLessThan": ("s3:TlsVersion", "1.2"),
    "NumericLessThanEquals": ("s3:TlsVersion", "1.2"),
    "NumericGreaterThan": ("s3:TlsVersion", "1.2"),
    "NumericGreaterThanEquals": ("s3:TlsVersion", "1.2"),
    "DateEquals": ("aws:CurrentTime", "2024-01-01T00:00:00Z"),
    "DateLessThan": ("aws:CurrentTime", "2024-01-01T00:00:00Z"),
    "DateLessThanEquals": ("aws:CurrentTime", "2024-01-01T00:00:00Z"),
    "DateGreaterThan": ("aws:CurrentTime", "2024-01-01T00:00:00Z"),
    "DateGreaterThanEquals": ("aws:CurrentTime", "2024-01-01T00:00:00Z"),
    "Bool": ("aws:SecureTransport", "true"),
    "BinaryEquals": ("kms:EncryptionContext:blob", BLOB),
    "IpAddress": ("aws:SourceIp", "203.0.113.0/24"),
    "ArnEquals": ("aws:SourceArn", SOURCE_ARN),
    "ArnLike": ("aws:SourceArn", SOURCE_ARN),
}
NEGATED_OPERATORS = {
    "StringNotEquals": ("aws:SourceAccount", ACCOUNT),
    "StringNotEqualsIgnoreCase": ("sns:Protocol", "https"),
    "StringNotLike": ("s3:prefix", "home/*"),
    "NumericNotEquals": ("s3:TlsVersion", "1.2"),
    "DateNotEquals": ("aws:CurrentTime", "2024-01-01T00:00:00Z"),
    "NotIpAddress": ("aws:SourceIp", "203.0.113.0/24"),
    "ArnNotEquals": ("aws:SourceArn", SOURCE_ARN),
    "ArnNotLike": ("aws:SourceArn", SOURCE_ARN),
}
#: Two request values for each key above, one equal to the policy value and one different.
MATCHING_VALUES: dict[str, ContextValue] = {
    "aws:SourceAccount": ACCOUNT,
    "sns:Protocol": "https",
    "s3:prefix": "home/x",
    "s3:TlsVersion": 1.2,
    "aws:CurrentTime": "2024-01-01T00:00:00Z",
    "aws:SecureTransport": True,
    "kms:EncryptionContext:blob": BLOB,
    "aws:SourceIp": "203.0.113.7",
    "aws:SourceArn": SOURCE_ARN,
}
OTHER_VALUES: dict[str, ContextValue] = {
    "aws:SourceAccount": OTHER_ACCOUNT,
    "sns:Protocol": "sqs",
    "s3:prefix": "tmp/x",
    "s3:TlsVersion": 1.25,
    "aws:CurrentTime": "2023-06-30T12:00:00Z",
    "aws:SecureTransport": False,
    "kms:EncryptionContext:blob": OTHER_BLOB,
    "aws:SourceIp": "198.51.100.7",
    "aws:SourceArn": TOPIC,
}


@pytest.mark.parametrize("operator", sorted(POSITIVE_OPERATORS))
def test_a_missing_key_makes_a_positive_operator_false(operator: str) -> None:
    key, value = POSITIVE_OPERATORS[operator]
    assert not condition_holds({operator: {key: value}}, {})


@pytest.mark.parametrize("operator", sorted(NEGATED_OPERATORS))
def test_a_missing_key_makes_a_negated_operator_true(operator: str) -> None:
    key, value = NEGATED_OPERATORS[operator]
    assert condition_holds({operator: {key: value}}, {})


@pytest.mark.parametrize("operator", sorted({**POSITIVE_OPERATORS, **NEGATED_OPERATORS}))
def test_ifexists_makes_a_missing_key_true_and_otherwise_compares_as_the_plain_operator(operator: str) -> None:
    key, value = {**POSITIVE_OPERATORS, **NEGATED_OPERATORS}[operator]
    assert condition_holds({f"{operator}IfExists": {key: value}}, {})
    for present in ({key: MATCHING_VALUES[key]}, {key: OTHER_VALUES[key]}):
        assert condition_holds({f"{operator}IfExists": {key: value}}, present) is condition_holds(
            {operator: {key: value}}, present
        )


# --- Conditions: the set operators -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "context", "holds"),
    [
        # ForAnyValue: at least one request value matches; false for a missing or empty key.
        (
            {"ForAnyValue:StringEquals": {"kms:EncryptionContextKeys": "aws:logs:arn"}},
            {"kms:EncryptionContextKeys": ["aws:logs:arn", "other"]},
            True,
        ),
        (
            {"ForAnyValue:StringEquals": {"kms:EncryptionContextKeys": "aws:logs:arn"}},
            {"kms:EncryptionContextKeys": ["other"]},
            False,
        ),
        ({"ForAnyValue:StringEquals": {"kms:EncryptionContextKeys": "aws:logs:arn"}}, {}, False),
        (
            {"ForAnyValue:StringEquals": {"kms:EncryptionContextKeys": "aws:logs:arn"}},
            {"kms:EncryptionContextKeys": []},
            False,
        ),
        (
            {"ForAnyValue:StringEquals": {"aws:CalledVia": "athena.amazonaws.com"}},
            {"aws:CalledVia": ["athena.amazonaws.com"]},
            True,
        ),
        ({"ForAnyValue:StringEqualsIfExists": {"kms:GrantOperations": "Decrypt"}}, {}, True),
        # ForAllValues: every request value matches; true for a missing or empty key.
        (
            {"ForAllValues:StringEquals": {"kms:EncryptionContextKeys": ["a", "b"]}},
            {"kms:EncryptionContextKeys": ["a"]},
            True,
        ),
        (
            {"ForAllValues:StringEquals": {"kms:EncryptionContextKeys": ["a", "b"]}},
            {"kms:EncryptionContextKeys": ["a", "c"]},
            False,
        ),
        ({"ForAllValues:StringEquals": {"kms:EncryptionContextKeys": ["a", "b"]}}, {}, True),
        (
            {"ForAllValues:StringEquals": {"kms:EncryptionContextKeys": ["a", "b"]}},
            {"kms:EncryptionContextKeys": []},
            True,
        ),
        (
            {"ForAllValues:StringLike": {"kms:GrantOperations": ["Decrypt", "Generate*"]}},
            {"kms:GrantOperations": ["Decrypt", "GenerateDataKey"]},
            True,
        ),
        (
            {"ForAllValues:StringLike": {"kms:GrantOperations": ["Decrypt", "Generate*"]}},
            {"kms:GrantOperations": ["Decrypt", "Encrypt"]},
            False,
        ),
        # A negated operator under a set operator negates per request value.
        (
            {"ForAnyValue:StringNotEquals": {"kms:EncryptionContextKeys": "a"}},
            {"kms:EncryptionContextKeys": ["a", "b"]},
            True,
        ),
        (
            {"ForAnyValue:StringNotEquals": {"kms:EncryptionContextKeys": "a"}},
            {"kms:EncryptionContextKeys": ["a"]},
            False,
        ),
        (
            {"ForAllValues:StringNotEquals": {"kms:EncryptionContextKeys": "a"}},
            {"kms:EncryptionContextKeys": ["b", "c"]},
            True,
        ),
        (
            {"ForAllValues:StringNotEquals": {"kms:EncryptionContextKeys": "a"}},
            {"kms:EncryptionContextKeys": ["a", "b"]},
            False,
        ),
        # With a single-valued key a set operator sees a set of one, and ForAllValues holds when the key is missing
        # (which is why AWS warns against set operators on single-valued keys).
        ({"ForAllValues:StringEquals": {"aws:SourceAccount": ACCOUNT}}, {}, True),
        ({"ForAnyValue:StringEquals": {"aws:SourceAccount": ACCOUNT}}, {"aws:SourceAccount": ACCOUNT}, True),
    ],
)
def test_the_set_operators_compare_a_multivalued_key_as_documented(
    condition: Mapping[str, Any], context: Mapping[str, ContextValue], holds: bool
) -> None:
    assert condition_holds(condition, context) is holds


# --- KMS key policies ----------------------------------------------------------------------------------------------

ROOT_STATEMENT = {"Sid": "EnableIAM", "Effect": "Allow", "Principal": {"AWS": ROOT}, "Action": "kms:*", "Resource": "*"}


def key_policy(*statements: Mapping[str, Any]) -> Policy:
    return policy(*statements, source="SessionsKey (key policy)")


def kms(
    action: str,
    principal: Principal,
    key: Policy,
    identity: tuple[Policy, ...] = (),
    context: Mapping[str, ContextValue] | None = None,
) -> Decision:
    return decide_kms(Request(action, KEY, principal, context or {}), key_policy=key, identity=identity)


def test_a_key_policy_statement_naming_the_role_allows_it_directly() -> None:
    key = key_policy(
        {"Sid": "Worker", "Effect": "Allow", "Principal": {"AWS": ROLE_ARN}, "Action": "kms:Decrypt", "Resource": "*"}
    )
    decision = kms("kms:Decrypt", ROLE, key)
    assert decision.outcome is Outcome.ALLOW
    assert "'Worker'" in decision.reason
    assert kms("kms:Encrypt", ROLE, key).outcome is Outcome.IMPLICIT_DENY
    assert kms("kms:Decrypt", OTHER_ROLE, key).outcome is Outcome.IMPLICIT_DENY


def test_the_root_statement_delegates_to_iam_so_an_identity_allow_is_needed_as_well() -> None:
    key = key_policy(ROOT_STATEMENT)
    identity = policy({"Effect": "Allow", "Action": "kms:Decrypt", "Resource": KEY})
    allowed = kms("kms:Decrypt", ROLE, key, (identity,))
    assert allowed.outcome is Outcome.ALLOW
    assert "EnableIAM" in allowed.reason
    without_identity = kms("kms:Decrypt", ROLE, key)
    assert without_identity.outcome is Outcome.IMPLICIT_DENY
    assert "EnableIAM" in without_identity.reason
    assert kms("kms:Encrypt", ROLE, key, (identity,)).outcome is Outcome.IMPLICIT_DENY


def test_an_identity_allow_alone_never_gives_access_to_a_key() -> None:
    key = key_policy(
        {"Effect": "Allow", "Principal": {"AWS": OTHER_ROLE.arn}, "Action": "kms:*", "Resource": "*"},
        {
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{OTHER_ACCOUNT}:root"},
            "Action": "kms:*",
            "Resource": "*",
        },
    )
    decision = kms("kms:Decrypt", ROLE, key, (allow_all_identity(),))
    assert decision.outcome is Outcome.IMPLICIT_DENY
    assert "key policy" in decision.reason


def test_the_root_statement_limits_what_iam_may_grant() -> None:
    key = key_policy({**ROOT_STATEMENT, "Action": ["kms:Decrypt", "kms:DescribeKey"]})
    assert kms("kms:Decrypt", ROLE, key, (allow_all_identity(),)).allowed
    assert not kms("kms:ScheduleKeyDeletion", ROLE, key, (allow_all_identity(),)).allowed


def test_an_explicit_deny_in_the_key_policy_wins_over_a_direct_allow() -> None:
    key = key_policy(
        {"Effect": "Allow", "Principal": {"AWS": ROLE_ARN}, "Action": "kms:*", "Resource": "*"},
        {
            "Sid": "NoDelete",
            "Effect": "Deny",
            "Principal": {"AWS": ACCOUNT},
            "Action": "kms:ScheduleKeyDeletion",
            "Resource": "*",
        },
    )
    assert kms("kms:Decrypt", ROLE, key).allowed
    decision = kms("kms:ScheduleKeyDeletion", ROLE, key)
    assert decision.outcome is Outcome.EXPLICIT_DENY
    assert "NoDelete" in decision.reason


def test_an_explicit_deny_in_an_identity_policy_wins_over_the_key_policy() -> None:
    key = key_policy({"Effect": "Allow", "Principal": {"AWS": ROLE_ARN}, "Action": "kms:*", "Resource": "*"})
    deny = policy({"Effect": "Deny", "Action": "kms:Decrypt", "Resource": "*"})
    assert kms("kms:Decrypt", ROLE, key, (deny,)).outcome is Outcome.EXPLICIT_DENY


def test_the_root_statement_does_not_cover_a_service_principal() -> None:
    assert kms("kms:Decrypt", SNS, key_policy(ROOT_STATEMENT)).outcome is Outcome.IMPLICIT_DENY


def test_a_role_calling_through_a_service_is_allowed_only_with_kms_via_service() -> None:
    # The statement CDK writes for a secret's key: the account, but only through Secrets Manager.
    key = key_policy(
        {
            **ROOT_STATEMENT,
            "Sid": "ThroughSecretsManager",
            "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
            "Condition": {"StringEquals": {"kms:ViaService": "secretsmanager.us-east-1.amazonaws.com"}},
        }
    )
    identity = (policy({"Effect": "Allow", "Action": "kms:Decrypt", "Resource": KEY}),)
    via = {"kms:ViaService": "secretsmanager.us-east-1.amazonaws.com", "kms:CallerAccount": ACCOUNT}
    assert kms("kms:Decrypt", ROLE, key, identity, via).allowed
    assert not kms("kms:Decrypt", ROLE, key, identity).allowed
    assert not kms("kms:Decrypt", ROLE, key, identity, {"kms:ViaService": "sqs.us-east-1.amazonaws.com"}).allowed


def test_the_logs_service_may_use_the_key_only_for_log_groups_of_the_account() -> None:
    # The statement CDK writes to let CloudWatch Logs encrypt log groups (ArnLike on the encryption context).
    key = key_policy(
        {
            "Sid": "AllowLogsService",
            "Effect": "Allow",
            "Principal": {"Service": "logs.us-east-1.amazonaws.com"},
            "Action": ["kms:Decrypt*", "kms:Describe*", "kms:Encrypt*", "kms:GenerateDataKey*", "kms:ReEncrypt*"],
            "Resource": "*",
            "Condition": {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": f"arn:aws:logs:us-east-1:{ACCOUNT}:*"}},
        }
    )
    logs = Principal.service("logs.us-east-1.amazonaws.com")
    own = {"kms:EncryptionContext:aws:logs:arn": LOG_GROUP}
    foreign = {"kms:EncryptionContext:aws:logs:arn": f"arn:aws:logs:us-east-1:{OTHER_ACCOUNT}:log-group:x"}
    assert kms("kms:GenerateDataKeyWithoutPlaintext", logs, key, context=own).allowed
    assert kms("kms:Decrypt", logs, key, context=own).allowed
    assert not kms("kms:Decrypt", logs, key, context=foreign).allowed
    assert not kms("kms:Decrypt", logs, key).allowed
    assert not kms("kms:CreateGrant", logs, key, context=own).allowed
    assert not kms("kms:Decrypt", Principal.service("logs.eu-west-1.amazonaws.com"), key, context=own).allowed


def test_a_grant_for_an_aws_resource_is_allowed_only_when_kms_says_so() -> None:
    # The key policy statement "Allow attachment of persistent resources" (AWS KMS Developer Guide, default key policy).
    key = key_policy(
        {
            "Sid": "Allow attachment of persistent resources",
            "Effect": "Allow",
            "Principal": {"AWS": ROLE_ARN},
            "Action": ["kms:CreateGrant", "kms:ListGrants", "kms:RevokeGrant"],
            "Resource": "*",
            "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"}},
        }
    )
    assert kms("kms:CreateGrant", ROLE, key, context={"kms:GrantIsForAWSResource": True}).allowed
    assert not kms("kms:CreateGrant", ROLE, key, context={"kms:GrantIsForAWSResource": False}).allowed
    assert not kms("kms:CreateGrant", ROLE, key).allowed


def test_a_key_policy_statement_without_a_principal_is_malformed() -> None:
    key = policy({"Effect": "Allow", "Action": "kms:*", "Resource": "*"})
    with pytest.raises(PolicyError, match="Principal"):
        kms("kms:Decrypt", ROLE, key)


def test_kms_refuses_a_role_of_another_account_and_a_resource_that_is_not_a_key() -> None:
    stranger = Principal.role(f"arn:aws:iam::{OTHER_ACCOUNT}:role/Worker")
    with pytest.raises(ValueError, match="account"):
        kms("kms:Decrypt", stranger, key_policy(ROOT_STATEMENT))
    with pytest.raises(ValueError, match="key"):
        decide_kms(Request("kms:Decrypt", QUEUE, ROLE), key_policy=key_policy(ROOT_STATEMENT))


# --- Role trust policies -------------------------------------------------------------------------------------------

STATES_TRUST = Policy.parse(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Action": "sts:AssumeRole",
                "Effect": "Allow",
                "Principal": {"Service": "states.amazonaws.com"},
                "Condition": {
                    "ArnLike": {"aws:SourceArn": f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:*"},
                    "StringEquals": {"aws:SourceAccount": ACCOUNT},
                },
            }
        ],
    },
    "OnboardingRole (trust policy)",
)
WORKFLOW_ROLE = f"arn:aws:iam::{ACCOUNT}:role/OnboardingRole"


def test_a_service_may_assume_a_role_whose_trust_policy_names_it_with_matching_source() -> None:
    context = {"aws:SourceArn": STATE_MACHINE, "aws:SourceAccount": ACCOUNT}
    decision = decide_assume_role("states.amazonaws.com", WORKFLOW_ROLE, STATES_TRUST, context)
    assert decision.outcome is Outcome.ALLOW
    assert "OnboardingRole (trust policy)" in decision.reason


@pytest.mark.parametrize(
    "context",
    [
        {"aws:SourceArn": STATE_MACHINE, "aws:SourceAccount": OTHER_ACCOUNT},
        {
            "aws:SourceArn": f"arn:aws:states:us-east-1:{OTHER_ACCOUNT}:stateMachine:Onboarding",
            "aws:SourceAccount": ACCOUNT,
        },
        {"aws:SourceArn": f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:Onboarding", "aws:SourceAccount": ACCOUNT},
        {"aws:SourceAccount": ACCOUNT},
        {},
    ],
)
def test_a_service_may_not_assume_the_role_when_the_source_does_not_match(context: Mapping[str, ContextValue]) -> None:
    decision = decide_assume_role("states.amazonaws.com", WORKFLOW_ROLE, STATES_TRUST, context)
    assert decision.outcome is Outcome.IMPLICIT_DENY


def test_a_service_the_trust_policy_does_not_name_may_not_assume_the_role() -> None:
    context = {"aws:SourceArn": STATE_MACHINE, "aws:SourceAccount": ACCOUNT}
    assert not decide_assume_role("lambda.amazonaws.com", WORKFLOW_ROLE, STATES_TRUST, context).allowed


def test_a_trust_policy_deny_wins() -> None:
    trust = Policy.parse(
        {
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"},
                {"Effect": "Deny", "Principal": "*", "Action": "sts:*"},
            ]
        },
        "trust",
    )
    assert decide_assume_role("lambda.amazonaws.com", ROLE_ARN, trust, {}).outcome is Outcome.EXPLICIT_DENY


def test_a_trust_statement_for_another_action_does_not_allow_assume_role() -> None:
    trust = Policy.parse(
        {
            "Statement": {
                "Effect": "Allow",
                "Principal": {"Service": "lambda.amazonaws.com"},
                "Action": "sts:TagSession",
            }
        },
        "trust",
    )
    assert not decide_assume_role("lambda.amazonaws.com", ROLE_ARN, trust, {}).allowed


@pytest.mark.parametrize(
    "statement",
    [
        {
            "Effect": "Allow",
            "Principal": {"Service": "lambda.amazonaws.com"},
            "Action": "sts:AssumeRole",
            "Resource": "*",
        },
        {"Effect": "Deny", "NotPrincipal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"},
        {"Effect": "Allow", "Action": "sts:AssumeRole"},
    ],
)
def test_a_trust_policy_with_a_resource_a_notprincipal_or_no_principal_is_malformed(
    statement: Mapping[str, Any],
) -> None:
    trust = Policy.parse({"Statement": [statement]}, "trust")
    with pytest.raises(PolicyError):
        decide_assume_role("lambda.amazonaws.com", ROLE_ARN, trust, {})


# --- Principals ------------------------------------------------------------------------------------------------------


def test_a_role_principal_knows_its_account_and_a_service_principal_has_none() -> None:
    assert ROLE.kind == "role"
    assert ROLE.account == ACCOUNT
    assert SNS.kind == "service"
    assert SNS.arn == "sns.amazonaws.com"
    assert SNS.account is None


def test_principal_context_gives_the_principal_keys_aws_always_sets() -> None:
    assert principal_context(ROLE) == {
        "aws:PrincipalArn": ROLE_ARN,
        "aws:PrincipalAccount": ACCOUNT,
        "aws:PrincipalType": "AssumedRole",
    }
    assert principal_context(SNS) == {"aws:PrincipalServiceName": "sns.amazonaws.com"}
    guarded = allow_all_identity(Condition={"StringEquals": {"aws:PrincipalAccount": ACCOUNT}})
    assert decide(Request("sqs:SendMessage", QUEUE, ROLE, principal_context(ROLE)), identity=[guarded]).allowed


@pytest.mark.parametrize("arn", ["arn:aws:iam::123:role/X", f"arn:aws:iam::{ACCOUNT}:user/X", "Worker", ""])
def test_a_role_principal_needs_a_role_arn(arn: str) -> None:
    with pytest.raises(ValueError, match="role"):
        Principal.role(arn)


@pytest.mark.parametrize("name", ["sns", "SNS.amazonaws.com", "*.amazonaws.com", ""])
def test_a_service_principal_needs_a_service_principal_name(name: str) -> None:
    with pytest.raises(ValueError, match="service"):
        Principal.service(name)
