"""The application's Lambdas behind the human-handoff workflow's decision steps, and what each must do."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_lambda as lambda_


@dataclass(frozen=True)
class HandoffFunctions:
    """The application's Lambdas behind the workflow's decision steps.

    Each receives a JSON object and returns one (``payload_response_only``):

    * ``check_agent_availability``: ``{session_id, handoff_id, reason, priority}`` ->
      ``{available: bool, agent_id?: str}``; must reserve the agent it returns.
    * ``escalate_to_manager``: same input -> ``{available: bool, agent_id?}``; marks the handoff
      escalated and must reserve the manager it returns.
    * ``update_handoff``: ``{session_id, handoff_id, execution_arn, agent_id, reason, priority}``;
      moves the session into handoff in one transaction or raises ``ConditionalCheckFailed``.
    * ``transfer_context``: ``{session_id, handoff_id, agent_id, reason}`` -> anything.
    * ``await_reply``: ``{session_id, handoff_id, task_token, waiting_for?, expected_version?}``;
      stores the token where the agent's next message (``reply``, MonitorHandoff and WatchAgent) or
      a manager's accept (``agent``, WaitForManager) finds it (invoked with ``.waitForTaskToken``);
      a ``reply`` wait only while the handoff is assigned and the agent's activity version is still
      ``expected_version`` (otherwise it completes its own token with ``{closed: true}`` or
      ``{agent_id, version}``). The agent routes complete it with ``{agent_id, turn_number, version}``
      or ``{closed: true}``.
    * ``reassign_agent``: ``{state, handoff_id, expected_version?, replacement?}`` ->
      ``{count: int, closed: bool, replied?: bool, version?: int}``; ``closed`` when the handoff was
      closed meanwhile (the execution then succeeds), ``replied`` when the agent wrote since
      ``expected_version`` (it keeps the handoff); releases ``replacement`` wherever it does not take
      over; raises ``ReassignmentLimitReached``.
    * ``handoff_failed``: the whole state -> ``{reason: str}``; releases and restores.
    """

    check_agent_availability: lambda_.IFunction
    escalate_to_manager: lambda_.IFunction
    update_handoff: lambda_.IFunction
    transfer_context: lambda_.IFunction
    await_reply: lambda_.IFunction
    reassign_agent: lambda_.IFunction
    handoff_failed: lambda_.IFunction

    def all(self) -> list[lambda_.IFunction]:
        """Every function, in the order of the fields."""
        return [
            self.check_agent_availability,
            self.escalate_to_manager,
            self.update_handoff,
            self.transfer_context,
            self.await_reply,
            self.reassign_agent,
            self.handoff_failed,
        ]
