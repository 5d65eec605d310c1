"""Ending a handoff workflow's wait from outside it: ``SendTaskFailure`` with the token the caller took.

When a customer leaves (``$disconnect``) or their session is deleted while a handoff still waits
for an agent, the store takes the waiting task's token off the handoff record in the same write
that fails the handoff (:mod:`lambdas.usecases.customer_leaves`); whoever took it then fails the
task, so the workflow ends now instead of at its wait's timeout.
"""

from __future__ import annotations

from typing import Any, Final

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from contracts.workflows import CUSTOMER_LEFT as CUSTOMER_LEFT_ERROR

logger = Logger(child=True)

#: SendTaskFailure answers for a wait that ended already (timed out, execution over): nothing to stop.
ENDED_TASK_CODES: Final = frozenset({"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"})


def fail_wait(stepfunctions: Any, token: str, handoff_id: str, cause: str) -> bool:
    """Fail the waiting task, whose token only this caller holds now; False when that did not happen.

    The error is :data:`CUSTOMER_LEFT_ERROR`: the workflow's wait catches every error but a timeout
    into HandoffFailed, which finds the handoff failed already. A wait that ended already needs
    nothing. Any other refusal, or no answer after the client's retries, is logged and not raised:
    the handoff is failed in the table, and the wait ends at its own timeout, after which the
    workflow's next step finds the session no longer waiting and ends in HandoffFailed.
    """
    try:
        stepfunctions.send_task_failure(
            taskToken=token, error=CUSTOMER_LEFT_ERROR, cause=f"handoff {handoff_id}: {cause}"
        )
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code")
        if code not in ENDED_TASK_CODES:
            logger.exception("the handoff's wait was not stopped", extra={"handoff_id": handoff_id, "code": code})
        return False
    except BotoCoreError:
        logger.exception("the handoff's wait was not stopped", extra={"handoff_id": handoff_id, "code": None})
        return False
    return True
