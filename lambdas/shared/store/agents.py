"""Agents: the registry, the META record and the per-skill rows of the sparse AvailableAgentsIndex.

Who writes the AvailableAgentsIndex (the ``SKILL#`` rows), and nothing else does in the product:
the registry (:meth:`Agents.register_agent` creates an agent ``offline``, so without rows;
:meth:`Agents.update_agent` rewrites an available agent's rows when its skills change;
:meth:`Agents.retire_agent` deletes them), the agent's own presence (:meth:`Agents.set_presence`)
and the handoff workflow's :meth:`Agents.reserve_agent` / :meth:`Agents.release_agent`.
Each of these writes is conditioned on the ``revision`` it read, so two of them cannot interleave
into a META and index rows that disagree.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any, Final

from botocore.exceptions import ClientError

from lambdas.shared import cursor as cursors
from lambdas.shared import keys
from lambdas.shared.errors import (
    AgentBusy,
    AgentExists,
    AgentNotFound,
    AgentRetired,
    AgentUnavailable,
    BatchWriteIncomplete,
    InvalidCursor,
    InvalidInput,
)
from lambdas.shared.records import Agent, AgentStatus
from lambdas.shared.schema import AVAILABLE_AGENTS, PARTITION_KEY, SORT_KEY, TTL_ATTRIBUTE
from lambdas.shared.serialize import marshal_item, unmarshal_item
from lambdas.shared.store.table import (
    CONDITION_FAILED,
    MAX_PAGE_SIZE,
    TRANSACTION_CANCELED,
    Expr,
    Page,
    TableCore,
    Update,
    code_of,
    parse_enum,
    require_id,
    require_limit,
)

MAX_AGENT_SKILLS: Final = 40  # keeps put_agent within TransactWriteItems' 100 actions
#: The agent META attribute holding a busy agent's choice for after its release.
PRESENCE: Final = "presence"


class Agents(TableCore):
    """Agent operations."""

    def put_agent(self, agent: Agent, *, expected_revision: str | None = None) -> Agent:
        """Create or replace an agent, keeping its AvailableAgentsIndex rows in step.

        Writes META plus one SKILL# row per skill while ``available`` and deletes rows of skills
        it no longer has (or all of them when busy/offline): one TransactWriteItems, or one
        PutItem when there are no rows to touch. The store sets ``updated_at``, ``revision`` and,
        when available and not given, ``available_since`` = now; an agent has no ``ttl``. With
        ``expected_revision``, META must still hold that revision (AgentUnavailable otherwise).
        """
        stored, actions = self._agent_actions(agent, expected_revision=expected_revision)
        self._transact(agent.agent_id, actions)
        return stored

    def _agent_actions(
        self, agent: Agent, *, expected_revision: str | None = None
    ) -> tuple[Agent, list[dict[str, Any]]]:
        """The agent as it will be stored, and the write items of :meth:`put_agent` (META first)."""
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
            ttl=None,
            revision=uuid.uuid4().hex,
        )
        wanted = stored.skill_items()
        wanted_sks = {item[SORT_KEY] for item in wanted}
        stale = [
            k
            for k in self._partition_keys(keys.agent_pk(agent.agent_id), keys.SKILL_PREFIX)
            if k[SORT_KEY] not in wanted_sks
        ]
        meta: dict[str, Any] = {"TableName": self.table_name, "Item": marshal_item(stored.to_item())}
        if expected_revision is not None:
            expr = Expr()
            meta["ConditionExpression"] = f"{expr.n('revision')} = {expr.v(expected_revision)}"
            meta.update(expr.params())
        actions: list[dict[str, Any]] = [{"Put": meta}]
        actions += [{"Put": {"TableName": self.table_name, "Item": marshal_item(item)}} for item in wanted]
        actions += [{"Delete": {"TableName": self.table_name, "Key": marshal_item(k)}} for k in stale]
        return stored, actions

    def _transact(self, agent_id: str, actions: list[dict[str, Any]]) -> None:
        """Write ``actions`` atomically (a lone Put as PutItem); a lost condition is AgentUnavailable."""
        try:
            if len(actions) == 1 and "Put" in actions[0]:
                self.client.put_item(**actions[0]["Put"])
            else:
                self.client.transact_write_items(TransactItems=actions)
        except ClientError as err:
            if code_of(err) in (TRANSACTION_CANCELED, CONDITION_FAILED):
                raise AgentUnavailable(agent_id, "changed concurrently; retry") from None
            raise

    # ------------------------------------------------------------------ registry

    def register_agent(self, agent_id: str, *, name: str, skills: tuple[str, ...], is_manager: bool = False) -> Agent:
        """Register a new agent, ``offline`` until it sets its presence; AgentExists if the id is taken.

        One TransactWriteItems: META and the directory row, each only if absent. A retired
        agent's id stays taken (its handoffs keep naming it).
        """
        require_id(agent_id, "agent_id")
        now = self._now()
        stored, actions = self._agent_actions(
            Agent(agent_id=agent_id, skills=tuple(skills), status=AgentStatus.OFFLINE, is_manager=is_manager, name=name)
        )
        expr = Expr()
        actions[0]["Put"]["ConditionExpression"] = f"attribute_not_exists({expr.n(PARTITION_KEY)})"
        actions[0]["Put"].update(expr.params())
        directory = {
            **keys.agent_directory_key(agent_id),
            "agent_id": agent_id,
            "name": name,
            "registered_at": now,
        }
        actions.append({"Put": {"TableName": self.table_name, "Item": marshal_item(directory)}})
        try:
            self.client.transact_write_items(TransactItems=actions)
        except ClientError as err:
            if code_of(err) == TRANSACTION_CANCELED:
                existing = self.get_agent(agent_id)
                if existing is not None:
                    raise AgentExists(agent_id, str(existing.status)) from None
                raise AgentUnavailable(agent_id, "changed concurrently; retry") from None
            raise
        return stored

    def update_agent(
        self,
        agent_id: str,
        *,
        name: str | None = None,
        skills: tuple[str, ...] | None = None,
        is_manager: bool | None = None,
    ) -> Agent:
        """Change a registered agent's display name, skills or manager flag (None keeps one).

        An available agent's index rows follow its new skills in the same transaction; a busy
        one keeps serving and is indexed under the new skills when released.
        """
        current = self._registered(agent_id)
        changed = replace(
            current,
            name=current.name if name is None else name,
            skills=current.skills if skills is None else tuple(skills),
            is_manager=current.is_manager if is_manager is None else is_manager,
        )
        stored, actions = self._agent_actions(changed, expected_revision=current.revision)
        if name is not None:
            actions.append(self._directory_update(agent_id, "name", name))
        self._transact(agent_id, actions)
        return stored

    def retire_agent(self, agent_id: str) -> Agent:
        """Take an agent out of service for good: status ``retired``, out of the AvailableAgentsIndex.

        Refused with AgentBusy while the agent holds a reserved or assigned handoff (status
        ``busy``); conditioned on the revision read, so a reservation that lands meanwhile makes
        this fail (AgentUnavailable) instead of retiring an agent in the middle of a handoff.
        """
        current = self._registered(agent_id)
        if current.status == AgentStatus.BUSY:
            raise AgentBusy(agent_id, current.current_session_id)
        now = self._now()
        retired = replace(current, status=AgentStatus.RETIRED, current_session_id=None, retired_at=now)
        stored, actions = self._agent_actions(retired, expected_revision=current.revision)
        actions.append(self._directory_update(agent_id, "retired_at", now))
        self._transact(agent_id, actions)
        return stored

    def _directory_update(self, agent_id: str, attribute: str, value: Any) -> dict[str, Any]:
        """A transaction action setting one attribute of the agent's directory row."""
        expr = Expr()
        update = Update(expr)
        update.set(attribute, value)
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": marshal_item(keys.agent_directory_key(agent_id)),
                "UpdateExpression": update.expression(),
                **expr.params(),
            }
        }

    def list_agents(
        self, *, limit: int = 25, cursor: str | None = None, status: AgentStatus | str | None = None
    ) -> Page[Agent]:
        """Registered agents by id, ``limit`` (1..100) directory rows a page, optionally one status.

        The directory is one partition (one Query a page); each page's agents are then read
        with one consistent BatchGetItem, so the status is current. With ``status``, a page
        holds the matching agents of its ``limit`` rows: it may be short or empty and still
        have a ``next_cursor``.
        """
        require_limit(limit, MAX_PAGE_SIZE)
        wanted = None if status is None else parse_enum(AgentStatus, status, "status")
        scope = "agents"
        start = None
        if cursor is not None:
            start = cursors.decode(cursor, scope, {PARTITION_KEY: str, SORT_KEY: str})
            if start[PARTITION_KEY] != keys.AGENT_DIRECTORY_PK or not str(start[SORT_KEY]).startswith(
                keys.AGENT_PREFIX
            ):
                raise InvalidCursor("it was issued for another listing")
        expr = Expr()
        rows, next_cursor = self._query_page(
            {
                "KeyConditionExpression": f"{expr.n(PARTITION_KEY)} = {expr.v(keys.AGENT_DIRECTORY_PK)}",
                **expr.params(),
            },
            limit=limit,
            scope=scope,
            key_attributes=(PARTITION_KEY, SORT_KEY),
            start=start,
        )
        agents = self._agents_by_id([str(row["agent_id"]) for row in rows])
        listed = [agent for agent in agents if wanted is None or agent.status == wanted]
        return Page(listed, next_cursor)

    def _agents_by_id(self, agent_ids: list[str]) -> list[Agent]:
        """The agents' META records (consistent), in the order of ``agent_ids``; missing ones skipped."""
        found: dict[str, Agent] = {}
        pending: dict[str, Any] | None = {
            self.table_name: {
                "Keys": [marshal_item(keys.agent_key(agent_id)) for agent_id in agent_ids],
                "ConsistentRead": True,
            }
        }
        attempt = 0
        while pending and agent_ids:
            response = self.client.batch_get_item(RequestItems=pending)
            for item in response.get("Responses", {}).get(self.table_name, []):
                agent = Agent.from_item(unmarshal_item(item))
                found[agent.agent_id] = agent
            pending = response.get("UnprocessedKeys") or None
            if pending:
                attempt += 1
                if attempt > self.max_batch_retries:
                    raise BatchWriteIncomplete(len(pending[self.table_name]["Keys"]), len(found))
                self._sleep(self._backoff(attempt))
        return [found[agent_id] for agent_id in agent_ids if agent_id in found]

    def _registered(self, agent_id: str) -> Agent:
        """The agent, if registered and not retired: AgentNotFound / AgentRetired otherwise."""
        current = self.get_agent(agent_id)
        if current is None:
            raise AgentNotFound(agent_id)
        if current.status == AgentStatus.RETIRED:
            raise AgentRetired(agent_id)
        return current

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
        update.remove(TTL_ATTRIBUTE)  # an agent is a registry entry, never expired by the table
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
            ttl=None,
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
        busy one keeps serving its session and the choice applies when it is released. Raises
        AgentNotFound for an unregistered agent and AgentRetired for a retired one.
        """
        wanted = parse_enum(AgentStatus, presence, "presence")
        if wanted not in (AgentStatus.AVAILABLE, AgentStatus.AWAY):
            raise InvalidInput(f"presence must be available or away (given {presence!r})")
        current = self._registered(agent_id)
        if current.status != AgentStatus.BUSY:
            return self.put_agent(
                replace(current, status=wanted, available_since=None), expected_revision=current.revision
            )
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
            ttl=None,
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
