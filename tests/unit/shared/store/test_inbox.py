"""The agent inbox on moto: written only while true, removed by every transition, read through the route."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ConnectTimeoutError
from botocore.stub import Stubber
from moto import mock_aws

from embedded.events import Api, authorizer_context, lambda_context, rest_proxy_event, sqs_event
from embedded.services.dynamodb import atomic_requests, create_sessions_table
from lambdas.api import agent as agent_api
from lambdas.events import dashboard
from lambdas.shared import env as lambda_env
from lambdas.shared import keys
from lambdas.shared.errors import InvalidCursor
from lambdas.shared.records import Agent, AgentStatus, HandoffStatus, SessionStatus
from lambdas.shared.store import DynamoSessionStore, HandoffClosed, InboxWrite
from lambdas.usecases.assign_agent import begin_handoff
from lambdas.usecases.close_handoff import close_handoff
from lambdas.usecases.customer_leaves import abandon_handoff
from lambdas.ws import disconnect, runtime
from tests.unit.handoffs import inbox_of

TABLE = "inbox-test"
CONTEXT = lambda_context("inbox")


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoSessionStore]:
    """The table on moto; the route and the consumer use it through the settings' store."""
    with mock_aws(), atomic_requests():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_sessions_table(client, TABLE)
        monkeypatch.setenv("TABLE_NAME", TABLE)
        monkeypatch.setenv("MANAGER_SKILL", "manager")
        lambda_env.reset()
        yield DynamoSessionStore(TABLE, client=client)
        lambda_env.reset()


def queued(store: DynamoSessionStore, handoff_id: str = "h-1", reason: str = "billing") -> str:
    """A session whose handoff waits for an agent (as the assignment-queue consumer leaves it)."""
    session_id = store.sessions.create_session("customer-1").session_id
    store.handoffs.queue_handoff(
        session_id, handoff_id=handoff_id, reason=reason, priority="high", execution_arn=None, task_token="tok"
    )
    return session_id


def put(store: DynamoSessionStore, inbox: str, session_id: str, handoff_id: str = "h-1") -> InboxWrite:
    return store.inbox.put_inbox_item(inbox, session_id=session_id, handoff_id=handoff_id, reason="billing")


def assign(store: DynamoSessionStore, session_id: str, agent_id: str, handoff_id: str = "h-1") -> None:
    begin_handoff(
        store,
        session_id,
        handoff_id=handoff_id,
        agent_id=agent_id,
        reason="billing",
        priority="high",
        execution_arn=None,
        system_text="handed over",
    )


# ------------------------------------------------------------------ writes only while true


def test_each_inbox_takes_a_handoff_only_in_the_state_it_means(store: DynamoSessionStore) -> None:
    # Given a queued handoff
    sid = queued(store)
    # Then only the waiting inbox takes it, once
    assert put(store, keys.WAITING_INBOX, sid) == InboxWrite.WRITTEN
    assert put(store, keys.WAITING_INBOX, sid) == InboxWrite.PRESENT
    assert put(store, keys.MANAGERS_INBOX, sid) == InboxWrite.STALE
    assert put(store, "agent-1", sid) == InboxWrite.STALE
    # and an unknown handoff goes nowhere
    assert put(store, keys.WAITING_INBOX, sid, "h-unknown") == InboxWrite.STALE
    assert not InboxWrite.STALE
    assert not InboxWrite.PRESENT
    assert InboxWrite.WRITTEN
    assert inbox_of(store, keys.WAITING_INBOX) == ["h-1"]
    assert inbox_of(store, keys.MANAGERS_INBOX) == inbox_of(store, "agent-1") == []

    # When it is escalated, only the managers inbox takes it (and the waiting item is gone)
    store.handoffs.update_handoff(sid, "h-1", status=HandoffStatus.ESCALATED)
    assert inbox_of(store, keys.WAITING_INBOX) == []
    assert put(store, keys.WAITING_INBOX, sid) == InboxWrite.STALE
    assert put(store, keys.MANAGERS_INBOX, sid) == InboxWrite.WRITTEN

    # When a manager takes it, only that manager's own inbox takes it
    assign(store, sid, "manager-1")
    assert inbox_of(store, keys.MANAGERS_INBOX) == []
    assert put(store, "agent-2", sid) == InboxWrite.STALE
    assert put(store, keys.MANAGERS_INBOX, sid) == InboxWrite.STALE
    assert put(store, "manager-1", sid) == InboxWrite.WRITTEN


def test_assignment_removes_the_waiting_item_and_a_late_waiting_message_does_not_bring_it_back(
    store: DynamoSessionStore,
) -> None:
    sid = queued(store)
    assert put(store, keys.WAITING_INBOX, sid)
    # When an agent is assigned (the handoff transaction)
    assign(store, sid, "agent-1")
    # Then no console offers it as waiting, and the broadcast arriving late writes nothing
    assert inbox_of(store, keys.WAITING_INBOX) == []
    late = {"session_id": sid, "handoff_id": "h-1", "event_type": "handoff_waiting", "reason": "billing"}
    assert dashboard.handler(sqs_event(late), CONTEXT)["batchItemFailures"] == []
    assert inbox_of(store, keys.WAITING_INBOX) == []


def test_close_removes_the_agents_item_and_a_late_assignment_message_does_not_bring_it_back(
    store: DynamoSessionStore,
) -> None:
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))
    sid = queued(store)
    store.agents.reserve_agent("agent-1", sid)
    assign(store, sid, "agent-1")
    assigned = {"session_id": sid, "handoff_id": "h-1", "event_type": "assigned", "agent_id": "agent-1"}
    assert dashboard.handler(sqs_event(assigned), CONTEXT)["batchItemFailures"] == []
    assert inbox_of(store, "agent-1") == ["h-1"]
    # When the agent closes it
    close_handoff(store, sid, "h-1", closed_by="agent-1", resolution="done", outcome=SessionStatus.ACTIVE)
    # Then the item is gone, and the same message redelivered now writes nothing (no error)
    assert inbox_of(store, "agent-1") == []
    assert dashboard.handler(sqs_event(assigned), CONTEXT)["batchItemFailures"] == []
    assert inbox_of(store, "agent-1") == []


def test_reassignment_moves_the_handoff_from_the_agents_inbox_back_to_the_waiting_one(
    store: DynamoSessionStore,
) -> None:
    sid = queued(store)
    assign(store, sid, "agent-1")
    assert put(store, "agent-1", sid)
    # When the idle agent's handoff is re-queued
    store.handoffs.requeue_handoff(sid, "h-1", previous_agent_id="agent-1")
    # Then the agent's item is gone and a late message for that agent writes nothing,
    # while the next waiting broadcast is welcome
    assert inbox_of(store, "agent-1") == []
    assert put(store, "agent-1", sid) == InboxWrite.STALE
    assert put(store, keys.WAITING_INBOX, sid) == InboxWrite.WRITTEN
    # And a requeue of a handoff that is not assigned stays refused, changing nothing
    with pytest.raises(Exception, match="not re-queued"):
        store.handoffs.requeue_handoff(sid, "h-1")
    assert inbox_of(store, keys.WAITING_INBOX) == ["h-1"]


def test_failure_removes_every_item_of_the_handoff(store: DynamoSessionStore) -> None:
    sid = queued(store)
    assert put(store, keys.WAITING_INBOX, sid)
    failed = store.handoffs.update_handoff(sid, "h-1", status=HandoffStatus.FAILED)
    assert failed.status == HandoffStatus.FAILED
    assert inbox_of(store, keys.WAITING_INBOX) == []
    assert put(store, keys.WAITING_INBOX, sid) == InboxWrite.STALE
    # An assigned handoff that fails leaves its agent's inbox too
    other = queued(store, "h-2")
    assign(store, other, "agent-3", "h-2")
    assert put(store, "agent-3", other, "h-2")
    store.handoffs.update_handoff(other, "h-2", status=HandoffStatus.FAILED)
    assert inbox_of(store, "agent-3") == []


# ------------------------------------------------------------------ the read


def test_list_inbox_answers_own_then_waiting_then_managers_and_only_what_still_holds(
    store: DynamoSessionStore,
) -> None:
    own = queued(store, "h-own")
    assign(store, own, "agent-1", "h-own")
    waiting = queued(store, "h-wait")
    escalated = queued(store, "h-esc")
    store.handoffs.update_handoff(escalated, "h-esc", status=HandoffStatus.ESCALATED)
    for inbox, sid, hid in (
        ("agent-1", own, "h-own"),
        (keys.WAITING_INBOX, waiting, "h-wait"),
        (keys.MANAGERS_INBOX, escalated, "h-esc"),
    ):
        assert put(store, inbox, sid, hid)
    # An item that something outside the store left behind (its handoff failed without the store)
    store.table.client.update_item(
        TableName=TABLE,
        Key={"PK": {"S": f"SESSION#{waiting}"}, "SK": {"S": "HANDOFF#h-wait"}},
        UpdateExpression="SET #s = :f",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":f": {"S": "failed"}},
    )
    assert inbox_of(store, keys.WAITING_INBOX) == ["h-wait"]

    agent_view = store.inbox.list_inbox("agent-1")
    manager_view = store.inbox.list_inbox("agent-1", managers=True)

    assert [(i.inbox, i.handoff_id) for i in agent_view.items] == [("own", "h-own")]
    assert [(i.inbox, i.handoff_id) for i in manager_view.items] == [("own", "h-own"), ("managers", "h-esc")]
    assert manager_view.items[0].to_dict() == {
        "inbox": "own",
        "session_id": own,
        "handoff_id": "h-own",
        "reason": "billing",
        "priority": "high",  # the record's, whatever the message said
        "since": manager_view.items[0].since,
        "waiting_since": store.handoffs.get_handoff(own, "h-own").created_at,  # type: ignore[union-attr]
    }
    assert agent_view.next_cursor is None
    assert store.inbox.list_inbox("agent-2").items == []  # another agent sees neither agent-1's nor a stale item


def test_list_inbox_pages_across_the_inboxes_without_losing_or_repeating_an_item(store: DynamoSessionStore) -> None:
    expected = []
    for n in range(3):
        sid = queued(store, f"h-own-{n}")
        assign(store, sid, "agent-1", f"h-own-{n}")
        assert put(store, "agent-1", sid, f"h-own-{n}")
        expected.append(("own", f"h-own-{n}"))
    for n in range(2):
        sid = queued(store, f"h-wait-{n}")
        assert put(store, keys.WAITING_INBOX, sid, f"h-wait-{n}")
        expected.append(("waiting", f"h-wait-{n}"))
    sid = queued(store, "h-esc")
    store.handoffs.update_handoff(sid, "h-esc", status=HandoffStatus.ESCALATED)
    assert put(store, keys.MANAGERS_INBOX, sid, "h-esc")
    expected.append(("managers", "h-esc"))

    for limit in (1, 2, 3, 6, 7):
        seen, cursor, pages = [], None, 0
        while True:
            page = store.inbox.list_inbox("agent-1", managers=True, limit=limit, cursor=cursor)
            pages += 1
            assert len(page.items) <= limit
            seen += [(i.inbox, i.handoff_id) for i in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
            assert page.items, f"an empty page before the end (limit {limit})"
        assert seen == expected, limit
        assert pages == -(-len(expected) // limit), limit


def test_an_inbox_cursor_opens_only_the_inbox_it_was_issued_for(store: DynamoSessionStore) -> None:
    for n in range(2):
        sid = queued(store, f"h-{n}")
        store.handoffs.update_handoff(sid, f"h-{n}", status=HandoffStatus.ESCALATED)
        assert put(store, keys.MANAGERS_INBOX, sid, f"h-{n}")
    page = store.inbox.list_inbox("agent-1", managers=True, limit=1)
    assert page.next_cursor is not None
    with pytest.raises(InvalidCursor):
        store.inbox.list_inbox("agent-2", managers=True, cursor=page.next_cursor)  # another agent
    with pytest.raises(InvalidCursor):
        store.inbox.list_inbox("agent-1", cursor=page.next_cursor)  # the managers inbox, for a non-manager
    with pytest.raises(InvalidCursor):
        store.inbox.list_inbox("agent-1", cursor="bm90IGEgY3Vyc29y")


# ------------------------------------------------------------------ the route


def inbox_route(sub: str | None = "agent-1", role: str = "agent", query: dict[str, str] | None = None) -> Any:
    """GET /agents/me/inbox as API Gateway sends it: (status, body)."""
    event = rest_proxy_event(
        "GET",
        "/agents/me/inbox",
        "/agents/me/inbox",
        api=Api(stage="prod"),
        query=query,
        authorizer=authorizer_context(sub, role=role, **({"sub": sub} if sub else {})),
    )
    response = agent_api.handler(event, CONTEXT)
    return int(response["statusCode"]), json.loads(response["body"])


def test_the_route_answers_the_callers_inboxes_and_the_managers_one_only_to_managers(
    store: DynamoSessionStore,
) -> None:
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))
    store.agents.put_agent(Agent(agent_id="boss", skills=("billing", "manager")))
    sid = queued(store)
    assert put(store, keys.WAITING_INBOX, sid)
    esc = queued(store, "h-esc")
    store.handoffs.update_handoff(esc, "h-esc", status=HandoffStatus.ESCALATED)
    assert put(store, keys.MANAGERS_INBOX, esc, "h-esc")

    status, body = inbox_route("agent-1")
    assert status == 200
    assert body["inboxes"] == ["own", "waiting"]
    assert [(i["inbox"], i["handoff_id"], i["session_id"]) for i in body["items"]] == [("waiting", "h-1", sid)]
    assert set(body["items"][0]) == {
        *("inbox", "session_id", "handoff_id", "reason", "priority", "since", "waiting_since", "waiting_seconds")
    }
    assert body["next_cursor"] is None

    status, body = inbox_route("boss", query={"limit": "1"})
    assert status == 200
    assert body["inboxes"] == ["own", "waiting", "managers"]
    assert [i["handoff_id"] for i in body["items"]] == ["h-1"]
    status, body = inbox_route("boss", query={"limit": "1", "cursor": body["next_cursor"]})
    assert (status, [i["handoff_id"] for i in body["items"]], body["next_cursor"]) == (200, ["h-esc"], None)


@pytest.mark.parametrize(
    ("sub", "role", "query", "expected"),
    [
        ("agent-1", "customer", None, 403),
        ("root", "admin", None, 403),
        (None, "agent", None, 403),
        ("stranger", "agent", None, 403),  # an agent token without an agent record
        ("agent-1", "agent", {"limit": "0"}, 400),
        ("agent-1", "agent", {"limit": "101"}, 400),
        ("agent-1", "agent", {"limit": "ten"}, 400),
        ("agent-1", "agent", {"cursor": "%%%"}, 400),
        ("agent-1", "agent", {"agent_id": "agent-2"}, 400),
    ],
)
def test_the_route_refuses_other_roles_and_bad_parameters(
    store: DynamoSessionStore, sub: str | None, role: str, query: dict[str, str] | None, expected: int
) -> None:
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))
    status, body = inbox_route(sub, role, query)
    assert status == expected, body
    assert set(body["error"]) >= {"code", "message"}


# ------------------------------------------------------------------ presence after a release


def test_a_released_agent_is_available_again_only_if_it_was_before(store: DynamoSessionStore) -> None:
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))
    # A handoff that fails (the workflow's HandoffFailed releases the agent): available again
    sid = queued(store)
    store.agents.reserve_agent("agent-1", sid)
    assert store.agents.release_agent("agent-1", session_id=sid).status == AgentStatus.AVAILABLE
    # An agent who chose "away" while busy is away after the release, and takes no handoff
    store.agents.reserve_agent("agent-1", sid)
    store.agents.set_presence("agent-1", AgentStatus.AWAY)
    assert store.agents.release_agent("agent-1", session_id=sid).status == AgentStatus.AWAY
    assert store.agents.find_available_agent("billing") is None
    # Coming back, the old choice does not stick to the next release
    store.agents.set_presence("agent-1", AgentStatus.AVAILABLE)
    store.agents.reserve_agent("agent-1", sid)
    assert store.agents.release_agent("agent-1", session_id=sid).status == AgentStatus.AVAILABLE


# ------------------------------------------------------------------ the customer leaves while queued


def test_abandon_fails_a_waiting_handoff_takes_its_token_and_empties_the_shared_inboxes(
    store: DynamoSessionStore,
) -> None:
    sid = queued(store)
    store.sessions.set_connection(sid, "conn-1")
    assert put(store, keys.WAITING_INBOX, sid)
    # A resumed connection (superseded) must not end it: nothing changes
    with pytest.raises(HandoffClosed):
        abandon_handoff(store, sid, "h-1", closed_by="customer-1", resolution="customer left", if_connection="old")
    assert inbox_of(store, keys.WAITING_INBOX) == ["h-1"]

    abandoned = abandon_handoff(
        store, sid, "h-1", closed_by="customer-1", resolution="customer left", if_connection="conn-1"
    )

    assert (abandoned.task_token, abandoned.waiting_for) == ("tok", "agent")
    handoff = store.handoffs.get_handoff(sid, "h-1")
    assert handoff is not None
    assert handoff.status == HandoffStatus.FAILED
    raw = store.table.client.get_item(TableName=TABLE, Key={"PK": {"S": f"SESSION#{sid}"}, "SK": {"S": "HANDOFF#h-1"}})
    assert raw["Item"]["resolution"]["S"] == "customer left"
    assert "callback_token" not in raw["Item"]
    session = store.sessions.get_session(sid)
    assert session is not None
    assert (session.status, session.connection_id) == (SessionStatus.DISCONNECTED, None)
    assert inbox_of(store, keys.WAITING_INBOX) == []
    assert store.handoffs.claim_callback(sid, "h-1", "agent") is None  # an accept finds no token
    with pytest.raises(HandoffClosed):
        abandon_handoff(store, sid, "h-1", closed_by="customer-1", resolution="customer left")


def test_abandon_leaves_an_assigned_handoff_to_the_close(store: DynamoSessionStore) -> None:
    sid = queued(store)
    assign(store, sid, "agent-1")
    with pytest.raises(HandoffClosed):
        abandon_handoff(store, sid, "h-1", closed_by="customer-1", resolution="customer left")
    handoff = store.handoffs.get_handoff(sid, "h-1")
    assert handoff is not None
    assert handoff.status == HandoffStatus.ASSIGNED


def test_abandon_ends_an_escalated_handoff_and_empties_the_managers_inbox(store: DynamoSessionStore) -> None:
    # Given a handoff escalated after its agent wait ended (EscalateToManager took the wait's token)
    sid = queued(store)
    assert store.handoffs.claim_callback(sid, "h-1", "agent") == "tok"
    store.handoffs.update_handoff(sid, "h-1", status=HandoffStatus.ESCALATED)
    assert put(store, keys.MANAGERS_INBOX, sid)

    abandoned = abandon_handoff(store, sid, "h-1", closed_by="customer-1", resolution="customer left")

    # Then there is no wait to stop, the handoff failed and no manager is offered it
    assert abandoned.task_token is None
    assert abandoned.handoff.status == HandoffStatus.FAILED
    assert inbox_of(store, keys.MANAGERS_INBOX) == []
    assert put(store, keys.MANAGERS_INBOX, sid) == InboxWrite.STALE


@pytest.mark.parametrize("code", ["TaskTimedOut", "TaskDoesNotExist", "ServiceUnavailable"])
def test_disconnect_while_queued_is_done_even_when_the_wait_cannot_be_stopped(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    # Given a queued handoff whose wait Step Functions refuses to fail (ended already, or an outage)
    sid = queued(store)
    store.connections.put_connection("conn-1", session_id=sid, customer_id="customer-1", domain_name="d", stage="prod")
    store.sessions.set_connection(sid, "conn-1")
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    stubber = Stubber(sfn)
    stubber.add_client_error("send_task_failure", service_error_code=code, http_status_code=400)
    monkeypatch.setattr(runtime, "stepfunctions", lambda: sfn)

    # When the customer disconnects
    with stubber:
        outcome = disconnect.disconnect_connection(store, "conn-1")
        stubber.assert_no_pending_responses()  # the token was offered to SendTaskFailure

    # Then the session is disconnected and the handoff failed all the same (the wait ends at
    # its timeout and the workflow finds the session no longer active)
    assert outcome == "disconnected"
    handoff = store.handoffs.get_handoff(sid, "h-1")
    assert handoff is not None
    assert handoff.status == HandoffStatus.FAILED
    assert store.connections.get_connection("conn-1") is None


def test_disconnect_while_queued_is_done_even_when_step_functions_times_out(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a queued handoff and SendTaskFailure never answered (a connect timeout after the client's retries)
    sid = queued(store)
    store.connections.put_connection("conn-1", session_id=sid, customer_id="customer-1", domain_name="d", stage="prod")
    store.sessions.set_connection(sid, "conn-1")

    class Unreachable:
        def send_task_failure(self, **_: Any) -> None:
            raise ConnectTimeoutError(endpoint_url="https://states.us-east-1.amazonaws.com")

    monkeypatch.setattr(runtime, "stepfunctions", Unreachable)

    # When the customer disconnects: nothing raises, and nothing is left behind
    outcome = disconnect.disconnect_connection(store, "conn-1")

    assert outcome == "disconnected"
    handoff = store.handoffs.get_handoff(sid, "h-1")
    assert handoff is not None
    assert handoff.status == HandoffStatus.FAILED
    assert store.connections.get_connection("conn-1") is None


def test_a_transition_that_read_a_stale_agent_reads_again_and_removes_the_right_item(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a handoff now assigned to agent-2, whose item is in its inbox, while the first read
    # of the re-queue still sees it assigned to agent-1 (a reassignment landed in between)
    sid = queued(store)
    assign(store, sid, "agent-2")
    assert put(store, "agent-2", sid)
    real_get = store.table.get
    reads: list[str] = []

    def stale_first(key: keys.Key, **kwargs: Any) -> dict[str, Any] | None:
        item = real_get(key, **kwargs)
        if item is not None and key == keys.handoff_key(sid, "h-1") and not reads:
            reads.append("stale")
            return {**item, "agent_id": "agent-1"}
        reads.append("fresh")
        return item

    monkeypatch.setattr(store.table, "get", stale_first)

    # When the handoff is re-queued
    store.handoffs.requeue_handoff(sid, "h-1")

    # Then the write conditioned on agent-1 was refused, the second read found agent-2, and it is
    # agent-2's item that went
    assert reads[:2] == ["stale", "fresh"]
    assert inbox_of(store, "agent-2") == []
    handoff = store.handoffs.get_handoff(sid, "h-1")
    assert handoff is not None
    assert (handoff.status, handoff.agent_id) == (HandoffStatus.QUEUED, None)


# ------------------------------------------------------------------ a queued customer's place


def test_ahead_of_counts_the_customers_of_the_same_skill_served_before_this_one(store: DynamoSessionStore) -> None:
    # Given billing customers queued high, normal and urgent, and an urgent one for shipping,
    # each in the waiting inbox as the dashboard updater leaves it
    waiting = {}
    for handoff_id, priority, reason in (
        ("h-1", "high", "billing"),
        ("h-2", "normal", "billing"),
        ("h-3", "urgent", "billing"),
        ("h-4", "urgent", "shipping"),
    ):
        session_id = store.sessions.create_session(f"customer-{handoff_id}").session_id
        store.handoffs.queue_handoff(
            session_id, handoff_id=handoff_id, reason=reason, priority=priority, execution_arn=None, task_token="t"
        )
        written = store.inbox.put_inbox_item(
            keys.WAITING_INBOX, session_id=session_id, handoff_id=handoff_id, reason=reason
        )
        assert written is InboxWrite.WRITTEN
        waiting[handoff_id] = store.handoffs.get_handoff(session_id, handoff_id)
    # Then each is told how many customers of its own skill are served before it
    ahead = {h: store.inbox.ahead_of(handoff) for h, handoff in waiting.items() if handoff is not None}
    assert ahead == {"h-1": 1, "h-2": 2, "h-3": 0, "h-4": 0}
    # And a long queue is "at least the limit"
    assert store.inbox.ahead_of(waiting["h-2"], limit=1) == 1  # type: ignore[arg-type]


def test_ahead_of_adds_up_its_pages_and_stops_reading_at_the_limit(store: DynamoSessionStore) -> None:
    # Given six billing customers queued one after another
    queued = []
    for n in range(6):
        session_id = store.sessions.create_session(f"customer-{n}").session_id
        store.handoffs.queue_handoff(
            session_id, handoff_id=f"h-{n}", reason="billing", priority="normal", execution_arn=None, task_token="t"
        )
        store.inbox.put_inbox_item(keys.WAITING_INBOX, session_id=session_id, handoff_id=f"h-{n}", reason="billing")
        queued.append(store.handoffs.get_handoff(session_id, f"h-{n}"))
    last = queued[-1]
    assert last is not None
    # And a table that answers the count two items a page (as a large inbox meets DynamoDB's 1 MB page)
    pages: list[int] = []

    def two_a_page(params: dict[str, Any], **_: Any) -> None:
        params["Limit"] = 2
        pages.append(1)

    events = store.table.client.meta.events
    events.register("provide-client-params.dynamodb.Query", two_a_page)
    try:
        # Then the pages add up to the five ahead
        assert store.inbox.ahead_of(last) == 5
        assert len(pages) == 3
        # And once the limit is reached, no further page is read
        pages.clear()
        assert store.inbox.ahead_of(last, limit=2) == 2
        assert len(pages) == 1
    finally:
        events.unregister("provide-client-params.dynamodb.Query", two_a_page)
