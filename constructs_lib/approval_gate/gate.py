"""A human-in-the-loop pause for any state machine: checkpoint, ask a reviewer, resume or divert."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import Acknowledgment, Duration, IResolvable, RemovalPolicy, Stack, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_ssm as ssm
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct, IValidation

from constructs_lib.approval_gate.checks import check_texts, checked_wait, key_layout
from constructs_lib.email_subscription import subscribe_email
from constructs_lib.encryption_key import EncryptionKey
from constructs_lib.nag_findings import acknowledge_policy, resource_finding
from constructs_lib.shared_function import SharedFunction
from constructs_lib.validation import PropErrors, struct_values
from constructs_lib.workflow_defaults import callback_input, grant_history_key

#: Error the review Lambda fails the task with when the reviewer rejects.
REJECTED_ERROR = "ReviewRejected"
#: Error the request Lambda raises when no time is left for a decision (treated as expiry).
WINDOW_CLOSED_ERROR = "ReviewWindowClosed"
#: The gate's own code asset: this package directory, and nothing else of the library.
RUNTIME_DIR = Path(__file__).resolve().parent / "gate_runtime"
#: Handlers inside the asset (``gate_runtime`` is the asset's top-level package in Lambda).
REQUEST_HANDLER = "gate_runtime.request.handler"
DECISION_HANDLER = "gate_runtime.decide.handler"
#: Where the same modules are importable inside the library (tests, local harnesses).
RUNTIME_PACKAGE = "constructs_lib.approval_gate.gate_runtime"
# Transient errors of the request step (Lambda service, throttling, AWS API calls in the handler).
_TRANSIENT_ERRORS = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
    "ClientError",
]


def _link_base_environment(link_base_url: str | ssm.IStringParameter) -> dict[str, str]:
    """Where the request function finds the links' base URL: the URL, or the parameter holding it."""
    if isinstance(link_base_url, str):
        return {"LINK_BASE_URL": link_base_url}
    return {"LINK_BASE_URL_PARAMETER": link_base_url.parameter_name}


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
    """Pause a workflow until a person approves it by a signed e-mail link.

    Example::

        gate = HumanApprovalGate(self, "Approval", link_base_url=api.url, reviewer_email="dpo@example.com")
        gate.on_rejected(notify_requester.next(sfn.Fail(self, "Rejected")))
        machine = sfn.StateMachine(self, "Export", definition_body=sfn.DefinitionBody.from_chainable(
            prepare.next(gate).next(export)))
        gate.bind(machine)                      # the decision function may complete its tasks
        gate.add_review_routes(api.root)        # GET (confirm) + POST /reviews/{id}/approve|reject

    The gate brings its own code (the ``gate_runtime`` package beside this module, standard
    library and boto3 only): ``request_function`` and ``decision_function``.

    What happens: the ``<id>RequestReview`` task invokes the request function with
    ``waitForTaskToken``. It writes a review record (status ``pending_review``, the gate's input
    state serialised, ``requested_by``, ``created_at``, ``expires_at``, TTL and the task token,
    which never leaves the table) and publishes approve/reject links, signed with HMAC-SHA256
    over (review id, decision, expiry), to the reviewer topic. Then:

    * approve: the decision function (behind the links) completes the token with the
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
    out, so a click never approves a review the workflow has already given up on. Invalid props
    fail the synthesis with the gate's construct path (CDK's ``node.add_validation``).

    Args:
        link_base_url: base URL under which :meth:`add_review_routes` mounts
            ``reviews/{id}/approve|reject``: a string or token (e.g. ``rest_api.url``), or an SSM
            String parameter holding it, read by the function at run time (for an API deployed
            after the workflow).
        existing_table: table holding the review records (read/write is granted). Defaults to a
            new table of the gate's own: partition key ``PK`` only, on-demand, encrypted with
            ``encryption_key``, point-in-time recovery, TTL on ``ttl``, removed with the stack
            (reviews live days at most).
        table_props: properties of the new table; they override its defaults. Defaults to none.
        partition_key: partition key attribute of the table. Defaults to the table's own when it
            is a ``dynamodb.Table`` defined in the app; required for an imported table.
        sort_key: sort key attribute of the table. Defaults to the table's own (as above); none
            for an imported table.
        key_prefix: partition key value of a review: ``<key_prefix><review id>``. Defaults to
            ``"REVIEW#"``.
        sort_key_value: sort key value of a review (tables with a sort key). Defaults to ``"META"``.
        ttl_attribute: the table's TTL attribute. Defaults to ``"ttl"``.
        reviewer_email: e-mail address subscribed to the new reviewer topic (not with
            ``existing_topic``: subscribe reviewers to your topic yourself), with a dead-letter
            queue on the gate's key for what SNS cannot deliver (a given ``encryption_key`` must
            then let ``sns.amazonaws.com`` use it). Defaults to none.
        existing_topic: reviewer topic to publish to. Defaults to a new topic, KMS-encrypted,
            SSL-only, displayed as "Approval requests".
        topic_props: properties of the new topic; they override its defaults. Defaults to none.
        encryption_key: KMS key of the new topic, secret and table. Defaults to a new
            customer-managed key with yearly rotation (only when the gate creates one of them).
        existing_signing_secret: secret whose string value (32+ characters) signs the links.
            Defaults to a new secret of 64 random characters, encrypted with ``encryption_key``.
        signing_secret_props: properties of the new secret; they override its defaults.
            Defaults to none.
        timeout: how long the workflow waits for a decision. Defaults to ``review_ttl_days``.
        review_ttl_days: days until DynamoDB's TTL removes the record (1..365, at least the
            timeout). Defaults to 7.
        subject: e-mail subject, at most 100 characters. Defaults to "Approval needed".
        requested_by: JSONPath naming who asked (``"$.requested_by"``; a plain path string keeps
            CDK's task-token check from parsing it, see :func:`~constructs_lib.workflow_defaults.callback_input`; a
            ``sfn.JsonPath`` token works too), or a literal. Defaults to the execution's ARN.
        details: JSONPath (``"$.reason"``, or a ``sfn.JsonPath`` token) of a value shown to the
            reviewer in the e-mail (keep it free of personal data: e-mail is not a private
            channel). Defaults to nothing from the state.
        outcome_path: where the rejection path finds ``outcome``/``reason``. Defaults to ``$.approval``.
        log_retention: retention of the functions' logs. Defaults to one week.
        log_encryption_key: KMS key of those log groups. Defaults to CloudWatch Logs' encryption.
        powertools_layer: the layer :class:`SharedFunction` attaches (the gate's code does not use
            it). Defaults to the official public Powertools layer.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        link_base_url: str | ssm.IStringParameter,
        existing_table: dynamodb.ITable | None = None,
        table_props: dynamodb.TableProps | None = None,
        partition_key: str | None = None,
        sort_key: str | None = None,
        key_prefix: str = "REVIEW#",
        sort_key_value: str = "META",
        ttl_attribute: str = "ttl",
        reviewer_email: str | None = None,
        existing_topic: sns.ITopic | None = None,
        topic_props: sns.TopicProps | None = None,
        encryption_key: kms.IKey | None = None,
        existing_signing_secret: secretsmanager.ISecret | None = None,
        signing_secret_props: secretsmanager.SecretProps | None = None,
        timeout: Duration | None = None,
        review_ttl_days: int = 7,
        subject: str = "Approval needed",
        requested_by: str | IResolvable | None = None,
        details: str | IResolvable | None = None,
        outcome_path: str = "$.approval",
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_WEEK,
        log_encryption_key: kms.IKey | None = None,
        powertools_layer: lambda_.ILayerVersion | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        errors = self._errors = PropErrors(self)
        days, wait, wait_seconds = checked_wait(errors, review_ttl_days, timeout)
        check_texts(
            errors, subject=subject, outcome_path=outcome_path, link_base_url=link_base_url, key_prefix=key_prefix
        )
        errors.check_exclusive(existing_table=existing_table, table_props=table_props)
        errors.check_exclusive(existing_topic=existing_topic, topic_props=topic_props)
        errors.check_exclusive(existing_topic=existing_topic, reviewer_email=reviewer_email)
        errors.check_exclusive(
            existing_signing_secret=existing_signing_secret, signing_secret_props=signing_secret_props
        )

        self.timeout: Duration = wait
        self.outcome_path = outcome_path
        self._rejection_attached = False
        self._state_machines: list[sfn.IStateMachine] = []

        key = encryption_key
        self._own_key: EncryptionKey | None = None
        if key is None and any(given is None for given in (existing_topic, existing_signing_secret, existing_table)):
            self._own_key = EncryptionKey(self, "Key", description=f"Approval gate {self.node.path}: topic and secret")
            key = self._own_key.key
        self.encryption_key: kms.IKey | None = key
        self.table: dynamodb.ITable = existing_table or self._new_table(key, table_props)
        layout_env = self._layout_environment(
            errors, partition_key, sort_key, key_prefix, sort_key_value, ttl_attribute
        )
        self.topic: sns.ITopic = existing_topic or self._new_topic(key, reviewer_email, topic_props)
        self.signing_secret: secretsmanager.ISecret = existing_signing_secret or self._new_secret(
            key, signing_secret_props
        )

        environment = {
            "TABLE_NAME": self.table.table_name,
            **layout_env,
            "REVIEW_SECRET_ARN": self.signing_secret.secret_arn,
            "REVIEWER_TOPIC_ARN": self.topic.topic_arn,
            "REVIEW_TIMEOUT_SECONDS": str(wait_seconds),
            "REVIEW_DECISION_MARGIN_SECONDS": str(min(60, wait_seconds // 10)),
            "REVIEW_TTL_DAYS": str(days),
            "REVIEW_SUBJECT": subject,
            **_link_base_environment(link_base_url),
        }

        self._build_functions(
            environment, layout_env, link_base_url, log_retention, log_encryption_key, powertools_layer
        )
        self._build_states(construct_id, wait, outcome_path, requested_by, details)
        self.node.add_validation(_RejectionPathAttached(self))

    # ------------------------------------------------------------------ construction helpers

    def _layout_environment(
        self,
        errors: PropErrors,
        partition_key: str | None,
        sort_key: str | None,
        key_prefix: str,
        sort_key_value: str,
        ttl_attribute: str,
    ) -> dict[str, str]:
        """Where the functions find a review: the table's key attributes, the key values, the TTL attribute."""
        layout = key_layout(errors, self.table, partition_key, sort_key)
        environment = {
            "REVIEW_PARTITION_KEY": layout[0],
            "REVIEW_KEY_PREFIX": key_prefix,
            "REVIEW_TTL_ATTRIBUTE": ttl_attribute,
        }
        if layout[1] is not None:
            environment.update({"REVIEW_SORT_KEY": layout[1], "REVIEW_SORT_KEY_VALUE": sort_key_value})
        return environment

    def _new_topic(self, key: kms.IKey | None, reviewer_email: str | None, props: sns.TopicProps | None) -> sns.ITopic:
        topic = sns.Topic(
            self,
            "Topic",
            **{"display_name": "Approval requests", "master_key": key, "enforce_ssl": True, **struct_values(props)},
        )
        if reviewer_email is not None and key is not None:
            # A request SNS cannot mail waits in a queue on the gate's key (watch_stack alarms on it).
            if self._own_key is not None:
                self._own_key.allow_service("sns")
            subscribe_email(
                self, "ReviewerEmailDeadLetterQueue", topic=topic, address=reviewer_email, encryption_key=key
            )
        elif reviewer_email is not None:
            topic.add_subscription(subscriptions.EmailSubscription(reviewer_email))
        return topic

    def _new_secret(self, key: kms.IKey | None, props: secretsmanager.SecretProps | None) -> secretsmanager.ISecret:
        secret = secretsmanager.Secret(
            self,
            "SigningSecret",
            **{
                "description": "Signs approve/reject links of the approval gate (HMAC-SHA256)",
                "encryption_key": key,
                "generate_secret_string": secretsmanager.SecretStringGenerator(
                    password_length=64, exclude_punctuation=True
                ),
                **struct_values(props),
            },
        )
        Validations.of(secret).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SMG4",
                reason="The key signs review links that live at most the review timeout; rotating it "
                "would invalidate every pending link. Rotate by replacing the secret between reviews.",
            )
        )
        return secret

    def _build_functions(
        self,
        environment: dict[str, str],
        layout_env: dict[str, str],
        link_base_url: str | ssm.IStringParameter,
        log_retention: logs.RetentionDays,
        log_encryption_key: kms.IKey | None,
        powertools_layer: lambda_.ILayerVersion | None,
    ) -> None:
        """The request and decision functions, from the gate's own code asset, with their grants."""
        function_options: dict[str, Any] = {
            "code_root": RUNTIME_DIR,
            "timeout": Duration.seconds(30),
            "log_retention": log_retention,
            "log_encryption_key": log_encryption_key,
            "powertools_layer": powertools_layer,
        }
        self.request_function: SharedFunction = SharedFunction(
            self,
            "RequestFunction",
            handler=REQUEST_HANDLER,
            service_name="approval-gate",
            description="Approval gate: checkpoint the workflow and e-mail signed review links",
            environment=environment,
            **function_options,
        )
        fn = self.request_function.function
        self.table.grant_read_write_data(fn)
        self.signing_secret.grant_read(fn)
        self.topic.grant_publish(fn)
        if not isinstance(link_base_url, str):
            link_base_url.grant_read(fn)
        self._acknowledge_table_grant(
            self.request_function,
            "(data keys to write a review and publish the e-mail)",
            "the request step only puts and gets one review item.",
        )

        self.decision_function: SharedFunction = SharedFunction(
            self,
            "DecisionFunction",
            handler=DECISION_HANDLER,
            service_name="approval-gate-links",
            description="Approval gate: verify a signed review link, record the decision, resume the workflow",
            environment={
                "TABLE_NAME": self.table.table_name,
                **layout_env,
                "REVIEW_SECRET_ARN": self.signing_secret.secret_arn,
            },
            **function_options,
        )
        self.table.grant_read_write_data(self.decision_function.function)
        self.grant_read_signing_secret(self.decision_function.function)
        self._acknowledge_table_grant(
            self.decision_function,
            "(data keys to record a decision)",
            "the link handler only gets and conditionally updates one review item.",
        )

    def _build_states(
        self,
        prefix: str,
        wait: Duration,
        outcome_path: str,
        requested_by: str | IResolvable | None,
        details: str | IResolvable | None,
    ) -> None:
        """The RequestReview task and the three states that lead to the rejection path."""
        fn = self.request_function.function
        # Plain "$..." strings are read from the state (callback_input); tokens pass as given.
        payload: dict[str, Any] = {
            "task_token": sfn.JsonPath.task_token,
            "state": "$",
            "requested_by": requested_by or "$$.Execution.Id",
            "entered_time": "$$.State.EnteredTime",
            "execution_id": "$$.Execution.Id",
        }
        if details is not None:
            payload["details"] = details
        self.request_review: tasks.LambdaInvoke = tasks.LambdaInvoke(
            self,
            "RequestReview",
            state_name=f"{prefix}RequestReview",
            comment="Checkpoint the state, e-mail signed approve/reject links, wait for the decision",
            lambda_function=fn,
            integration_pattern=sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
            payload=callback_input(payload),
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

    def _new_table(self, key: kms.IKey | None, props: dynamodb.TableProps | None) -> dynamodb.ITable:
        """The gate's own small table, when the caller brings none."""
        return dynamodb.Table(
            self,
            "Table",
            **{
                "partition_key": dynamodb.Attribute(name="PK", type=dynamodb.AttributeType.STRING),
                "billing_mode": dynamodb.BillingMode.PAY_PER_REQUEST,
                "encryption": dynamodb.TableEncryption.CUSTOMER_MANAGED,
                "encryption_key": key,
                "point_in_time_recovery_specification": dynamodb.PointInTimeRecoverySpecification(
                    point_in_time_recovery_enabled=True
                ),
                "time_to_live_attribute": "ttl",
                "removal_policy": RemovalPolicy.DESTROY,
                **struct_values(props),
            },
        )

    def _acknowledge_table_grant(self, function: SharedFunction, data_keys: str, scope_note: str) -> None:
        """cdk-nag IAM5 findings of CDK's table grant, with the reason each is narrow enough."""
        acknowledge_policy(
            function.role,
            {
                "Action::kms:GenerateDataKey*": "CDK's KMS grants on the named keys of the table and the topic "
                f"{data_keys}; no resource wildcard.",
                "Action::kms:ReEncrypt*": "Part of CDK's encrypt/decrypt grant on the table's one named key.",
                resource_finding(self, self.table.table_arn, "/index/*", owner=self.table): "CDK's table "
                f"read/write grant names the table's own indexes; {scope_note}",
            },
        )

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
        if not self._errors.check(
            not self._rejection_attached,
            "on_rejected was called twice: the rejection path is attached already (attach one chain once)",
        ):
            return self
        self.rejected.next(next_state)
        self.expired.next(next_state)
        self.failed.next(next_state)
        self._rejection_attached = True
        return self

    # ------------------------------------------------------------------ permissions

    def bind(self, state_machine: sfn.IStateMachine) -> None:
        """Record a state machine that runs this gate and let the decision function complete its tasks."""
        self._state_machines.append(state_machine)
        grant_history_key(self.decision_function.function, state_machine, ["states:SendTaskSuccess"])
        state_machine.grant_task_response(self.decision_function.function)

    def add_review_routes(
        self, resource: apigw.IResource, *, method_options: apigw.MethodOptions | None = None
    ) -> dict[str, apigw.Method]:
        """Mount the review links on a REST API: ``GET`` and ``POST <resource>/reviews/{id}/approve|reject``.

        The GET (the link in the e-mail) only shows a confirmation page, because mail scanners
        fetch every link; its button POSTs the signed decision, and only the POST records it.
        The links the gate sends are ``<link_base_url>/reviews/...``, so pass the resource whose
        URL is ``link_base_url`` (``api.root`` for ``api.url``). ``method_options`` apply to all
        four methods; an ``operation_name`` in them is a prefix that gets ``Approve``/``Reject``
        (GET) or ``ApproveConfirmed``/``RejectConfirmed`` (POST) appended. Defaults to no
        authorizer (the link's signature is the credential) and the ``id`` path parameter marked
        required. Returns the methods by decision: ``approve``/``reject`` (GET) and
        ``approve_post``/``reject_post`` (POST).
        """
        options = method_options or apigw.MethodOptions(authorization_type=apigw.AuthorizationType.NONE)
        integration = apigw.LambdaIntegration(self.decision_function.function, allow_test_invoke=False)
        review = resource.add_resource("reviews").add_resource("{id}")
        methods: dict[str, apigw.Method] = {}
        for decision in ("approve", "reject"):
            decision_resource = review.add_resource(decision)
            for http_method, key, suffix in (("GET", decision, ""), ("POST", f"{decision}_post", "Confirmed")):
                name = f"{options.operation_name}{decision.capitalize()}{suffix}" if options.operation_name else None
                methods[key] = decision_resource.add_method(
                    http_method,
                    integration,
                    api_key_required=options.api_key_required,
                    authorization_scopes=options.authorization_scopes,
                    authorization_type=options.authorization_type or apigw.AuthorizationType.NONE,
                    authorizer=options.authorizer,
                    method_responses=options.method_responses,
                    operation_name=name,
                    request_models=options.request_models,
                    request_parameters=options.request_parameters or {"method.request.path.id": True},
                    request_validator=options.request_validator,
                    request_validator_options=options.request_validator_options,
                )
        return methods

    def grant_decide(
        self, grantee: iam.IGrantable, state_machine: sfn.IStateMachine | Sequence[sfn.IStateMachine] | None = None
    ) -> iam.Grant:
        """Everything the link handler needs: complete the task tokens of the state machine(s)
        running the gate (given, or bound with :meth:`bind`), read the signing secret, read and
        conditionally update the review records. Returns the grants, combined."""
        if state_machine is None:
            machines = list(self._state_machines)
        elif isinstance(state_machine, Sequence):
            machines = list(state_machine)
        else:
            machines = [state_machine]
        self._errors.check(
            bool(machines),
            "grant_decide needs the state machine that runs the gate (pass it, or call gate.bind(state_machine) first)",
        )
        grant = self.grant_read_signing_secret(grantee).combine(self.table.grant_read_write_data(grantee))
        for machine in machines:
            grant_history_key(grantee, machine, ["states:SendTaskSuccess"])
            grant = machine.grant_task_response(grantee).combine(grant)
        return grant

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
