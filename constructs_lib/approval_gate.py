"""A human-in-the-loop pause for any state machine: checkpoint, ask a reviewer, resume or divert."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import Acknowledgment, Duration, IResolvable, Stack, Token, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_ssm as ssm
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct, IValidation

from constructs_lib.encryption_key import EncryptionKey
from constructs_lib.nag_findings import acknowledge_policy, resource_finding
from constructs_lib.shared_function import SharedFunction

#: Error the review Lambda fails the task with when the reviewer rejects.
REJECTED_ERROR = "ReviewRejected"
#: Error the request Lambda raises when no time is left for a decision (treated as expiry).
WINDOW_CLOSED_ERROR = "ReviewWindowClosed"
DEFAULT_HANDLER = "lambdas.orchestration.review_request.handler"
# Transient errors of the request step (Lambda service, throttling, AWS API calls in the handler).
_TRANSIENT_ERRORS = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
    "ClientError",
]
_MAX_TIMEOUT = Duration.days(365)
_OUTCOME_PATH = re.compile(r"^\$\.[A-Za-z_][A-Za-z0-9_]*$")


def _path_or_value(value: str | IResolvable) -> str | IResolvable:
    """A plain ``$.x`` / ``$$.x`` string as a JSONPath (``TaskInput.from_object`` would send it literally)."""
    if isinstance(value, str) and not Token.is_unresolved(value) and value.startswith("$"):
        return sfn.JsonPath.object_at(value)
    return value


@jsii.implements(IValidation)
class _RejectionPathAttached:
    def __init__(self, gate: HumanApprovalGate) -> None:
        self._gate = gate

    def validate(self) -> list[str]:
        if self._gate.rejection_attached:
            return []
        return [
            f"HumanApprovalGate {self._gate.node.path}: no rejection path; attach one with "
            "gate.on_rejected(next_state) (e.g. notify the requester, then a Fail state)"
        ]


class HumanApprovalGate(sfn.StateMachineFragment):
    """Pause a workflow until a person approves it by a signed e-mail link (seed 001).

    Example::

        gate = HumanApprovalGate(self, "ExportApproval", code_root=LAMBDAS_DIR, table=table,
                                 link_base_url=api.url, reviewer_email="dpo@example.com")
        gate.on_rejected(notify_requester.next(sfn.Fail(self, "Rejected")))
        machine = sfn.StateMachine(self, "Export", definition_body=sfn.DefinitionBody.from_chainable(
            prepare.next(gate).next(export)))
        gate.grant_decide(review_link_function, machine)   # the Lambda behind the links

    What happens: the ``<id>RequestReview`` task invokes the request Lambda with
    ``waitForTaskToken``. The Lambda writes a ``REVIEW#<id>`` record (status ``pending_review``,
    the gate's input state serialised, ``requested_by``, ``created_at``, ``expires_at``, TTL and
    the task token, which never leaves the table) and publishes approve/reject links, signed with
    HMAC-SHA256 over (review id, decision, expiry), to the reviewer topic. Then:

    * approve: the link handler (``lambdas.api.review``) completes the token with the
      checkpointed state, so the chain continues with exactly the state the gate was given;
    * reject: the task fails with ``ReviewRejected``; ``<id>Rejected`` sets
      ``{"outcome": "rejected", "reason": "rejected", "review_id": ...}`` at ``outcome_path``
      and goes on to the rejection path;
    * expiry: the task times out (``States.Timeout``); ``<id>Expired`` sets
      ``{"outcome": "rejected", "reason": "expired"}`` and goes on to the same rejection path;
    * any other error, once its retries are spent: ``<id>Failed`` sets
      ``{"outcome": "rejected", "reason": "failed", "error": <error name>}``, same path.

    The rejection path is the caller's: attach it with :meth:`on_rejected` (synth fails
    without one). Links stop working ``min(1 minute, timeout / 10)`` before the task times
    out, so a click never approves a review the workflow has already given up on.

    Args:
        code_root: the Python package holding the request handler (e.g. ``lambdas``).
        table: the single table holding ``REVIEW#`` records (read/write is granted).
        link_base_url: base URL of the REST API that serves ``/reviews/{id}/approve|reject``:
            a string or token (e.g. ``rest_api.url``), or an SSM String parameter holding it,
            read by the Lambda at run time (for an API deployed after the workflow).
        reviewer_email: e-mail address subscribed to a new reviewer topic. Defaults to no
            subscription (subscribe reviewers to ``topic`` yourself).
        existing_topic: reviewer topic to publish to instead of creating one (fails together
            with ``reviewer_email``). Defaults to a new topic, KMS-encrypted, SSL-only.
        encryption_key: KMS key of the new topic and the new signing secret. Defaults to a new
            customer-managed key with yearly rotation.
        signing_secret: secret whose string value (32+ characters) signs the links. Defaults to
            a new secret of 64 random characters, encrypted with ``encryption_key``.
        timeout: how long the workflow waits for a decision. Defaults to ``review_ttl_days``.
        review_ttl_days: days until DynamoDB's TTL removes the record (1..365, at least the
            timeout). Defaults to 7 (seed 001).
        subject: e-mail subject, at most 100 characters. Defaults to "Approval needed".
        requested_by: JSONPath (``"$.requested_by"`` or ``sfn.JsonPath.string_at(...)``) or a
            literal naming who asked. Defaults to the execution's ARN.
        details: JSONPath (``"$.reason"`` or ``sfn.JsonPath.object_at(...)``) of a value shown to
            the reviewer in the e-mail (keep it free of personal data: e-mail is not a private
            channel). Defaults to nothing from the state.
        outcome_path: where the rejection path finds ``outcome``/``reason``. Defaults to ``$.approval``.
        handler: request handler. Defaults to ``lambdas.orchestration.review_request.handler``.
        log_retention: retention of the request Lambda's logs. Defaults to one week.
        log_encryption_key: KMS key of that log group. Defaults to CloudWatch Logs' encryption.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code_root: Path,
        table: dynamodb.ITable,
        link_base_url: str | ssm.IStringParameter,
        reviewer_email: str | None = None,
        existing_topic: sns.ITopic | None = None,
        encryption_key: kms.IKey | None = None,
        signing_secret: secretsmanager.ISecret | None = None,
        timeout: Duration | None = None,
        review_ttl_days: int = 7,
        subject: str = "Approval needed",
        requested_by: str | IResolvable | None = None,
        details: str | IResolvable | None = None,
        outcome_path: str = "$.approval",
        handler: str = DEFAULT_HANDLER,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_WEEK,
        log_encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if existing_topic is not None and reviewer_email is not None:
            raise ValueError(
                "give either existing_topic or reviewer_email, not both "
                "(subscribe the reviewer to your own topic yourself)"
            )
        if isinstance(review_ttl_days, bool) or not isinstance(review_ttl_days, int) or not 1 <= review_ttl_days <= 365:
            raise ValueError(f"review_ttl_days must be an int in 1..365 (given {review_ttl_days!r})")
        wait = timeout or Duration.days(review_ttl_days)
        wait_seconds = int(wait.to_milliseconds() // 1000)
        if not 1 <= wait_seconds <= _MAX_TIMEOUT.to_seconds() or wait.to_milliseconds() % 1000:
            raise ValueError(f"timeout must be whole seconds in 1 s..365 days (given {wait.to_milliseconds()} ms)")
        if wait_seconds > review_ttl_days * 86400:
            raise ValueError(
                f"timeout ({wait_seconds} s) must not exceed review_ttl_days ({review_ttl_days} d): "
                "TTL would delete a review that can still be decided; raise review_ttl_days"
            )
        if not subject.strip() or len(subject) > 100:
            raise ValueError(f"subject must be 1..100 characters (given {len(subject)})")
        if not _OUTCOME_PATH.match(outcome_path):
            raise ValueError(f"outcome_path must be a top-level path like '$.approval' (given {outcome_path!r})")
        literal_url = isinstance(link_base_url, str) and not Token.is_unresolved(link_base_url)
        if literal_url and not str(link_base_url).startswith("https://"):
            raise ValueError(f"link_base_url must be an https:// URL (given {link_base_url!r})")

        self.table: dynamodb.ITable = table
        self.timeout: Duration = wait
        self.outcome_path = outcome_path
        self._rejection_attached = False
        self._state_machines: list[sfn.IStateMachine] = []
        prefix = construct_id

        key = encryption_key
        if key is None and (existing_topic is None or signing_secret is None):
            key = EncryptionKey(self, "Key", description=f"Approval gate {self.node.path}: topic and secret").key
        self.encryption_key: kms.IKey | None = key

        if existing_topic is not None:
            self.topic: sns.ITopic = existing_topic
        else:
            topic = sns.Topic(
                self,
                "Topic",
                display_name="Approval requests",
                master_key=key,
                enforce_ssl=True,
            )
            if reviewer_email is not None:
                topic.add_subscription(subscriptions.EmailSubscription(reviewer_email))
            self.topic = topic

        if signing_secret is not None:
            self.signing_secret: secretsmanager.ISecret = signing_secret
        else:
            secret = secretsmanager.Secret(
                self,
                "SigningSecret",
                description="Signs approve/reject links of the approval gate (HMAC-SHA256)",
                encryption_key=key,
                generate_secret_string=secretsmanager.SecretStringGenerator(
                    password_length=64, exclude_punctuation=True
                ),
            )
            Validations.of(secret).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-SMG4",
                    reason="The key signs review links that live at most the review timeout; rotating it "
                    "would invalidate every pending link. Rotate by replacing the secret between reviews.",
                )
            )
            self.signing_secret = secret

        margin = min(60, wait_seconds // 10)
        environment = {
            "TABLE_NAME": table.table_name,
            "REVIEW_SECRET_ARN": self.signing_secret.secret_arn,
            "REVIEWER_TOPIC_ARN": self.topic.topic_arn,
            "REVIEW_TIMEOUT_SECONDS": str(wait_seconds),
            "REVIEW_DECISION_MARGIN_SECONDS": str(margin),
            "REVIEW_TTL_DAYS": str(review_ttl_days),
            "REVIEW_SUBJECT": subject,
        }
        if isinstance(link_base_url, str):
            environment["LINK_BASE_URL"] = link_base_url
        else:
            environment["LINK_BASE_URL_PARAMETER"] = link_base_url.parameter_name

        self.request_function: SharedFunction = SharedFunction(
            self,
            "RequestFunction",
            code_root=code_root,
            handler=handler,
            service_name="approval-gate",
            description="Approval gate: checkpoint the workflow and e-mail signed review links",
            environment=environment,
            timeout=Duration.seconds(30),
            log_retention=log_retention,
            log_encryption_key=log_encryption_key,
        )
        fn = self.request_function.function
        table.grant_read_write_data(fn)
        self.signing_secret.grant_read(fn)
        self.topic.grant_publish(fn)
        if not isinstance(link_base_url, str):
            link_base_url.grant_read(fn)
        acknowledge_policy(
            self.request_function.role,
            {
                "Action::kms:GenerateDataKey*": "CDK's KMS grants on the named keys of the table and the topic "
                "(data keys to write a review and publish the e-mail); no resource wildcard.",
                "Action::kms:ReEncrypt*": "Part of CDK's encrypt/decrypt grant on the table's one named key.",
                resource_finding(self, table.table_arn, "/index/*", owner=table): "CDK's table read/write grant "
                "names the table's own indexes; the request step only puts and gets one REVIEW# item.",
            },
        )

        payload: dict[str, Any] = {
            "task_token": sfn.JsonPath.task_token,
            "state": sfn.JsonPath.object_at("$"),
            "requested_by": _path_or_value(requested_by) if requested_by else sfn.JsonPath.string_at("$$.Execution.Id"),
            "entered_time": sfn.JsonPath.string_at("$$.State.EnteredTime"),
            "execution_id": sfn.JsonPath.string_at("$$.Execution.Id"),
        }
        if details is not None:
            payload["details"] = _path_or_value(details)
        self.request_review: tasks.LambdaInvoke = tasks.LambdaInvoke(
            self,
            "RequestReview",
            state_name=f"{prefix}RequestReview",
            comment="Checkpoint the state, e-mail signed approve/reject links, wait for the decision",
            lambda_function=fn,
            integration_pattern=sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
            payload=sfn.TaskInput.from_object(payload),
            task_timeout=sfn.Timeout.duration(wait),
            retry_on_service_exceptions=False,
        )
        self.request_review.add_retry(
            errors=_TRANSIENT_ERRORS,
            interval=Duration.seconds(2),
            max_attempts=4,
            backoff_rate=2,
            max_delay=Duration.seconds(30),
            jitter_strategy=sfn.JitterType.FULL,
        )
        self.rejected: sfn.Pass = sfn.Pass(
            self,
            "Rejected",
            state_name=f"{prefix}Rejected",
            comment="The reviewer rejected: record why, then the rejection path",
            parameters={
                "outcome": "rejected",
                "reason": "rejected",
                "review_id": sfn.JsonPath.string_at(f"{outcome_path}.Cause"),
            },
            result_path=outcome_path,
        )
        self.expired: sfn.Pass = sfn.Pass(
            self,
            "Expired",
            state_name=f"{prefix}Expired",
            comment="Nobody decided in time: the same as a rejection, reason expired",
            parameters={"outcome": "rejected", "reason": "expired"},
            result_path=outcome_path,
        )
        self.failed: sfn.Pass = sfn.Pass(
            self,
            "Failed",
            state_name=f"{prefix}Failed",
            comment="The review could not be requested or decided (retries exhausted): not approved",
            parameters={
                "outcome": "rejected",
                "reason": "failed",
                "error": sfn.JsonPath.string_at(f"{outcome_path}.Error"),
            },
            result_path=outcome_path,
        )
        self.request_review.add_catch(self.rejected, errors=[REJECTED_ERROR], result_path=outcome_path)
        self.request_review.add_catch(
            self.expired, errors=["States.Timeout", WINDOW_CLOSED_ERROR], result_path=outcome_path
        )
        # Anything else (the request Lambda failing after its retries, say) is not an approval
        # either: it takes the same rejection path, with reason "failed" and the error's name.
        self.request_review.add_catch(self.failed, errors=["States.ALL"], result_path=outcome_path)
        self.node.add_validation(_RejectionPathAttached(self))

    # ------------------------------------------------------------------ fragment

    @property
    def start_state(self) -> sfn.State:
        return self.request_review

    @property
    def end_states(self) -> list[sfn.INextable]:
        # Only approval continues the chain; rejection and expiry go to on_rejected's path.
        return [self.request_review]

    @property
    def rejection_attached(self) -> bool:
        return self._rejection_attached

    def on_rejected(self, next_state: sfn.IChainable) -> HumanApprovalGate:
        """Where a rejected or expired review goes (its input: the gate's input + ``outcome_path``).

        Returns the gate, so ``prepare.next(gate.on_rejected(fail)).next(export)`` reads in order.
        """
        if self._rejection_attached:
            raise ValueError(f"HumanApprovalGate {self.node.path}: the rejection path is attached already")
        self.rejected.next(next_state)
        self.expired.next(next_state)
        self.failed.next(next_state)
        self._rejection_attached = True
        return self

    # ------------------------------------------------------------------ permissions

    def bind(self, state_machine: sfn.IStateMachine) -> None:
        """Record a state machine that runs this gate, for :meth:`grant_decide` without arguments."""
        self._state_machines.append(state_machine)

    def grant_decide(
        self, grantee: iam.IGrantable, state_machine: sfn.IStateMachine | Sequence[sfn.IStateMachine] | None = None
    ) -> None:
        """Everything the link handler needs: complete the task tokens of the state machine(s)
        running the gate (given, or bound with :meth:`bind`), read the signing secret, read and
        conditionally update the review records."""
        if state_machine is None:
            machines = list(self._state_machines)
        elif isinstance(state_machine, Sequence):
            machines = list(state_machine)
        else:
            machines = [state_machine]
        if not machines:
            raise ValueError(
                f"HumanApprovalGate {self.node.path}: grant_decide needs the state machine that runs "
                "the gate (pass it, or call gate.bind(state_machine) first)"
            )
        for machine in machines:
            machine.grant_task_response(grantee)
        self.grant_read_signing_secret(grantee)
        self.table.grant_read_write_data(grantee)

    def grant_read_signing_secret(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read the signing secret, granted on the principal's side only.

        ``Secret.grant_read`` also writes the grantee's role into the key policy of the secret's
        key (a ViaService grant); for a grantee in a stack deployed after this one (the REST API
        that serves the links) that reference is a dependency cycle. The key policy already lets
        IAM policies of the account decrypt through Secrets Manager, so an identity policy with
        ``kms:Decrypt`` (condition ``kms:ViaService``) is enough.
        """
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
            resource_arns=[self.signing_secret.secret_arn],
        )
        key = self.signing_secret.encryption_key
        if key is not None:
            via = f"secretsmanager.{Stack.of(self).region}.amazonaws.com"
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=["kms:Decrypt"],
                resource_arns=[key.key_arn],
                conditions={"StringEquals": {"kms:ViaService": via}},
            )
        return grant

    def decide_environment(self) -> dict[str, str]:
        """The environment of the link handler (``lambdas.api.review``)."""
        return {"TABLE_NAME": self.table.table_name, "REVIEW_SECRET_ARN": self.signing_secret.secret_arn}
