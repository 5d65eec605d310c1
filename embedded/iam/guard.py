"""IAM, resource policies and KMS enforced on every call the stage's code makes, as AWS enforces them.

Inside ``Guard.installed()``:

* every boto3 call made as a role (a function's handler, a workflow's task; see
  :mod:`embedded.iam.caller`) is turned into the actions it needs (:mod:`embedded.iam.access`),
  plus the KMS actions its service performs with the caller's credentials on an encrypted
  resource, and each is decided against the role's identity policies, the resource's policy and
  the key's policy (:class:`~embedded.iam.authority.Authority`). A refusal raises the error the
  service raises (``AccessDeniedException``, S3 ``AccessDenied``, SNS ``AuthorizationError``,
  SQS ``KMS.AccessDeniedException``, ...), with the principal, the action and the resource in its
  message, before moto sees the call;
* the operator's calls (no role) go through unchecked, as an administrator's would;
* deliveries AWS makes as a service (a topic to a queue, a rule to its target, API Gateway to a
  function, a schedule with its role) are decided where the embedded stage makes them, with
  :meth:`Guard.deliver` (a service principal against resource and key policies) and
  :meth:`Guard.with_role` (a service assuming a role: the trust policy, then the role's rights).

Every refusal is kept in :attr:`Guard.refusals`, the stage's report of what AWS would have refused.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final
from unittest import mock

import botocore.client
from botocore.exceptions import ClientError
from moto.core.botocore_stubber import BotocoreStubber

from embedded import runtime
from embedded.iam import caller as callers
from embedded.iam.access import Access, Call, accesses, kms_accesses
from embedded.iam.authority import Authority
from embedded.iam.policy import ContextValue, Decision, decide_assume_role

#: The error each service answers an authorization failure with: (code, HTTP status). From the
#: service models where they define one, otherwise the service's documented common error.
ACCESS_DENIED: Final[dict[str, tuple[str, int]]] = {
    "dynamodb": ("AccessDeniedException", 400),
    "dynamodbstreams": ("AccessDeniedException", 400),
    "sqs": ("AccessDenied", 403),
    "sns": ("AuthorizationError", 403),
    "events": ("AccessDeniedException", 400),
    "firehose": ("AccessDeniedException", 400),
    "lambda": ("AccessDeniedException", 403),
    "stepfunctions": ("AccessDeniedException", 400),
    "s3": ("AccessDenied", 403),
    "scheduler": ("AccessDeniedException", 403),
    "sesv2": ("AccessDeniedException", 403),
    "secretsmanager": ("AccessDeniedException", 400),
    "ssm": ("AccessDeniedException", 400),
    "apigatewaymanagementapi": ("ForbiddenException", 403),
    "bedrock-runtime": ("AccessDeniedException", 403),
}
#: How a service answers when KMS refuses it the caller's key (SQS, SNS and Step Functions name KMS in the code).
KMS_DENIED: Final[dict[str, tuple[str, int]]] = {
    "sqs": ("KMS.AccessDeniedException", 400),
    "sns": ("KMSAccessDenied", 400),
    "stepfunctions": ("KmsAccessDeniedException", 400),
}


@dataclass(frozen=True)
class Refusal:
    """One call or delivery AWS would refuse: who, what, on which resource, and why."""

    principal: str  # a role's session ARN, or a service principal
    action: str
    resource: str
    reason: str
    made_by: str  # "function X", "state machine of role Y", "SNS delivery from topic Z"

    def message(self) -> str:
        return (
            f"User: {self.principal} is not authorized to perform: {self.action} on resource: {self.resource} "
            f"because {self.reason}"
        )

    def __str__(self) -> str:
        return f"AccessDenied ({self.made_by}): {self.message()}"


class Refused(Exception):
    """A delivery the embedded stage did not make because AWS would refuse it (see ``refusal``)."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal


@dataclass
class Guard:
    """The stage's enforcement (see the module docstring)."""

    authority: Authority
    refusals: list[Refusal] = field(default_factory=list)
    #: every action decided, allowed or not: (who, action, resource), for coverage reports
    decided: list[tuple[str, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._logging: set[str] = set()

    def function_logs(self, function_name: str) -> Refusal | None:
        """Whether Lambda may write the function's logs with its role (decided once per function).

        Lambda sends a function's logs with the execution role: without ``logs:CreateLogStream``
        and ``logs:PutLogEvents`` on its log group the invocation still runs, and every line it
        logs is lost. The refusal is reported as any other.
        """
        with self._lock:
            if function_name in self._logging or function_name not in self.authority.function_roles:
                return None
            self._logging.add(function_name)
        group = self.authority.function_logs[function_name]
        stream = f"arn:aws:logs:{self.authority.region}:{self.authority.account}:log-group:{group}:log-stream:embedded"
        wanted = [Access(action, stream) for action in ("logs:CreateLogStream", "logs:PutLogEvents")]
        return self.as_role(self.authority.function_roles[function_name], wanted, f"Lambda logs of {function_name}")

    # ------------------------------------------------------------------ decisions

    def _record(self, refusal: Refusal) -> Refusal:
        with self._lock:
            self.refusals.append(refusal)
        return refusal

    def _note(self, who: str, access: Access) -> None:
        with self._lock:
            self.decided.append((who, access.action, access.resource))

    def check(self, caller: callers.Caller, call: Call) -> tuple[Refusal, bool] | None:
        """The first refusal of ``call`` made as ``caller`` (and whether KMS refused it), or None."""
        for access in accesses(call, self.authority):
            refusal = self.check_role(caller, access)
            if refusal is not None:
                return refusal, access.action.startswith("kms:")
            refusal = self._keys(caller, access)
            if refusal is not None:
                return refusal, True
        return None

    def _keys(self, caller: callers.Caller, access: Access) -> Refusal | None:
        """The KMS side of an allowed access: the caller's KMS actions, or the service's own.

        EventBridge encrypts a bus's events as ``events.amazonaws.com`` (its key policy must allow
        the service, with the bus as encryption context); the other services here use the
        caller's credentials.
        """
        key = self.authority.key_of(access.resource)
        if key is None:
            return None
        if access.action == "events:PutEvents":
            context = {
                "kms:EncryptionContext:aws:events:event-bus:arn": access.resource,
                "aws:SourceArn": access.resource,
                "aws:SourceAccount": self.authority.account,
            }
            for action in ("kms:GenerateDataKey", "kms:Decrypt"):
                wanted = Access(action, key, context)
                self._note("events.amazonaws.com", wanted)
                decision = self.authority.authorize_service("events.amazonaws.com", wanted)
                if not decision.allowed:
                    made_by = f"EventBridge for {caller.label}"
                    return self._record(Refusal("events.amazonaws.com", action, key, _why(decision), made_by))
            return None
        for kms in kms_accesses(access, key, self.authority.region, self.authority.account):
            refusal = self.check_role(caller, kms)
            if refusal is not None:
                return refusal
        if access.action in ("states:StartExecution", "states:StartSyncExecution"):
            return self._execution_role_keys(access, key)
        return None

    def _execution_role_keys(self, access: Access, key: str) -> Refusal | None:
        """Whether an encrypted state machine's execution role may use its key (it writes the history).

        Step Functions encrypts and reads an execution's history with the state machine's own role
        as the execution runs (``kms:GenerateDataKey`` and ``kms:Decrypt``, the state machine as
        encryption context); a role without them fails every execution it runs.
        """
        role_arn = self.authority.machine_roles.get(access.resource)
        if role_arn is None:
            return None
        machine = access.resource.rsplit(":", 1)[-1]
        runner = callers.Caller(role_arn, f"Step Functions running an execution of {machine}")
        for kms in kms_accesses(access, key, self.authority.region, self.authority.account):
            refusal = self.check_role(runner, kms)
            if refusal is not None:
                return refusal
        return None

    def check_role(self, caller: callers.Caller, access: Access) -> Refusal | None:
        """Decide one access of a role; a refusal is recorded and returned."""
        self._note(caller.role_arn, access)
        decision = self.authority.authorize_role(caller.role_arn, access)
        if decision.allowed:
            return None
        return self._record(Refusal(caller.session_arn, access.action, access.resource, _why(decision), caller.label))

    def deliver(self, service: str, wanted: Sequence[Access], made_by: str) -> Refusal | None:
        """Whether the service principal may make a delivery (each access, and the target's key).

        Returns the refusal (recorded) or None. ``wanted`` carries the delivery's ``aws:SourceArn``
        and ``aws:SourceAccount`` in each access's context.
        """
        for access in wanted:
            self._note(service, access)
            decision = self.authority.authorize_service(service, access)
            if not decision.allowed:
                return self._record(Refusal(service, access.action, access.resource, _why(decision), made_by))
            key = self.authority.key_of(access.resource)
            if key is None:
                continue
            for action in _SERVICE_KMS.get(access.action, ()):
                kms = Access(action, key, access.context)
                self._note(service, kms)
                decision = self.authority.authorize_service(service, kms)
                if not decision.allowed:
                    return self._record(Refusal(service, action, key, _why(decision), made_by))
        return None

    def with_role(
        self, service: str, role_arn: str, wanted: Sequence[Access], made_by: str, source: Mapping[str, ContextValue]
    ) -> Refusal | None:
        """Whether ``service`` may assume ``role_arn`` (its trust policy) and then do ``wanted`` with it."""
        role = self.authority.role(role_arn)
        self._note(service, Access("sts:AssumeRole", role_arn))
        trust = decide_assume_role(service, role_arn, role.trust, {**source, "aws:SecureTransport": True})
        if not trust.allowed:
            return self._record(Refusal(service, "sts:AssumeRole", role_arn, _why(trust), made_by))
        return self.as_role(role_arn, wanted, made_by)

    def as_role(self, role_arn: str, wanted: Sequence[Access], made_by: str) -> Refusal | None:
        """Whether the role may do ``wanted`` (and the KMS actions on its targets' keys) for a service.

        What Lambda does with a function's execution role (read a stream or a queue for an event
        source mapping, send to an on-failure destination) is decided here.
        """
        caller = callers.Caller(role_arn, made_by)
        for access in wanted:
            refusal = self.check_role(caller, access) or self._keys(caller, access)
            if refusal is not None:
                return refusal
        return None

    # ------------------------------------------------------------------ installation

    @contextmanager
    def installed(self) -> Iterator[Guard]:
        """Check every call made as a role; clear the caller while moto serves a request."""
        guard = self
        make_api_call = botocore.client.BaseClient._make_api_call
        answer = BotocoreStubber.__call__

        def checked(client: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
            caller = callers.CALLER.get()
            if caller is None and _access_key(client) == callers.WORKFLOW_ACCESS_KEY:
                caller = callers.workflow_role()
            if caller is not None:
                call = Call(
                    service=client.meta.service_model.service_name,
                    operation=operation_name,
                    params=api_params,
                    region=client.meta.region_name,
                    account=guard.authority.account,
                    url=client.meta.endpoint_url,
                )
                refused = guard.check(caller, call)
                if refused is not None:
                    raise error_for(client, operation_name, *refused)
            return make_api_call(client, operation_name, api_params)

        def serve(stubber: BotocoreStubber, event_name: str, request: Any, **kwargs: Any) -> Any:
            token = callers.serving()
            try:
                return answer(stubber, event_name, request, **kwargs)
            finally:
                callers.CALLER.reset(token)

        def logs(function: Any) -> None:
            guard.function_logs(str(function.function_name))

        runtime.BEFORE_INVOKE.append(logs)
        try:
            with (
                mock.patch.object(botocore.client.BaseClient, "_make_api_call", checked),
                mock.patch.object(BotocoreStubber, "__call__", serve),
            ):
                yield self
        finally:
            runtime.BEFORE_INVOKE.remove(logs)


#: The KMS actions a service principal performs on a target's key to deliver to it.
_SERVICE_KMS: Final[dict[str, Sequence[str]]] = {
    "sqs:SendMessage": ("kms:GenerateDataKey", "kms:Decrypt"),
    "sns:Publish": ("kms:GenerateDataKey", "kms:Decrypt"),
}


def _why(decision: Decision) -> str:
    return decision.reason


def _access_key(client: Any) -> str | None:
    credentials = getattr(client._request_signer, "_credentials", None)
    return getattr(credentials, "access_key", None)


def error_for(client: Any, operation_name: str, refusal: Refusal, by_kms: bool) -> ClientError:
    """The exception the client raises when the service refuses ``operation_name`` for ``refusal``."""
    service = client.meta.service_model.service_name
    code, status = (KMS_DENIED.get(service) if by_kms else None) or ACCESS_DENIED.get(service, ("AccessDenied", 403))
    response: Any = {
        "Error": {"Code": code, "Message": refusal.message()},
        "ResponseMetadata": {"HTTPStatusCode": status, "RequestId": "embedded-iam"},
    }
    exception_class: type[ClientError] = client.exceptions.from_code(code)
    return exception_class(response, operation_name)
