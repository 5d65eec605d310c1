"""Who is making an AWS call on the embedded stage: a function's role, a workflow's role, or the operator.

AWS signs every call with the caller's credentials; in one process the embedded stage knows the
caller from where the call is made instead:

* a Lambda handler runs under :data:`CALLER` set to its function's role by the runtime bridge
  (``embedded.runtime``); threads the handler starts with a copy of its context inherit it;
* moto's Step Functions executor signs its task calls with the access key ``ak`` and runs each
  state in a thread of its own: the state's evaluation environment, found on the call stack,
  names the execution's role (:func:`workflow_role`);
* everything else is the operator: the code standing the stage up, driving it and reading it
  back (the tests, the story, ``make local``'s servers), with an administrator's rights.

While moto serves a request, the service itself is acting: :func:`serving` clears the caller, so a
delivery made then (a rule invoking its target, a topic sending to a queue) is never mistaken
for the handler whose call started it. Such deliveries are authorized as the service principal
where they are made (``embedded.iam.guard.Guard.deliver``).
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

#: The access key moto's Step Functions executor signs its task calls with.
WORKFLOW_ACCESS_KEY: Final = "ak"


@dataclass(frozen=True)
class Caller:
    """An IAM role acting on the stage, and what acts with it (for messages)."""

    role_arn: str
    label: str  # "function MangaAssist-dev-Api-WsMessage-..." or "state machine ...:Handoff..."

    @property
    def session_arn(self) -> str:
        """The assumed-role session ARN AWS names in an AccessDenied message."""
        _, _, _, _, account, resource = self.role_arn.split(":", 5)
        role_name = resource.rsplit("/", 1)[-1]
        session = self.label.rsplit(" ", 1)[-1].rsplit(":", 1)[-1]
        return f"arn:aws:sts::{account}:assumed-role/{role_name}/{session}"


#: The role of the function whose handler is running in this context (None: not a function).
CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("embedded_caller", default=None)


@contextmanager
def acting_as(caller: Caller | None) -> Iterator[None]:
    """Run the block as ``caller`` (None: as the operator or a service)."""
    token = CALLER.set(caller)
    try:
        yield
    finally:
        CALLER.reset(token)


def serving() -> contextvars.Token[Caller | None]:
    """Clear the caller while moto serves a request; reset with ``CALLER.reset(token)``."""
    return CALLER.set(None)


class UnattributedCall(RuntimeError):
    """A call signed by moto's workflow executor whose state machine cannot be found."""


def workflow_role() -> Caller:
    """The role of the Step Functions execution whose state makes the current call.

    moto evaluates each state in a thread of its own, started without the caller's context; the
    state's evaluation environment (``env``, a local of every state's evaluation frame) carries the
    execution's role ARN. Walks the stack to find it; raises :class:`UnattributedCall` otherwise.
    """
    from moto.stepfunctions.parser.asl.eval.environment import Environment

    frame = sys._getframe(1)
    while frame is not None:
        env = frame.f_locals.get("env") or frame.f_locals.get("frame")
        if isinstance(env, Environment):
            details = env.aws_execution_details
            return Caller(str(details.role_arn), f"state machine of {details.role_arn.rsplit('/', 1)[-1]}")
        frame = frame.f_back  # type: ignore[assignment]
    raise UnattributedCall(
        "a call signed by moto's Step Functions executor, but no execution environment is on the stack: "
        "the embedded stage cannot tell which role makes it"
    )
