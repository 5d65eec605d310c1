"""The handoff workflow's watch of its agent: MonitorHandoff until the first reply, WatchAgent after it
(see :mod:`stacks.workflows.handoff`).

WatchAgent waits for the agent's next message (each one restarts the idle limit) or the close; an
agent silent for the limit is replaced by another available agent, or, with none free, the customer
returns to the assistant through HandoffFailed::

    WatchAgent (Lambda .waitForTaskToken, each message)
      message -> WatchAgent again (the idle limit restarts)
      close or handoff over -> HandoffComplete
      silent  -> FindReplacementAgent (Lambda: reserve another agent)
                 -> ReplaceIdleAgent (Lambda: re-queue unless the agent wrote meanwhile, release, count)
                 -> IdleAgentReplaced
                      closed meanwhile -> HandoffComplete
                      agent wrote      -> AgentWroteMeanwhile -> WatchAgent
                      replacement      -> HandToReplacement -> AssignAgent
                      none free        -> NoAgentToTakeOver -> HandoffFailed

A silent agent and its message cannot both win: every agent message counts an activity version on
the handoff in a write conditioned on its still being assigned to that agent, and ReplaceIdleAgent's
re-queue is conditioned on the version the watch last saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from constructs_lib.workflow_defaults import RetryPolicy, callback_input
from contracts.workflows import NO_AGENT_TO_TAKE_OVER, REASSIGNMENT_LIMIT_REACHED
from stacks.workflows.handoff_functions import HandoffFunctions

TIMEOUTS = ["States.Timeout", "States.HeartbeatTimeout"]
#: What every step gets about the handoff: where each field is read from (the handoff id is the
#: execution name).
REQUEST = {
    "session_id": "$.session_id",
    "handoff_id": "$$.Execution.Name",
    "reason": "$.reason",
    "priority": "$.priority",
}
AGENT_ID = "$.agent.agent_id"


def whole_state(request: Mapping[str, str], **extra: Any) -> sfn.TaskInput:
    """The input of a step that reads the whole state: the state as it is, the handoff id, ``extra``."""
    payload = {"state": sfn.JsonPath.entire_payload, "handoff_id": request["handoff_id"], **extra}
    return sfn.TaskInput.from_object(payload)


def is_true(path: str) -> sfn.Condition:
    """``path`` is present and true."""
    return sfn.Condition.and_(sfn.Condition.is_present(path), sfn.Condition.boolean_equals(path, True))


def was_closed(result: str) -> sfn.Condition:
    """The step's result at ``result`` says the handoff was closed."""
    return is_true(f"{result}.closed")


class AgentWatch:
    """Builds MonitorHandoff, WatchAgent and a silent agent's replacement into ``scope`` (the workflow construct)."""

    def __init__(
        self, scope: Construct, functions: HandoffFunctions, retry: RetryPolicy, request: dict[str, str]
    ) -> None:
        self._scope = scope
        self._functions = functions
        self._retry = retry
        self._request = request

    def _invoke(
        self, state_id: str, fn: lambda_.IFunction, payload: sfn.TaskInput, result_path: str, comment: str
    ) -> tasks.LambdaInvoke:
        task = tasks.LambdaInvoke(
            self._scope,
            state_id,
            lambda_function=fn,
            payload=payload,
            payload_response_only=True,
            retry_on_service_exceptions=False,
            result_path=result_path,
            comment=comment,
        )
        self._retry.apply(task)
        return task

    def _reply_wait(
        self, state_id: str, expected_version: int | str, timeout: Duration, result_path: str, comment: str
    ) -> tasks.LambdaInvoke:
        """A wait for the agent's next message or the close (the agent routes complete its token).

        ``expected_version`` is the activity version the workflow last saw (a number, or the path
        it is read from): a message counted after it, before the wait began, ends the wait at once.
        """
        wait = tasks.LambdaInvoke(
            self._scope,
            state_id,
            lambda_function=self._functions.await_reply,
            integration_pattern=sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
            payload=callback_input(
                {
                    **REQUEST,
                    "agent_id": AGENT_ID,
                    "task_token": sfn.JsonPath.task_token,
                    "expected_version": expected_version,
                }
            ),
            retry_on_service_exceptions=False,
            task_timeout=sfn.Timeout.duration(timeout),
            result_path=result_path,
            comment=comment,
        )
        self._retry.apply(wait)
        return wait

    def monitor(
        self,
        failed: sfn.IChainable,
        check_agent: sfn.IChainable,
        complete: sfn.IChainable,
        watch: sfn.IChainable,
        idle_timeout: Duration,
    ) -> tasks.LambdaInvoke:
        """MonitorHandoff: wait for the agent's first reply; an idle agent is replaced (ReassignAgent).

        A close completes MonitorHandoff's token like a reply does; a reply or a close that lands
        before the token is stored makes MonitorHandoff end itself (with the reply's activity
        version, or as closed). ReassignAgent re-queues only while the agent has written nothing
        (activity version 0): a close that lands after the idle timeout fired makes it answer
        ``closed`` and the execution finishes at HandoffComplete; a first reply counted as the
        timeout fired makes it answer ``replied`` and the agent keeps the handoff (WatchAgent).
        """
        monitor = self._reply_wait(
            "MonitorHandoff",
            0,  # an assignment starts the agent's activity at 0
            idle_timeout,
            "$.first_reply",
            "Wait for the agent's first reply (the message route completes the token)",
        )
        reassign = self._invoke(
            "ReassignAgent",
            self._functions.reassign_agent,
            whole_state(self._request, expected_version=0),
            "$.reassignment",
            "Release the idle agent unless it replied meanwhile, restore the session, count; fails past the bound",
        )
        monitor.add_catch(reassign, errors=TIMEOUTS, result_path="$.idle_error")
        monitor.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        reassign.add_catch(failed, errors=[REASSIGNMENT_LIMIT_REACHED], result_path="$.error")
        reassign.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        replied = sfn.Pass(
            self._scope,
            "AgentRepliedMeanwhile",
            parameters={"version": sfn.JsonPath.number_at("$.reassignment.version")},
            result_path="$.activity",
            comment="The first reply came as the idle limit fired: the agent keeps the handoff",
        )
        closed = sfn.Choice(self._scope, "HandoffClosedMeanwhile")
        closed.when(was_closed("$.reassignment"), complete).when(
            is_true("$.reassignment.replied"), replied.next(watch)
        ).otherwise(check_agent)
        reassign.next(closed)
        return monitor

    def build(
        self, failed: sfn.IChainable, assign: sfn.IChainable, complete: sfn.IChainable, reply_idle_timeout: Duration
    ) -> tasks.LambdaInvoke:
        """WatchAgent: after the first reply, each message restarts the idle limit; an agent silent for
        it is replaced (ReplaceIdleAgent, conditioned on the activity version the watch knows), or,
        with no agent free, the customer returns to the assistant (NoAgentToTakeOver -> HandoffFailed).
        """
        watch = self._reply_wait(
            "WatchAgent",
            "$.activity.version",
            reply_idle_timeout,
            "$.activity",
            "Wait for the agent's next message or the close (the agent routes complete the token)",
        )
        # The replacement is reserved before the silent agent is released, so it cannot be the same agent.
        find = self._invoke(
            "FindReplacementAgent",
            self._functions.check_agent_availability,
            sfn.TaskInput.from_object(self._request),
            "$.replacement",
            "Reserve another available agent for the reason's skill (no waiting: the customer is mid-conversation)",
        )
        replace = self._invoke(
            "ReplaceIdleAgent",
            self._functions.reassign_agent,
            whole_state(
                self._request,
                expected_version=sfn.JsonPath.number_at("$.activity.version"),
                replacement=sfn.JsonPath.object_at("$.replacement"),
            ),
            "$.reassignment",
            "Release the silent agent unless it wrote meanwhile (then the replacement), restore the session, count",
        )
        watch.add_catch(find, errors=TIMEOUTS, result_path="$.idle_error")
        watch.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        find.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        replace.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        find.next(replace)
        nobody = sfn.Pass(
            self._scope,
            "NoAgentToTakeOver",
            parameters={"Error": NO_AGENT_TO_TAKE_OVER, "Cause": "the agent went silent and no other agent is free"},
            result_path="$.error",
        )
        nobody.next(failed)
        take = sfn.Pass(
            self._scope,
            "HandToReplacement",
            parameters={"agent_id": sfn.JsonPath.string_at("$.replacement.agent_id"), "available": True},
            result_path="$.agent",
        )
        take.next(assign)
        wrote = sfn.Pass(
            self._scope,
            "AgentWroteMeanwhile",
            parameters={"version": sfn.JsonPath.number_at("$.reassignment.version")},
            result_path="$.activity",
        )
        wrote.next(watch)
        replace.next(
            sfn.Choice(self._scope, "IdleAgentReplaced")
            .when(was_closed("$.reassignment"), complete)
            .when(is_true("$.reassignment.replied"), wrote)
            .when(is_true("$.replacement.available"), take)
            .otherwise(nobody)
        )
        watch.next(sfn.Choice(self._scope, "MessageOrClose").when(was_closed("$.activity"), complete).otherwise(watch))
        return watch
