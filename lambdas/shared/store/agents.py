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
from lambdas.shared.store.expressions import Expr, Update
from lambdas.shared.store.table import (
    MAX_PAGE_SIZE,
    Aggregate,
    Cancelled,
    ConditionFailed,
    Page,
    Transaction,
    parse_enum,
    require_id,
    require_limit,
)

MAX_AGENT_SKILLS: Final = 40  # keeps put_agent within TransactWriteItems' 100 actions
#: The agent META attribute holding a busy agent's choice for after its release.
PRESENCE: Final = "presence"


class Agents(Aggregate):
    """Agent operations."""

    def put_agent(self, agent: Agent, *, expected_revision: str | None = None) -> Agent:
        """Create or replace an agent, keeping its AvailableAgentsIndex rows in step.

        Writes META plus one SKILL# row per skill while ``available`` and deletes rows of skills
        it no longer has (or all of them when busy/offline): one TransactWriteItems, or one
        PutItem when there are no rows to touch. The store sets ``updated_at``, ``revision`` and,
        when available and not given, ``available_since`` = now; an agent has no ``ttl``. With
        ``expected_revision``, META must still hold that revision (AgentUnavailable otherwise).
        """
        stored, tx = self._agent_transaction(agent, expected_revision=expected_revision)
        self._commit(agent.agent_id, tx)
        return stored

    def _agent_transaction(
        self, agent: Agent, *, expected_revision: str | None = None, new: bool = False
    ) -> tuple[Agent, Transaction]:
        """The agent as it will be stored, and the transaction of :meth:`put_agent` (META first, as ``agent``).

        ``new``: META must not exist yet; ``expected_revision``: META must still hold that revision.
        """
        require_id(agent.agent_id, "agent_id")
        status = parse_enum(AgentStatus, agent.status, "agent status")
        skills = tuple(dict.fromkeys(agent.skills))
        if isinstance(agent.skills, str) or len(skills) > MAX_AGENT_SKILLS:
            raise InvalidInput(f"skills must be a list of at most {MAX_AGENT_SKILLS} strings")
        for skill in skills:
            require_id(skill, "skill")
        now = self.table.now()
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
            for k in self.table.partition_keys(keys.agent_pk(agent.agent_id), keys.SKILL_PREFIX)
            if k[SORT_KEY] not in wanted_sks
        ]
        tx = Transaction(self.table.table_name)
        if new:
            tx.put_new("agent", stored.to_item())
        elif expected_revision is not None:
            expr = Expr()
            tx.put(
                "agent", stored.to_item(), condition=f"{expr.n('revision')} = {expr.v(expected_revision)}", expr=expr
            )
        else:
            tx.put("agent", stored.to_item())
        for item in wanted:
            tx.put(f"skill:{item[SORT_KEY]}", item)
        for k in stale:
            tx.delete(f"stale:{k[SORT_KEY]}", k)
        return stored, tx

    def _commit(self, agent_id: str, tx: Transaction) -> None:
        """Write ``tx`` atomically; a lost condition is AgentUnavailable."""
        try:
            self.table.commit(tx)
        except Cancelled:
            raise AgentUnavailable(agent_id, "changed concurrently; retry") from None

    # ------------------------------------------------------------------ registry

    def register_agent(self, agent_id: str, *, name: str, skills: tuple[str, ...], is_manager: bool = False) -> Agent:
        """Register a new agent, ``offline`` until it sets its presence; AgentExists if the id is taken.

        One TransactWriteItems: META and the directory row, each only if absent. A retired
        agent's id stays taken (its handoffs keep naming it).
        """
        require_id(agent_id, "agent_id")
        now = self.table.now()
        stored, tx = self._agent_transaction(
            Agent(
                agent_id=agent_id, skills=tuple(skills), status=AgentStatus.OFFLINE, is_manager=is_manager, name=name
            ),
            new=True,
        )
        directory = {
            **keys.agent_directory_key(agent_id),
            "agent_id": agent_id,
            "name": name,
            "registered_at": now,
        }
        tx.put("directory", directory)
        try:
            self.table.commit(tx)
        except Cancelled:
            existing = self.get_agent(agent_id)
            if existing is not None:
                raise AgentExists(agent_id, str(existing.status)) from None
            raise AgentUnavailable(agent_id, "changed concurrently; retry") from None
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
        stored, tx = self._agent_transaction(changed, expected_revision=current.revision)
        if name is not None:
            self._directory_update(tx, agent_id, "name", name)
        self._commit(agent_id, tx)
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
        now = self.table.now()
        retired = replace(current, status=AgentStatus.RETIRED, current_session_id=None, retired_at=now)
        stored, tx = self._agent_transaction(retired, expected_revision=current.revision)
        self._directory_update(tx, agent_id, "retired_at", now)
        self._commit(agent_id, tx)
        return stored

    def _directory_update(self, tx: Transaction, agent_id: str, attribute: str, value: Any) -> None:
        """Add to ``tx`` the update of one attribute of the agent's directory row (action ``directory``)."""
        update = Update(Expr())
        update.set(attribute, value)
        tx.update("directory", keys.agent_directory_key(agent_id), update)

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
        rows, next_cursor = self.table.query_page(
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
            self.table.table_name: {
                "Keys": [marshal_item(keys.agent_key(agent_id)) for agent_id in agent_ids],
                "ConsistentRead": True,
            }
        }
        attempt = 0
        while pending and agent_ids:
            response = self.table.client.batch_get_item(RequestItems=pending)
            for item in response.get("Responses", {}).get(self.table.table_name, []):
                agent = Agent.from_item(unmarshal_item(item))
                found[agent.agent_id] = agent
            pending = response.get("UnprocessedKeys") or None
            if pending:
                attempt += 1
                if attempt > self.table.max_batch_retries:
                    raise BatchWriteIncomplete(len(pending[self.table.table_name]["Keys"]), len(found))
                self.table.sleep(self.table.backoff(attempt))
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
        item = self.table.get(keys.agent_key(agent_id))
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
        candidates = self.table.query(
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
        now = self.table.now()
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
        tx = Transaction(self.table.table_name)
        tx.update("agent", keys.agent_key(agent_id), update, condition=condition)
        for skill in current.skills:
            tx.delete(f"skill:{skill}", keys.agent_skill_key(agent_id, skill))
        try:
            self.table.commit(tx)
        except Cancelled:
            raise AgentUnavailable(agent_id, "was reserved or changed concurrently") from None
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
        tx = Transaction(self.table.table_name)
        released = self.release(tx, current, session_id=session_id)
        try:
            self.table.commit(tx)
        except Cancelled:
            raise AgentUnavailable(agent_id, "was released or changed concurrently") from None
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
            self.table.update_if(keys.agent_key(agent_id), update, condition, returns="NONE")
        except ConditionFailed:
            raise AgentUnavailable(agent_id, "changed concurrently; retry") from None
        return current

    def release(self, tx: Transaction, current: Agent, *, session_id: str | None = None) -> Agent:
        """Add the release of ``current`` (as just read) to ``tx`` (action ``agent``); returns the agent it writes.

        Lets another transaction (closing a handoff) release the agent in the same atomic write.
        Raises AgentUnavailable when the agent is not busy (with ``session_id``: with that session).
        """
        agent_id = current.agent_id
        if current.status != AgentStatus.BUSY:
            raise AgentUnavailable(agent_id, f"is {current.status}, not busy")
        if session_id is not None and current.current_session_id != session_id:
            raise AgentUnavailable(agent_id, f"is not serving session {session_id!r}")
        now = self.table.now()
        # An agent who chose "away" while busy stays away once released (nothing new is offered).
        away = (self.table.get(keys.agent_key(agent_id)) or {}).get(PRESENCE) == str(AgentStatus.AWAY)
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
        tx.put("agent", released.to_item(), condition=condition, expr=expr)
        for item in released.skill_items():
            tx.put(f"skill:{item[SORT_KEY]}", item)
        return released
