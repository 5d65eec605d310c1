"""The smoke story's conversation: its users created and signed in, the agent registered, a session, the chat
opened, a question answered in deltas and read back word for word.

A mixin of :class:`local.smoke.story.SmokeStory`, which provides the state and the plumbing declared in
``SmokeParts``.
"""

from __future__ import annotations

from local.smoke.client import StreamedReply, UserExists
from local.smoke.story.base import SmokeFailure, SmokeParts, expect, shorten


class ConversationSteps(SmokeParts):
    """From the smoke's users to the assistant's first answer (see the module docstring)."""

    async def create_users(self) -> None:
        self.step.calls.append(self.directory.description)
        for user in self.users.values():
            try:
                await self.directory.create(user)
            except UserExists as error:  # not ours: it is left alone
                raise SmokeFailure(f"{error}; it is not the smoke's, so it was left alone (run again)") from None
            except BaseException:
                self.ledger.users.append(user)  # a create that failed midway may have left the user
                raise
            self.ledger.users.append(user)
            self.saw(f"{user.email} ({user.role}, unverified address, a random password)")

    async def sign_in(self) -> None:
        self.step.calls.append(self.directory.sign_in_description)
        for user in self.users.values():
            tokens = await self.directory.sign_in(user.email, user.password)
            expect(tokens.role == user.role, f"{user.email}'s token carries role {tokens.role}, not {user.role}")
            self.tokens[user.label] = tokens
            self.saw(f"{user.label}: {user.role} {tokens.sub}")

    async def register_agent(self) -> None:
        agent_id = self.signed_in("agent").sub
        body = {
            "agent_id": agent_id,
            "display_name": f"Smoke agent {self.run_id}",
            "skills": [self.skill],
            "is_manager": False,
        }
        self.ledger.agent_id = agent_id  # before the call: an answer lost on the way still gets it retired
        reply = await self.rest("POST", "/admin/agents", "admin", body)
        expect(reply.status == 201, f"registering the agent: {reply.detail()}")
        expect(reply.json.get("status") == "offline", f"a new agent is not offline: {reply.detail()}")
        self.saw(f"agent {agent_id}, skill {self.skill}, offline")

    async def create_session(self) -> None:
        customer = self.signed_in("customer").sub
        body = {"customer_id": customer, "metadata": {"source": "web", "language": "en"}}
        reply = await self.rest("POST", "/sessions", "customer", body)
        expect(reply.status == 201, f"creating a session: {reply.detail()}")
        session = reply.json
        self.session_id = str(session.get("session_id", ""))
        expect(bool(self.session_id), f"the new session has no id: {reply.detail()}")
        self.ledger.sessions.append(self.session_id)
        expect(session.get("customer_id") == customer, f"the session names customer {session.get('customer_id')}")
        expect(session.get("status") == "active", f"a new session is {session.get('status')}, not active")
        self.saw(f"session {self.session_id}, active")

    async def connect(self) -> None:
        socket = await self.client.connect(self.token("customer"), self.session_id)
        self.ledger.sockets.append(socket)
        self.socket = socket
        self.step.calls.append(f"connect {socket.description} -> 101")
        welcome = await socket.wait_for(
            lambda frame: frame.get("type") == "welcome", "welcome frame", timeout=self.timeout
        )
        expect(welcome.get("session_id") == self.session_id, f"welcome names another session: {welcome}")
        expect(welcome.get("status") == "active", f"welcome says the session is {welcome.get('status')}")
        self.saw(f"welcome: {shorten(str(welcome.get('message', '')))}")

    async def chat(self) -> None:
        question = f"Smoke test {self.run_id}: is volume 3 of Frieren out?"
        reply = await self.converse(question)
        self.values["question"], self.values["reply"] = question, reply

    async def read_back(self) -> None:
        customer = self.signed_in("customer").sub
        session = await self.rest("GET", f"/sessions/{self.session_id}", "customer")
        expect(session.status == 200, f"reading the session: {session.detail()}")
        expect(session.json.get("status") == "active", f"the session is {session.json.get('status')}, not active")
        turns = await self.rest("GET", f"/sessions/{self.session_id}/turns", "customer", query={"limit": "100"})
        expect(turns.status == 200, f"reading the turns: {turns.detail()}")
        stored = {int(t["turn_number"]): t for t in turns.json.get("turns", [])}
        reply: StreamedReply = self.values["reply"]
        number = int(reply.end["turn_number"])
        expect(number in stored, f"the reply's turn {number} is not among the turns read back: {sorted(stored)}")
        expect(
            stored[number].get("role") == "assistant" and stored[number].get("content") == reply.text,
            f"turn {number} holds {stored[number]!r}, not the deltas joined {reply.text!r}",
        )
        asked = [t for t in stored.values() if t.get("role") == "user" and t.get("content") == self.values["question"]]
        expect(len(asked) == 1, f"the question is stored {len(asked)} time(s)")
        listing = await self.rest("GET", f"/customers/{customer}/sessions", "customer")
        expect(listing.status == 200, f"listing the customer's sessions: {listing.detail()}")
        listed = [s.get("session_id") for s in listing.json.get("sessions", [])]
        expect(self.session_id in listed, f"the customer's sessions do not list {self.session_id}: {listed}")
        self.saw(f"{len(stored)} turns; turn {number} is the streamed reply, word for word; the session is listed")
