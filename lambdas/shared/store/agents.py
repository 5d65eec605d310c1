"""Agents: the META record and the per-skill rows of the sparse AvailableAgentsIndex, kept in step."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any, Final

from botocore.exceptions import ClientError

from lambdas.shared import keys
from lambdas.shared.errors import AgentNotFound, AgentUnavailable, InvalidInput
from lambdas.shared.records import Agent, AgentStatus
from lambdas.shared.schema import AVAILABLE_AGENTS, SORT_KEY, TTL_ATTRIBUTE
from lambdas.shared.serialize import marshal_item
from lambdas.shared.store.table import (
    CONDITION_FAILED,
    TRANSACTION_CANCELED,
    Expr,
    TableCore,
    Update,
    code_of,
    parse_enum,
    require_id,
)

MAX_AGENT_SKILLS: Final = 40  # keeps put_agent within TransactWriteItems' 100 actions
#: The agent META attribute holding a busy agent's choice for after its release.
PRESENCE: Final = "presence"


class Agents(TableCore):
    """Agent operations."""

    def put_agent(self, agent: Agent) -> Agent:
        """Create or replace an agent, keeping its AvailableAgentsIndex rows in step.

        Writes META plus one SKILL# row per skill while ``available`` and deletes rows of skills
        it no longer has (or all of them when busy/offline): one TransactWriteItems, or one
        PutItem when there are no rows to touch. The store sets ``updated_at``, ``ttl``,
        ``revision`` and, when available and not given, ``available_since`` = now.
        """
        require_id(agent.agent_id, "agent_id")
        status = parse_enum(AgentStatus, agent.status, "agent status")
        skills = tuple(dict.fromkeys(agent.skills))
        if isinstance(agent.skills, str) or len(skills) > MAX_AGENT_SKILLS:
            raise InvalidInput(f"skills must be a list of at most {MAX_AGENT_SKILLS} strings")
        for skill in skills:
            require_id(skill, "skill")
        now = self._now()
        stored = replace(
            agent,
            skills=skills,
            status=status,
            available_since=(agent.available_since or now) if status == AgentStatus.AVAILABLE else None,
            updated_at=now,
            ttl=now + self.ttl_seconds,
            revision=uuid.uuid4().hex,
        )
        wanted = stored.skill_items()
        wanted_sks = {item[SORT_KEY] for item in wanted}
        stale = [
            k
            for k in self._partition_keys(keys.agent_pk(agent.agent_id), keys.SKILL_PREFIX)
            if k[SORT_KEY] not in wanted_sks
        ]
        if not wanted and not stale:
            self.client.put_item(TableName=self.table_name, Item=marshal_item(stored.to_item()))
            return stored
        actions: list[dict[str, Any]] = [
            {"Put": {"TableName": self.table_name, "Item": marshal_item(item)}} for item in [stored.to_item(), *wanted]
        ]
        actions += [{"Delete": {"TableName": self.table_name, "Key": marshal_item(k)}} for k in stale]
        try:
            self.client.transact_write_items(TransactItems=actions)
        except ClientError as err:
            if code_of(err) == TRANSACTION_CANCELED:
                raise AgentUnavailable(agent.agent_id, "changed concurrently; retry") from None
            raise
        return stored

    def get_agent(self, agent_id: str) -> Agent | None:
        require_id(agent_id, "agent_id")
        item = self._get(keys.agent_key(agent_id))
        return Agent.from_item(item) if item else None

    def find_available_agent(self, skill: str, *, managers_only: bool = False) -> Agent | None:
        """The longest-waiting available agent with ``skill`` (or None).

        Queries the sparse AvailableAgentsIndex (oldest ``available_since`` first), then reads
        each candidate's META consistently, because the index lags: the first candidate still
        available (and a manager, with ``managers_only``) is returned. Reserve it with
        :meth:`reserve_agent`, which may still lose to a concurrent caller (AgentUnavailable).
        """
        require_id(skill, "skill")
        index = AVAILABLE_AGENTS
        expr = Expr()
        candidates = self._query(
            IndexName=index.name,
            KeyConditionExpression=f"{expr.n(index.partition_key)} = {expr.v(skill)}",
            ScanIndexForward=True,
            Limit=10,
            **expr.params(),
        )
        for checked, row in enumerate(candidates):
            if checked >= 25:
                break
            agent = self.get_agent(str(row["agent_id"]))
            if agent is None or agent.status != AgentStatus.AVAILABLE:
                continue
            if managers_only and not agent.is_manager:
                continue
            return agent
        return None

    def reserve_agent(self, agent_id: str, session_id: str) -> Agent:
        """Make an available agent busy with ``session_id``; exactly one concurrent caller wins.

        One TransactWriteItems: META available -> busy, conditioned on the status and on the
        ``revision`` read just before (so a concurrent skill change cannot leave a stale index
        row), plus deleting the agent's SKILL# rows (out of the AvailableAgentsIndex).
        Raises AgentNotFound or AgentUnavailable (a Conflict).
        """
        require_id(session_id, "session_id")
        current = self.get_agent(agent_id)
        if current is None:
            raise AgentNotFound(agent_id)
        if current.status != AgentStatus.AVAILABLE:
            raise AgentUnavailable(agent_id, f"is {current.status}")
        now = self._now()
        revision = uuid.uuid4().hex
        expr = Expr()
        update = Update(expr)
        update.set("status", str(AgentStatus.BUSY))
        update.set("current_session_id", session_id)
        update.set("updated_at", now)
        update.set(TTL_ATTRIBUTE, now + self.ttl_seconds)
        update.set("revision", revision)
        update.remove("available_since")
        condition = (
            f"{expr.n('status')} = {expr.v(str(AgentStatus.AVAILABLE))} AND "
            f"{expr.n('revision')} = {expr.v(current.revision)}"
        )
        actions: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.table_name,
                    "Key": marshal_item(keys.agent_key(agent_id)),
                    "UpdateExpression": update.expression(),
                    "ConditionExpression": condition,
                    **expr.params(),
                }
            }
        ]
        actions += [
            {
                "Delete": {
                    "TableName": self.table_name,
                    "Key": marshal_item(keys.agent_skill_key(agent_id, skill)),
                }
            }
            for skill in current.skills
        ]
        try:
            self.client.transact_write_items(TransactItems=actions)
        except ClientError as err:
            if code_of(err) == TRANSACTION_CANCELED:
                raise AgentUnavailable(agent_id, "was reserved or changed concurrently") from None
            raise
        return replace(
            current,
            status=AgentStatus.BUSY,
            current_session_id=session_id,
            available_since=None,
            updated_at=now,
            ttl=now + self.ttl_seconds,
            revision=revision,
        )

    def release_agent(self, agent_id: str, *, session_id: str | None = None) -> Agent:
        """Make a busy agent available again (back into the AvailableAgentsIndex).

        With ``session_id``, only if the agent is serving that session. One TransactWriteItems:
        META busy -> available (conditioned like :meth:`reserve_agent`) plus the SKILL# rows.
        """
        current = self.get_agent(agent_id)
        if current is None:
            raise AgentNotFound(agent_id)
        actions, released = self.release_actions(current, session_id=session_id)
        try:
            self.client.transact_write_items(TransactItems=actions)
        except ClientError as err:
            if code_of(err) == TRANSACTION_CANCELED:
                raise AgentUnavailable(agent_id, "was released or changed concurrently") from None
            raise
        return released

    def set_presence(self, agent_id: str, presence: AgentStatus | str) -> Agent:
        """The agent's own choice, ``available`` or ``away``, in effect at once.

        A free agent moves now (into or out of the AvailableAgentsIndex, via :meth:`put_agent`); a
        busy one keeps serving its session and the choice applies when it is released.
        """
        wanted = parse_enum(AgentStatus, presence, "presence")
        if wanted not in (AgentStatus.AVAILABLE, AgentStatus.AWAY):
            raise InvalidInput(f"presence must be available or away (given {presence!r})")
        current = self.get_agent(agent_id)
        if current is None:
            raise AgentNotFound(agent_id)
        if current.status != AgentStatus.BUSY:
            return self.put_agent(replace(current, status=wanted, available_since=None))
        expr = Expr()
        update = Update(expr)
        update.set(PRESENCE, str(wanted))
        condition = f"{expr.n('status')} = {expr.v(str(AgentStatus.BUSY))}"
        try:
            self._update(keys.agent_key(agent_id), update, condition, return_values="NONE")
        except ClientError as err:
            if code_of(err) == CONDITION_FAILED:
                raise AgentUnavailable(agent_id, "changed concurrently; retry") from None
            raise
        return current

    def release_actions(self, current: Agent, *, session_id: str | None = None) -> tuple[list[dict[str, Any]], Agent]:
        """The transaction items that release ``current`` (as just read), and the agent they write.

        Lets another transaction (closing a handoff) release the agent in the same atomic write.
        Raises AgentUnavailable when the agent is not busy (with ``session_id``: with that session).
        """
        agent_id = current.agent_id
        if current.status != AgentStatus.BUSY:
            raise AgentUnavailable(agent_id, f"is {current.status}, not busy")
        if session_id is not None and current.current_session_id != session_id:
            raise AgentUnavailable(agent_id, f"is not serving session {session_id!r}")
        now = self._now()
        # An agent who chose "away" while busy stays away once released (nothing new is offered).
        away = (self._get(keys.agent_key(agent_id)) or {}).get(PRESENCE) == str(AgentStatus.AWAY)
        released = replace(
            current,
            status=AgentStatus.AWAY if away else AgentStatus.AVAILABLE,
            current_session_id=None,
            available_since=None if away else now,
            updated_at=now,
            ttl=now + self.ttl_seconds,
            revision=uuid.uuid4().hex,
        )
        expr = Expr()
        condition = (
            f"{expr.n('status')} = {expr.v(str(AgentStatus.BUSY))} AND "
            f"{expr.n('revision')} = {expr.v(current.revision)}"
        )
        actions: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": marshal_item(released.to_item()),
                    "ConditionExpression": condition,
                    **expr.params(),
                }
            }
        ]
        actions += [
            {"Put": {"TableName": self.table_name, "Item": marshal_item(item)}} for item in released.skill_items()
        ]
        return actions, released
