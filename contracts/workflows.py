"""The error names the workflows catch and retry, and the errors the Lambdas raise with those names.

Step Functions names a Lambda's error by its exception class, so the classes a Task's Lambda
raises on purpose are defined here and the name each state matches is the class's own name: the
workflow (``stacks/workflows``) and the handler (``lambdas``) cannot spell it differently.
"""

from __future__ import annotations

from typing import Final


class ConditionalCheckFailed(Exception):
    """The handoff transaction's condition failed: the session is not (or no longer) active."""


class ReassignmentLimitReached(Exception):
    """The agent was idle and the handoff was reassigned MAX_REASSIGNMENTS times already."""


class InvalidPriority(Exception):
    """The handoff's priority is none of ``contracts.priorities.PRIORITIES`` (an execution started past the gateway)."""


class ConnectionNotReady(Exception):
    """The connection cannot take frames yet (or anymore); the onboarding workflow retries, bounded."""


#: The handoff workflow's UpdateDynamoDB step found the session no longer active (HandoffFailed).
CONDITIONAL_CHECK_FAILED: Final = ConditionalCheckFailed.__name__
#: The handoff workflow's ReassignAgent step: the reassignment bound is reached (HandoffFailed).
REASSIGNMENT_LIMIT_REACHED: Final = ReassignmentLimitReached.__name__
#: The handoff workflow's CheckAgentAvailability step: the execution input names no known priority (HandoffFailed).
INVALID_PRIORITY: Final = InvalidPriority.__name__
#: The handoff workflow's own error (a Pass state) when an idle agent is replaced and no other agent is free.
NO_AGENT_TO_TAKE_OVER: Final = "NoAgentToTakeOver"
#: The onboarding workflow's DeliverFrame step retries this, then abandons the connection.
CONNECTION_NOT_READY: Final = ConnectionNotReady.__name__
#: The handoff workflow's own error (a Pass state) when no manager took an escalated handoff in time.
NO_MANAGER_TOOK_OVER: Final = "NoManagerTookOver"
#: The error ``$disconnect`` fails a waiting handoff's task with when its customer leaves.
CUSTOMER_LEFT: Final = "CustomerLeft"
#: Raised by the store when its own bounded retries of a batch write gave up
#: (``lambdas.shared.errors.BatchWriteIncomplete``): transient like a throttle, so every Task of
#: the app's workflows retries it too.
BATCH_WRITE_INCOMPLETE: Final = "BatchWriteIncomplete"
#: The highest export risk score (``lambdas.orchestration.export_risk``); the stage's
#: ``export_review_min_score`` lies in 0..this, and the workflow compares the score with it.
EXPORT_RISK_MAX_SCORE: Final = 10
#: The sort-key-side id prefix of an export's automatic approval record (``REVIEW#export-<execution name>``).
AUTOMATIC_APPROVAL_PREFIX: Final = "export-"
