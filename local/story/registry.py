"""The story's agent-registry step: an admin onboards, lists and retires an agent on the deployed stage.

It also holds the registry helpers the other steps call (``register_agent``, ``set_presence``,
declared in ``StoryParts``): an agent is onboarded by an admin and sets its own presence, through the API.

A mixin of :class:`local.story.Story`, which provides the stage, the tokens and the REST plumbing.
"""

from __future__ import annotations

import time
from typing import Any

from lambdas.shared.records import AgentStatus
from local.story.base import Step, StoryParts, expect, token_subject

#: A skill no other step's agent has, so the available-agents index shows this agent alone.
SKILL = "manga_rights"


class RegistrySteps(StoryParts):
    """The registry's whole life through the API (see the module docstring)."""

    def register_agent(
        self,
        step: Step,
        who: str,
        *,
        skills: tuple[str, ...] = ("general",),
        display_name: str | None = None,
        is_manager: bool = False,
        available: bool = False,
    ) -> str:
        """Register ``who`` as an agent the way an admin onboards one: ``POST /admin/agents`` as root.

        The agent id is the subject of ``who``'s token (whatever the identity provider issues),
        so the registry and the agent's own requests name the same agent.
        """
        token = self.tokens.get(who) or self.sign_in(who, "agent")
        agent_id = token_subject(token)
        body = {
            "agent_id": agent_id,
            "display_name": display_name or who,
            "skills": list(skills),
            "is_manager": is_manager,
        }
        response = self.rest(step, "POST", "/admin/agents", "root", body=body)
        expect(response.status == 201, f"registering {who} answered {response.status}: {response.body}")
        expect(response.json()["status"] == "offline", f"a new agent is not offline: {response.body}")
        step.changes.append(f"{who} registered by root (agent {agent_id}, skills {', '.join(skills)}), offline")
        if available:
            self.set_presence(step, who, "available")
        return agent_id

    def set_presence(self, step: Step, who: str, status: str) -> dict[str, Any]:
        response = self.rest(step, "POST", "/agents/me/presence", who, body={"status": status})
        expect(response.status == 200, f"{who}'s presence {status!r} answered {response.status}: {response.body}")
        answer: dict[str, Any] = response.json()
        step.changes.append(f"{who} presence {status} (now {answer['status']})")
        return answer

    def agent_registry(self) -> None:
        started, step = time.monotonic(), self.step("An admin onboards, lists and retires an agent (registry routes)")
        store = self.store()

        # Onboarding: registered by root, in the available-agents index only once it says so itself
        agent_id = self.register_agent(step, "agent-9", skills=(SKILL,), display_name="Agent Nine")
        expect(
            store.agents.find_available_agent(SKILL) is None, "a registered agent is offered work before its presence"
        )
        self.set_presence(step, "agent-9", "available")
        found = store.agents.find_available_agent(SKILL)
        expect(found is not None and found.agent_id == agent_id, f"agent-9 not in the available index: {found}")

        # The gateway's model refuses a bad skill before any Lambda runs; a second registration is 409
        bad = self.rest(
            step, "POST", "/admin/agents", "root", body={"agent_id": agent_id, "display_name": "X", "skills": ["a b"]}
        )
        expect(bad.status == 400, f"a bad skill answered {bad.status}: {bad.body}")
        expect(bad.json()["error"]["code"] == "BAD_REQUEST_BODY", f"not the gateway's 400: {bad.body}")
        again = self.rest(
            step, "POST", "/admin/agents", "root", body={"agent_id": agent_id, "display_name": "X", "skills": [SKILL]}
        )
        expect(again.status == 409, f"a second registration answered {again.status}: {again.body}")

        # Only admins: the agent cannot list or retire (the authorizer's policy denies it)
        for method, path in (("GET", "/admin/agents"), ("POST", f"/admin/agents/{agent_id}/retire")):
            denied = self.rest(step, method, path, "agent-9")
            expect(denied.status == 403, f"agent-9 on {method} {path} answered {denied.status}")

        # The listing, filtered by status, pages with a cursor and shows the live status
        listed = self.rest(step, "GET", "/admin/agents", "root", query={"status": "available", "limit": "1"})
        expect(listed.status == 200, f"listing answered {listed.status}: {listed.body}")
        seen, page = [], listed.json()
        seen += [a["agent_id"] for a in page["agents"]]
        while page["next_cursor"]:
            more = self.rest(
                step,
                "GET",
                "/admin/agents",
                "root",
                query={"status": "available", "limit": "1", "cursor": page["next_cursor"]},
            )
            expect(more.status == 200, f"the next page answered {more.status}: {more.body}")
            page = more.json()
            seen += [a["agent_id"] for a in page["agents"]]
        expect(agent_id in seen, f"agent-9 not among the available agents listed: {seen}")

        # Retiring takes it out of the index; every agent route is then closed to it, saying why
        retired = self.rest(step, "POST", f"/admin/agents/{agent_id}/retire", "root")
        expect(retired.status == 200, f"retire answered {retired.status}: {retired.body}")
        expect(store.agents.find_available_agent(SKILL) is None, "a retired agent is still offered work")
        refused = self.rest(step, "POST", "/agents/me/presence", "agent-9", body={"status": "available"})
        expect(refused.status == 403, f"a retired agent's presence answered {refused.status}: {refused.body}")
        expect("retired" in refused.json()["error"]["message"], f"not the retired refusal: {refused.body}")
        inbox = self.rest(step, "GET", "/agents/me/inbox", "agent-9")
        expect(inbox.status == 403, f"a retired agent read the inbox: {inbox.status} {inbox.body}")
        read = self.rest(step, "GET", f"/admin/agents/{agent_id}", "root")
        expect(read.json()["status"] == "retired", f"the registry shows {read.body}")
        record = store.agents.get_agent(agent_id)
        expect(record is not None and record.status == AgentStatus.RETIRED, f"the record is {record}")
        step.changes.append(f"agent-9 ({agent_id}) retired: out of the index, agent routes 403, record kept")

        # A caller nobody registered is told so
        self.sign_in("agent-10", "agent")
        stranger = self.rest(step, "POST", "/agents/me/presence", "agent-10", body={"status": "available"})
        expect(stranger.status == 404, f"an unregistered agent's presence answered {stranger.status}")
        step.changes.append("unregistered agent-10: presence 404 (not registered)")
        # The registry's writes reach the stream consumers like any other change (nothing left pending)
        self.stage.settle(timeout=20, wait_executions=False)
        self.done(step, started)
