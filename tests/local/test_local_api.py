"""``make local`` driven as real clients drive it: HTTP for REST, a WebSocket for the chat.

One server (``python -m local`` in a subprocess, on free ports) serves the module: the whole
story (sign in, session, streamed chat, summary, handoff accepted and answered by an agent,
disconnect, cleanup by an admin) and the bad paths each client can hit. Stopping the server
with SIGINT must exit 0 without a traceback.
"""

from __future__ import annotations

import asyncio
import html
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import pytest

from tests.local.clients import Clients, subject
from tests.local.process import LocalProcess, local_server

pytestmark = pytest.mark.slow

#: Seconds between the local responder's tokens: a reply of ~70 tokens streams for about a second.
TOKEN_DELAY = "0.015"


@pytest.fixture(scope="module")
def server() -> Iterator[LocalProcess]:
    with local_server("--token-delay", TOKEN_DELAY) as running:
        yield running
        code = running.stop()
        assert code == 0, f"python -m local exited {code} on SIGINT:\n{running.output}"
        assert "Traceback" not in running.output, running.output


def drive(server: LocalProcess, scenario: Callable[[Clients], Awaitable[None]]) -> None:
    async def run() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            await scenario(Clients(http, server))

    asyncio.run(run())


def is_type(kind: str, **fields: Any) -> Callable[[Any], bool]:
    return lambda frame: frame.get("type") == kind and all(frame.get(k) == v for k, v in fields.items())


def test_startup_prints_where_it_serves(server: LocalProcess) -> None:
    config = server.config()
    assert config["rest"] == server.rest
    assert config["websocket"] == server.websocket
    assert server.rest.startswith("http://127.0.0.1:")
    assert server.rest.endswith("/dev")
    assert {u["role"] for u in config["demo_users"]} == {"customer", "agent", "admin"}


def test_the_whole_story_over_http_and_websocket(server: LocalProcess) -> None:
    async def story(c: Clients) -> None:
        customer = await c.token("story-customer@example.com", "customer")
        agent = await c.token("story-agent@example.com", "agent")  # registered by the server, offline
        admin = await c.token("admin@example.com")

        created = await c.rest("POST", "/sessions", customer, {"customer_id": subject(customer)})
        assert created.status == 201, created
        session_id = created.body["session_id"]
        chat = await c.chat(customer, session_id)
        welcome = await chat.wait_for(is_type("welcome"))
        assert welcome["session_id"] == session_id

        # Chat: each reply streams as deltas while it is written, then a final frame.
        for n in range(1, 6):
            before = len(chat.frames)
            await chat.send(f"message {n} about Frieren")
            final = await chat.wait_for(is_type("final"), after=before)
            reply = [f for f in chat.frames[before:] if f.body.get("reply_to") == final["reply_to"]]
            deltas = [f for f in reply if f.body["type"] == "delta"]
            text = "".join(f.body["text"] for f in deltas)
            assert text.startswith(f"[local responder] You said: message {n} about Frieren"), text
            assert len(deltas) >= 3, f"the reply came in {len(deltas)} deltas"
            # the first delta came well before the end of the reply: streamed, not delivered at the end
            assert reply[-1].at - deltas[0].at > 0.3, [round(f.at - deltas[0].at, 3) for f in reply]
        turns = await c.rest("GET", f"/sessions/{session_id}/turns?limit=100", customer)
        assert turns.status == 200
        assert len(turns.body["turns"]) == 11, turns

        # The 10th turn made the stream's summary generator write a summary (the pump ran it).
        for _ in range(100):
            if server.status()["summaries_written"] >= 1:
                break
            await asyncio.sleep(0.2)
        status = server.status()
        assert status["summaries_written"] >= 1, status
        assert status["bedrock_calls"]["not_streamed"] >= 1, status

        # Handoff: no agent is available, so it waits in every agent's inbox.
        asked = await c.rest("POST", f"/sessions/{session_id}/handoff", customer, {"reason": "general"})
        assert asked.status == 202, asked
        inbox = await c.wait_rest(
            "GET",
            "/agents/me/inbox",
            agent,
            lambda r: any(i["session_id"] == session_id for i in (r.body or {}).get("items", [])),
        )
        assert [i["inbox"] for i in inbox.body["items"] if i["session_id"] == session_id] == ["waiting"]
        presence = await c.rest("POST", "/agents/me/presence", agent, {"status": "available"})
        assert presence.status == 200, presence
        accepted = await c.rest("POST", f"/handoffs/{session_id}/accept", agent)
        assert accepted.status == 200, accepted
        await chat.wait_for(is_type("notification", event_type="handoff_started"))

        # The agent's reply reaches the customer over the socket; the customer's message reaches the agent.
        before = len(chat.frames)
        sent = await c.rest("POST", f"/handoffs/{session_id}/messages", agent, {"text": "Hi, I am your agent."})
        assert sent.status == 201, sent
        assert sent.body["delivered"] is True
        message = await chat.wait_for(is_type("message", role="agent"), after=before)
        assert message["text"] == "Hi, I am your agent."
        await chat.send("Is volume 3 out?")
        await chat.wait_for(is_type("ack"), after=before)
        turns = await c.rest("GET", f"/sessions/{session_id}/turns?limit=100", agent)
        assert turns.body["turns"][-1]["content"] == "Is volume 3 out?", turns
        closed = await c.rest(
            "POST", f"/handoffs/{session_id}/close", agent, {"resolution": "answered", "outcome": "resume"}
        )
        assert closed.status == 200, closed
        await chat.wait_for(is_type("handoff_closed"), after=before)
        assert (await c.rest("POST", "/agents/me/presence", agent, {"status": "away"})).status == 200

        # The customer leaves: $disconnect marks the session (resumable for the grace period), the
        # customer deletes it, and an admin's cleanup archives it.
        await chat.close()
        await c.wait_rest("GET", f"/sessions/{session_id}", customer, lambda r: r.body.get("status") == "disconnected")
        assert (await c.rest("DELETE", f"/sessions/{session_id}", customer)).status == 202
        await asyncio.sleep(1.1)  # "older than 0 s" means deleted in an earlier second (epoch seconds)
        cleanup = await c.rest("POST", "/admin/cleanup", admin, {"older_than_seconds": 0})
        assert cleanup.status == 202, cleanup
        arn = urllib.parse.quote(cleanup.body["execution_arn"], safe="")
        done = await c.wait_rest(
            "GET", f"/executions/{arn}", admin, lambda r: r.body.get("status") != "RUNNING", timeout=60
        )
        assert done.body["status"] == "SUCCEEDED", done
        archived = await c.rest("GET", f"/sessions/{session_id}", admin)
        assert archived.body["status"] == "archived", archived

    drive(server, story)


def test_an_export_is_approved_from_the_review_link_the_status_page_shows(server: LocalProcess) -> None:
    async def review(c: Clients) -> None:
        admin = await c.token("admin@example.com")
        started = await c.rest("POST", "/admin/export", admin, {"reason": "quarterly analytics"})
        assert started.status == 202, started
        deadline = time.monotonic() + 30
        while not (status := await c._call("GET", f"{server.origin}/local/status")).body["reviews"]:
            assert time.monotonic() < deadline, status
            await asyncio.sleep(0.2)
        links = status.body["reviews"][0]
        assert links["approve"].startswith(server.rest + "/reviews/"), links  # served here, not by AWS
        async with c.http.get(links["approve"]) as page:
            assert page.status == 200
            fields = re.findall(r'<input type="hidden" name="([a-z]+)" value="([^"]*)">', await page.text())
        async with c.http.post(links["approve"], data={name: html.unescape(value) for name, value in fields}) as done:
            assert done.status == 200, await done.text()
        arn = urllib.parse.quote(started.body["execution_arn"], safe="")
        # the export polls DynamoDB's export once a minute on the stage's clock: let the minutes pass
        deadline = time.monotonic() + 240
        while (finished := await c.rest("GET", f"/executions/{arn}", admin)).body.get("status") == "RUNNING":
            assert time.monotonic() < deadline, finished
            moved = await c._call("POST", f"{server.origin}/local/clock", {"advance_seconds": 60})
            assert moved.status == 200, moved
            await asyncio.sleep(0.5)
        assert finished.body["status"] == "SUCCEEDED", finished

    drive(server, review)


def test_time_passes_on_the_stages_clock_when_asked_and_only_forward(server: LocalProcess) -> None:
    async def passing(c: Clients) -> None:
        clock = f"{server.origin}/local/clock"
        first = await c._call("POST", clock, {"advance_seconds": 1})
        assert first.status == 200, first
        second = await c._call("POST", clock, {"advance_seconds": 30.5})
        assert second.body["advanced_seconds"] == 30.5, second
        assert second.body["now"] >= first.body["now"] + 30.5, (first, second)
        for refused in (0, -5, "60", True, None, 8 * 24 * 3600):
            reply = await c._call("POST", clock, {"advance_seconds": refused})
            assert (reply.status, reply.body["error"]["code"]) == (400, "Bad Request"), (refused, reply)
            assert "advance_seconds must be a number" in reply.body["error"]["message"], reply
        assert (await c._call("GET", clock)).status == 405

    drive(server, passing)


def test_rest_refuses_as_api_gateway_does(server: LocalProcess) -> None:
    async def refusals(c: Clients) -> None:
        customer = await c.token("customer@example.com")
        sub = subject(customer)
        missing = await c.rest("GET", f"/customers/{sub}/sessions")
        assert (missing.status, missing.code) == (401, "UNAUTHORIZED"), missing
        forged = await c.rest(
            "GET", f"/customers/{sub}/sessions", customer[:-4] + ("BBBB" if customer.endswith("AAAA") else "AAAA")
        )
        assert (forged.status, forged.code) == (401, "UNAUTHORIZED"), forged
        assert forged.headers["WWW-Authenticate"] == "Bearer", forged
        wrong_role = await c.rest("POST", "/admin/cleanup", customer, {})
        assert wrong_role.status == 403, wrong_role
        unknown = await c.rest("GET", "/no/such/route", customer)
        assert unknown.status == 403, unknown  # API Gateway's "Missing Authentication Token"

        created = await c.rest("POST", "/sessions", customer, {"customer_id": sub})
        session_id = created.body["session_id"]
        # over the local cap: a JSON error like every other, not the HTTP server's own text
        huge = await c.rest("POST", f"/sessions/{session_id}/handoff", customer, {"reason": "x" * (2 * 1024 * 1024)})
        assert (huge.status, huge.code) == (413, "REQUEST_TOO_LARGE"), huge
        bad = await c.rest("POST", f"/sessions/{session_id}/handoff", customer, {"reason": "Drop Table;", "x": 1})
        assert (bad.status, bad.code) == (400, "BAD_REQUEST_BODY"), bad
        assert bad.body["error"]["message"].startswith("Invalid request body: ["), bad
        assert "'x' was unexpected" in bad.body["error"]["message"], bad  # the gateway names the field
        # what the gateway model cannot check, the Lambda does: its message names the field and the rule
        refused = await c.rest("GET", "/sessions/Not-A-Uuid/turns?limit=500", customer)
        assert refused.status == 400, refused
        assert "must" in refused.body["error"]["message"], refused

        preflight = await c.rest(
            "OPTIONS", "/sessions", headers={"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"}
        )
        assert preflight.status == 204, preflight
        assert preflight.headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
        assert "POST" in preflight.headers["Access-Control-Allow-Methods"]

        wrong = await c.sign_in("customer@example.com", "not the password")
        assert wrong.status == 401, wrong
        no_role = await c._call("POST", f"{c.server.origin}/local/users", {"email": "x@example.com", "role": "root"})
        assert no_role.status == 400, no_role
        # a new agent is not a manager unless asked for, and only an agent can be one
        admin = await c.token("admin@example.com")
        for email, manager in (("plain-agent@example.com", False), ("second-manager@example.com", True)):
            made = await c._call(
                "POST", f"{c.server.origin}/local/users", {"email": email, "role": "agent", "manager": manager}
            )
            assert (made.status, made.body["manager"]) == (201, manager), made
            registered = await c.rest("GET", f"/admin/agents/{subject(await c.token(email))}", admin)
            assert registered.body["is_manager"] is manager, registered
        customer_manager = {"email": "y@example.com", "role": "customer", "manager": True}
        assert (await c._call("POST", f"{c.server.origin}/local/users", customer_manager)).status == 400
        demo = await c.rest("GET", f"/admin/agents/{subject(await c.token('agent@example.com'))}", admin)
        assert demo.body["is_manager"] is False, demo

        # What a page on another site could send: a "simple" text/plain POST, or JSON from its origin
        users, admin_body = f"{c.server.origin}/local/users", '{"email": "evil@example.com", "role": "admin"}'
        async with c.http.post(users, data=admin_body, headers={"Content-Type": "text/plain"}) as simple:
            assert simple.status == 415
        foreign_headers = {"Content-Type": "application/json", "Origin": "http://evil.example"}
        async with c.http.post(users, data=admin_body, headers=foreign_headers) as foreign:
            assert foreign.status == 403
        assert (await c.sign_in("evil@example.com")).status == 401  # no such user was made
        # a DNS-rebinding page keeps its own name in Host: nothing is served to it, least of all the password
        async with c.http.get(f"{c.server.origin}/local/config", headers={"Host": "evil.example:8300"}) as rebound:
            assert rebound.status == 421
            assert "password" not in await rebound.text()

    drive(server, refusals)


def test_websocket_refuses_and_limits_as_api_gateway_does(server: LocalProcess) -> None:
    async def refusals(c: Clients) -> None:
        for token, status in ((None, 401), (await c.token("agent@example.com"), 403)):
            params = {"token": token} if token else {}
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await c.http.ws_connect(server.websocket, params=params)
            assert refused.value.status == status

        # the $connect handler's refusals reach the client as it wrote them: status and code
        customer = await c.token("limits-customer@example.com", "customer")
        ended = await c.rest("POST", "/sessions", customer, {"customer_id": subject(customer)})
        assert ended.status == 201, ended
        sid = ended.body["session_id"]
        assert (await c.rest("DELETE", f"/sessions/{sid}", customer)).status == 202
        for session_id, status, code in (("Not-A-Uuid", 400, "invalid_session_id"), (sid, 410, "session_closed")):
            answer = await c.handshake(customer, session_id)
            assert (answer.status, answer.body["code"]) == (status, code), answer

        chat = await c.chat(customer)
        await chat.wait_for(is_type("welcome"))
        # the access log wrote the chat's URL without the token it carries
        assert customer not in "\n".join(server.lines)
        assert "token=<redacted>" in "\n".join(server.lines)
        # exactly 32 KB is a frame API Gateway takes (the handler refuses the text as too long)
        frame = '{"action": "sendMessage", "text": "'
        await chat.ws.send_str(frame + "x" * (32 * 1024 - len(frame) - 2) + '"}')
        refusal = await chat.wait_for(is_type("error"))
        assert refusal["code"] == "message_too_long", refusal
        # one byte more closes the connection with 1009 (Message Too Big)
        await chat.ws.send_str(frame + "x" * (32 * 1024 - len(frame) - 1) + '"}')
        assert chat.reader is not None
        await asyncio.wait_for(chat.reader, 10)
        assert chat.ws.close_code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG

    drive(server, refusals)


def test_a_dropped_connection_gets_410_and_the_session_is_disconnected(server: LocalProcess) -> None:
    async def dropped(c: Clients) -> None:
        customer = await c.token("dropping-customer@example.com", "customer")
        created = await c.rest("POST", "/sessions", customer, {"customer_id": subject(customer)})
        session_id = created.body["session_id"]
        chat = await c.chat(customer, session_id)
        await chat.wait_for(is_type("welcome"))
        gone_before = server.status()["gone_posts"]
        await chat.send("a question I will not wait for")
        await chat.wait_for(is_type("delta"))
        await chat.close()  # while the reply still streams
        session = await c.wait_rest(
            "GET", f"/sessions/{session_id}", customer, lambda r: r.body.get("status") == "disconnected"
        )
        assert session.status == 200
        assert server.status()["gone_posts"] > gone_before
        turns = await c.rest("GET", f"/sessions/{session_id}/turns?limit=100", customer)
        # the message is stored; the abandoned reply is not
        assert [t["role"] for t in turns.body["turns"]] == ["assistant", "user"], turns

    drive(server, dropped)
