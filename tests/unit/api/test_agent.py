"""lambdas.api.agent: the agent routes, driven with API Gateway events, on moto."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from embedded.events import Api, authorizer_context, lambda_context, rest_proxy_event
from embedded.services.dynamodb import atomic_requests, create_sessions_table
from lambdas.api import agent as agent_api
from lambdas.shared import env as lambda_env
from lambdas.shared.records import Agent, AgentStatus, HandoffStatus, Role, SessionStatus
from lambdas.shared.store import DynamoSessionStore
from lambdas.usecases.assign_agent import begin_handoff
from lambdas.usecases.close_handoff import close_handoff
from tests.support.websocket import sent_frames


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoSessionStore]:
    # The executor-backed Step Functions mock: SendTaskSuccess with a dead token fails as in AWS.
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}), atomic_requests():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_sessions_table(client, "agent-routes")
        monkeypatch.setenv("TABLE_NAME", "agent-routes")
        lambda_env.reset()
        yield DynamoSessionStore("agent-routes", client=client)
        lambda_env.reset()


CONTEXT = lambda_context("agent-routes")


AGENT_API = Api(stage="prod")


def call(
    action: str,
    session_id: str,
    body: Any,
    *,
    sub: str | None = "agent-1",
    role: str = "agent",
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """POST /handoffs/{session_id}/<action> as API Gateway sends it, with the authorizer's context."""
    authorizer = authorizer_context(sub, role=role, **({"sub": sub} if sub else {}))
    event = rest_proxy_event(
        "POST",
        f"/handoffs/{{session_id}}/{action}",
        f"/handoffs/{session_id}/{action}",
        api=AGENT_API,
        path_parameters={"session_id": session_id},
        headers={"Content-Type": "application/json", **(headers or {})},
        body=body if isinstance(body, str) else json.dumps(body),
        authorizer=authorizer,
    )
    response = agent_api.handler(event, CONTEXT)
    return int(response["statusCode"]), json.loads(response["body"])


DEAD_TOKEN = "dead-token"  # a task token no execution waits on


class RecordingWorkflow:
    """Step Functions as the agent routes see it (``agent_api.sfn``): every SendTaskSuccess recorded and accepted."""

    def __init__(self) -> None:
        self.outputs: list[tuple[str, dict[str, Any]]] = []

    def __call__(self) -> RecordingWorkflow:
        return self

    def send_task_success(self, *, taskToken: str, output: str) -> dict[str, Any]:
        self.outputs.append((taskToken, json.loads(output)))
        return {}


class ThrottlingWorkflow:
    """Step Functions throttling every SendTaskSuccess (``agent_api.sfn``); ``meanwhile`` runs first, as a race."""

    def __init__(self, meanwhile: Callable[[], None] | None = None) -> None:
        self.meanwhile = meanwhile

    def __call__(self) -> ThrottlingWorkflow:
        return self

    def send_task_success(self, **_: Any) -> None:
        if self.meanwhile is not None:
            self.meanwhile()
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "SendTaskSuccess")


def queued(store: DynamoSessionStore) -> str:
    session = store.sessions.create_session("customer-1")
    store.handoffs.queue_handoff(
        session.session_id,
        handoff_id="h-1",
        reason="billing",
        priority="normal",
        execution_arn=None,
        task_token=DEAD_TOKEN,
    )
    return session.session_id


@pytest.mark.parametrize("action", ["accept", "messages"])
def test_refuses_callers_that_are_not_agents(store: DynamoSessionStore, action: str) -> None:
    assert call(action, "s-1", {"text": "hi"}, role="customer")[0] == 403
    assert call(action, "s-1", {"text": "hi"}, role="admin")[0] == 403
    assert call(action, "s-1", {"text": "hi"}, sub=None)[0] == 403


def test_accept_without_a_handoff_is_404(store: DynamoSessionStore) -> None:
    status, body = call("accept", str(uuid.uuid4()), {})
    assert status == 404
    assert body["error"]["code"] == "NotFound"


@pytest.mark.parametrize("action", ["accept", "messages"])
@pytest.mark.parametrize("bad", ["no-such-session", "A" * 36, "s-1"])
def test_fails_on_a_session_id_that_is_not_a_session_id(store: DynamoSessionStore, action: str, bad: str) -> None:
    # The one session-id rule of REST, WebSocket and the workflows (lambdas.shared.keys)
    status, body = call(action, bad, {"text": "hi"})
    assert status == 400
    assert body["error"]["code"] == "BAD_REQUEST_PARAMETERS"  # the code API Gateway uses for a parameter
    assert body["error"]["message"].startswith("path.session_id ")


def test_accept_of_an_expired_request_releases_the_agent_again(store: DynamoSessionStore) -> None:
    # Given a queued handoff whose waiting task is gone (its token is dead) and an available agent
    session_id = queued(store)
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))

    status, body = call("accept", session_id, {})

    # Then 409, and the agent is available again (reserved, then released)
    assert status == 409
    assert "expired" in body["error"]["message"]
    agent = store.agents.get_agent("agent-1")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE


def test_accept_whose_send_task_success_fails_gives_the_token_back(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a queued handoff and an available agent, and Step Functions throttling SendTaskSuccess
    session_id = queued(store)
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))

    monkeypatch.setattr(agent_api, "sfn", ThrottlingWorkflow())

    status, body = call("accept", session_id, {})

    # Then 500 with a JSON error, the agent is available again, and the handoff still waits with its token,
    # so a later accept can complete the workflow's wait
    assert status == 500
    assert body["error"]["code"]
    agent = store.agents.get_agent("agent-1")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    assert store.handoffs.waiting_for(session_id, "h-1") == "agent"
    assert store.handoffs.claim_callback(session_id, "h-1", "agent") == DEAD_TOKEN


def test_accept_by_a_busy_agent_is_409_and_leaves_the_request_waiting(store: DynamoSessionStore) -> None:
    session_id = queued(store)
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))
    store.agents.reserve_agent("agent-1", "another-session")

    status, _ = call("accept", session_id, {})

    assert status == 409
    assert store.handoffs.waiting_for(session_id, "h-1") == "agent"


def test_accept_of_an_assigned_handoff_is_409(store: DynamoSessionStore) -> None:
    session = store.sessions.create_session("customer-1")
    store.handoffs.put_handoff(session.session_id, reason="billing", handoff_id="h-1", status=HandoffStatus.ASSIGNED)
    assert call("accept", session.session_id, {})[0] == 409


def _handed_over(store: DynamoSessionStore, agent_id: str = "agent-1") -> str:
    session = store.sessions.create_session("customer-1")
    store.connections.put_connection(
        "conn-1",
        session_id=session.session_id,
        customer_id="customer-1",
        domain_name="abc123.execute-api.us-east-1.amazonaws.com",
        stage="prod",
    )
    store.sessions.set_connection(session.session_id, "conn-1")
    begin_handoff(
        store,
        session.session_id,
        handoff_id="h-1",
        agent_id=agent_id,
        reason="billing",
        priority="normal",
        execution_arn=None,
        system_text="handed over",
    )
    return session.session_id


def test_message_from_the_assigned_agent_is_stored_pushed_and_completes_the_wait(store: DynamoSessionStore) -> None:
    # Given a session handed to agent-1 whose MonitorHandoff token is stored (dead: the call is tolerated)
    session_id = _handed_over(store)
    store.handoffs.await_callback(session_id, "h-1", "reply", "dead-token")

    status, body = call("messages", session_id, {"text": "Hi, this is Ana."})

    assert status == 201
    assert body == {"session_id": session_id, "turn_number": 2, "delivered": True}
    last = store.turns.list_turns(session_id).items[-1]
    assert (last.role, last.content) == (Role.AGENT, "Hi, this is Ana.")
    assert store.handoffs.waiting_for(session_id, "h-1") is None  # the token was taken
    # The customer's connection got the chat's message frame, with the agent as its author
    [frame] = sent_frames("conn-1")
    assert {k: frame.get(k) for k in ("type", "role", "session_id", "turn_number", "text")} == {
        "type": "message",
        "role": "agent",
        "session_id": session_id,
        "turn_number": 2,
        "text": "Hi, this is Ana.",
    }


def test_message_on_a_session_no_longer_handed_over_is_409_and_stores_nothing(store: DynamoSessionStore) -> None:
    # Given agent-1's handoff still assigned, but its session ended meanwhile
    session_id = _handed_over(store)
    store.sessions.update_status(session_id, SessionStatus.DISCONNECTED)

    status, body = call("messages", session_id, {"text": "Still there?"})

    assert status == 409
    assert "not handed over" in body["error"]["message"]
    assert len(store.turns.list_turns(session_id).items) == 1
    assert sent_frames("conn-1") == []


def test_the_agents_first_message_records_when_it_first_replied_and_later_ones_do_not(
    store: DynamoSessionStore,
) -> None:
    # Given a session handed to agent-1, who answers
    session_id = _handed_over(store)
    handoff = store.handoffs.get_handoff(session_id, "h-1")
    assert handoff is not None
    assert handoff.first_reply_at is None
    assert call("messages", session_id, {"text": "Hi, this is Ana."})[0] == 201
    replied = store.handoffs.get_handoff(session_id, "h-1")
    # When agent-1 writes again
    assert call("messages", session_id, {"text": "Anything else?"})[0] == 201
    # Then the first reply's time is recorded (what the time-to-first-reply metric reads), and stays
    assert replied is not None
    assert replied.assigned_at is not None
    assert replied.first_reply_at is not None
    assert replied.first_reply_at >= replied.assigned_at
    again = store.handoffs.get_handoff(session_id, "h-1")
    assert again is not None
    assert again.first_reply_at == replied.first_reply_at


def test_message_whose_send_task_success_fails_is_stored_once_and_keeps_the_token(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a session handed to agent-1 waiting for the first reply, and Step Functions throttling SendTaskSuccess
    session_id = _handed_over(store)
    store.handoffs.await_callback(session_id, "h-1", "reply", "live-token")

    monkeypatch.setattr(agent_api, "sfn", ThrottlingWorkflow())

    status, body = call("messages", session_id, {"text": "Hi, this is Ana."})

    # Then 201 (stored and pushed: a retry would store it twice), and the token waits for the next reply
    assert status == 201
    assert body["turn_number"] == 2
    assert [t.content for t in store.turns.list_turns(session_id).items if t.role == Role.AGENT] == ["Hi, this is Ana."]
    assert store.handoffs.claim_callback(session_id, "h-1", "reply") == "live-token"


def test_message_from_another_agent_is_403_and_stores_nothing(store: DynamoSessionStore) -> None:
    session_id = _handed_over(store)
    assert call("messages", session_id, {"text": "sneaky"}, sub="agent-2")[0] == 403
    assert len(store.turns.list_turns(session_id).items) == 1


def test_message_after_the_handoff_closed_is_403_and_stores_nothing(store: DynamoSessionStore) -> None:
    # Given agent-1's handoff, closed by an admin
    session_id = _handed_over(store)
    assert call("close", session_id, {"resolution": "done", "outcome": "resume"}, sub="admin-1", role="admin")[0] == 200
    turns = len(store.turns.list_turns(session_id).items)
    # When agent-1 writes again / Then its access ended with the handoff
    assert call("messages", session_id, {"text": "one more thing"})[0] == 403
    assert len(store.turns.list_turns(session_id).items) == turns


def test_close_by_another_agent_is_403_and_changes_nothing(store: DynamoSessionStore) -> None:
    session_id = _handed_over(store)
    assert call("close", session_id, {"resolution": "not mine", "outcome": "end"}, sub="agent-2")[0] == 403
    handoff = store.handoffs.get_handoff(session_id, "h-1")
    assert handoff is not None
    assert (handoff.status, handoff.agent_id) == (HandoffStatus.ASSIGNED, "agent-1")
    session = store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.HANDOFF


@pytest.mark.parametrize(
    "body", ['{"text": ""}', "not json", '{"text": "hi", "agent_id": "x"}', json.dumps({"text": "x" * 4001})]
)
def test_malformed_message_bodies_are_400(store: DynamoSessionStore, body: str) -> None:
    session_id = _handed_over(store)
    status, answer = call("messages", session_id, body)
    assert status == 400
    assert answer["error"]["code"] == "BAD_REQUEST_BODY"


@pytest.mark.parametrize("escaped", ["\\ud800", "hi \\udfff", "\\u202eevil"])
def test_a_message_with_a_lone_surrogate_or_hiding_character_is_a_400_and_stores_nothing(
    store: DynamoSessionStore, escaped: str
) -> None:
    session_id = _handed_over(store)
    before = len(store.turns.list_turns(session_id, limit=100).items)
    status, answer = call("messages", session_id, '{"text": "' + escaped + '"}')
    assert (status, answer["error"]["code"]) == (400, "BAD_REQUEST_BODY"), answer
    assert "text" in answer["error"]["message"]
    assert len(store.turns.list_turns(session_id, limit=100).items) == before


def test_accept_without_the_skill_is_409_naming_it_and_the_handoff_stays_queued(store: DynamoSessionStore) -> None:
    # Given a queued billing handoff and an available agent who only knows shipping
    session_id = queued(store)
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("shipping",)))

    status, body = call("accept", session_id, {})

    # Then 409 naming the missing skill; the handoff still waits, the agent is untouched
    assert status == 409
    assert "'billing'" in body["error"]["message"]
    handoff = store.handoffs.current_handoff(session_id)
    assert handoff is not None
    assert handoff.status == HandoffStatus.QUEUED
    assert store.handoffs.waiting_for(session_id, "h-1") == "agent"
    agent = store.agents.get_agent("agent-1")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE


def test_the_current_handoff_is_the_newest_whatever_its_id(store: DynamoSessionStore) -> None:
    # Given a session whose second handoff's id sorts before the first's
    session = store.sessions.create_session("customer-1")
    store.handoffs.put_handoff(session.session_id, reason="billing", handoff_id="zz-first", status=HandoffStatus.FAILED)
    store.handoffs.queue_handoff(
        session.session_id,
        handoff_id="aa-second",
        reason="billing",
        priority="normal",
        execution_arn=None,
        task_token=DEAD_TOKEN,
    )

    # Then the second is current, and an agent's accept reaches it (not the failed first)
    current = store.handoffs.current_handoff(session.session_id)
    assert current is not None
    assert current.handoff_id == "aa-second"
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))
    status, body = call("accept", session.session_id, {})
    assert status == 409
    assert "expired" in body["error"]["message"]  # it reached the waiting handoff; only its token is dead


def presence(status: Any, *, sub: str = "agent-1") -> tuple[int, Any]:
    """POST /agents/me/presence as API Gateway sends it."""
    event = rest_proxy_event(
        "POST",
        "/agents/me/presence",
        "/agents/me/presence",
        api=AGENT_API,
        headers={"Content-Type": "application/json"},
        body=json.dumps({"status": status}),
        authorizer=authorizer_context(sub, role="agent", sub=sub),
    )
    response = agent_api.handler(event, CONTEXT)
    return int(response["statusCode"]), json.loads(response["body"])


def test_presence_moves_a_free_agent_in_and_out_of_the_available_index_at_once(store: DynamoSessionStore) -> None:
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))

    assert presence("away") == (200, {"agent_id": "agent-1", "status": "away", "after_release": "away"})
    assert store.agents.find_available_agent("billing") is None
    assert presence("available")[0] == 200
    found = store.agents.find_available_agent("billing")
    assert found is not None
    assert found.agent_id == "agent-1"
    assert presence("asleep")[0] == 400


def test_a_busy_agent_who_chose_away_is_away_once_its_handoff_closes(store: DynamoSessionStore) -> None:
    # Given agent-1 serving a handoff, who chooses "away" meanwhile
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))
    session_id = _handed_over(store)
    store.agents.reserve_agent("agent-1", session_id)
    status, body = presence("away")
    assert (status, body["status"], body["after_release"]) == (200, "busy", "away")

    # When the handoff closes
    closed = close_handoff(store, session_id, "h-1", closed_by="agent-1", resolution="done", outcome="active")

    # Then the agent is released into "away": not offered any new handoff
    assert closed.released_agent_id == "agent-1"
    agent = store.agents.get_agent("agent-1")
    assert agent is not None
    assert agent.status == AgentStatus.AWAY
    assert store.agents.find_available_agent("billing") is None


def _served_with_a_waiting_token(store: DynamoSessionStore) -> str:
    """agent-1 (registered, busy) serving a handoff whose MonitorHandoff waits on ``live-token``."""
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))
    session_id = _handed_over(store)
    store.agents.reserve_agent("agent-1", session_id)
    store.handoffs.await_callback(session_id, "h-1", "reply", "live-token")
    return session_id


def test_close_whose_send_task_success_fails_is_still_a_close(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given agent-1 serving a handoff whose MonitorHandoff token is stored, and Step Functions throttling
    session_id = _served_with_a_waiting_token(store)

    monkeypatch.setattr(agent_api, "sfn", ThrottlingWorkflow())

    status, body = call("close", session_id, {"resolution": "done", "outcome": "resume"})

    # Then 200: the close is committed (a second close would be 409), whatever Step Functions answered
    assert status == 200
    assert (body["status"], body["session_status"], body["released_agent_id"]) == ("completed", "active", "agent-1")
    assert call("close", session_id, {"resolution": "done", "outcome": "resume"})[0] == 409


def test_a_retried_message_with_its_idempotency_key_stores_one_turn(store: DynamoSessionStore) -> None:
    # Given an agent serving the session whose first send's answer was lost
    session_id = _handed_over(store)
    key = {"Idempotency-Key": "console-msg-1"}
    first = call("messages", session_id, {"text": "Volume 3 ships Friday."}, headers=key)
    # When the console retries the same message with the same key
    again = call("messages", session_id, {"text": "Volume 3 ships Friday."}, headers=key)
    # Then the answer is replayed and the transcript holds the message once
    assert first == again
    assert first[0] == 201
    agent_turns = [t for t in store.turns.list_turns(session_id).items if t.role == Role.AGENT]
    assert [t.content for t in agent_turns] == ["Volume 3 ships Friday."]
    # And the same key with other text is refused, storing nothing
    status, body = call("messages", session_id, {"text": "Something else"}, headers=key)
    assert (status, body["error"]["code"]) == (409, "KeyReused")
    assert len([t for t in store.turns.list_turns(session_id).items if t.role == Role.AGENT]) == 1


def test_a_retired_agent_gets_403_on_every_agent_route_though_its_token_is_valid(store: DynamoSessionStore) -> None:
    # Given an agent retired by an admin, and a customer waiting in the shared inbox
    store.agents.register_agent("agent-1", name="Aiko", skills=("billing",))
    store.agents.retire_agent("agent-1")
    waiting = queued(store)
    inbox_event = rest_proxy_event(
        "GET",
        "/agents/me/inbox",
        "/agents/me/inbox",
        api=AGENT_API,
        authorizer=authorizer_context("agent-1", role="agent", sub="agent-1"),
    )
    # When it calls with the token it signed in with before / Then every route says it is retired
    answers = [
        call("accept", waiting, {}),
        call("messages", waiting, {"text": "still here"}),
        call("close", waiting, {"resolution": "x", "outcome": "end"}),
        presence("available"),
        (lambda r: (int(r["statusCode"]), json.loads(r["body"])))(agent_api.handler(inbox_event, CONTEXT)),
    ]
    assert [status for status, _ in answers] == [403] * 5
    assert all("retired" in body["error"]["message"] for _, body in answers)
    # And the waiting customer is untouched
    handoff = store.handoffs.current_handoff(waiting)
    assert handoff is not None
    assert (handoff.status, handoff.agent_id) == (HandoffStatus.QUEUED, None)


def test_each_message_tells_the_workflow_the_activity_version_it_counted(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given agent-1's handoff whose workflow waits for the next message, twice
    session_id = _handed_over(store)
    workflow = RecordingWorkflow()
    monkeypatch.setattr(agent_api, "sfn", workflow)
    for text in ("Hi, this is Ana.", "Volume 3 ships on the 14th."):
        store.handoffs.await_callback(session_id, "h-1", "reply", f"token-{len(workflow.outputs)}")
        assert call("messages", session_id, {"text": text})[0] == 201
    outputs = [output for _, output in workflow.outputs]

    # Then each completion carries the version its message counted: the watch's reassignment is conditioned on it
    assert [o["version"] for o in outputs] == [1, 2]
    assert [o["agent_id"] for o in outputs] == ["agent-1", "agent-1"]
    assert [o["turn_number"] for o in outputs] == [2, 3]


def test_a_failed_completion_gives_the_token_back_only_while_the_handoff_is_assigned(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given agent-1's handoff waiting for a reply, closed by an admin while SendTaskSuccess fails
    session_id = _handed_over(store)
    store.handoffs.await_callback(session_id, "h-1", "reply", "live-token")

    def closed_meanwhile() -> None:
        close_handoff(store, session_id, "h-1", closed_by="admin-1", resolution="done", outcome=SessionStatus.ACTIVE)

    monkeypatch.setattr(agent_api, "sfn", ThrottlingWorkflow(meanwhile=closed_meanwhile))

    assert call("messages", session_id, {"text": "Hi, this is Ana."})[0] == 201

    # Then the closed handoff holds no token: nothing waits on a finished handoff
    handoff = store.handoffs.get_handoff(session_id, "h-1")
    assert handoff is not None
    assert handoff.status == HandoffStatus.COMPLETED
    assert store.handoffs.waiting_for(session_id, "h-1") is None


def test_message_after_a_reassignment_for_idleness_is_403_and_stores_nothing(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given agent-1's handoff, re-queued by the idle limit just after the route found agent-1 serving it
    session_id = _handed_over(store)
    monkeypatch.setattr(agent_api, "store", lambda: store)
    get_session = store.sessions.get_session

    def requeued_meanwhile(sid: str) -> Any:
        store.handoffs.requeue_handoff(sid, "h-1", previous_agent_id="agent-1", expected_version=0)
        return get_session(sid)

    monkeypatch.setattr(store.sessions, "get_session", requeued_meanwhile)
    turns = len(store.turns.list_turns(session_id).items)

    # When agent-1 writes / Then the reassignment won: 403, and no turn is stored
    assert call("messages", session_id, {"text": "still here"})[0] == 403
    assert len(store.turns.list_turns(session_id).items) == turns


def test_close_tells_the_waiting_workflow_who_closed_and_how_and_answers_what_it_closed(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given agent-1 serving a handoff whose MonitorHandoff waits on a token
    session_id = _served_with_a_waiting_token(store)
    workflow = RecordingWorkflow()
    monkeypatch.setattr(agent_api, "sfn", workflow)
    # When agent-1 closes it, ending the session
    status, body = call("close", session_id, {"resolution": "refunded", "outcome": "end"})
    # Then the wait is completed with the agent and the outcome, once, and the answer names the handoff
    assert status == 200
    told = [{"token": token, **output} for token, output in workflow.outputs]
    assert told == [{"token": "live-token", "agent_id": "agent-1", "closed": True, "outcome": "end"}]
    assert body == {
        "session_id": session_id,
        "handoff_id": "h-1",
        "status": "completed",
        "session_status": "disconnected",
        "released_agent_id": "agent-1",
    }
    raw = store.table.get({"PK": f"SESSION#{session_id}", "SK": "HANDOFF#h-1"})
    assert raw is not None
    assert raw["resolution"] == "refunded"
    # And a close with no waiting token tells no one
    assert call("close", session_id, {"resolution": "again", "outcome": "end"})[0] == 409
    assert len(workflow.outputs) == 1


def test_a_close_by_an_agent_reassigned_since_it_read_the_handoff_is_403_and_changes_nothing(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given agent-1 reads the handoff as its own, and the workflow reassigns it to agent-2 meanwhile
    session_id = _handed_over(store)
    read_as_agent_1 = store.handoffs.current_handoff(session_id)
    store.table.client.update_item(
        TableName="agent-routes",
        Key={"PK": {"S": f"SESSION#{session_id}"}, "SK": {"S": "HANDOFF#h-1"}},
        UpdateExpression="SET agent_id = :a",
        ExpressionAttributeValues={":a": {"S": "agent-2"}},
    )
    monkeypatch.setattr(type(store.handoffs), "current_handoff", lambda self, sid: read_as_agent_1)
    # When agent-1's close commits / Then it is refused, and agent-2 keeps the handoff
    assert call("close", session_id, {"resolution": "not mine now", "outcome": "end"})[0] == 403
    handoff = store.handoffs.get_handoff(session_id, "h-1")
    assert handoff is not None
    assert (handoff.status, handoff.agent_id) == (HandoffStatus.ASSIGNED, "agent-2")
