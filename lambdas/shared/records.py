"""Typed records of the single table and the session status machine.

Each record is a frozen dataclass with ``to_item()`` (a Python dict with its ``PK``/``SK``, ready
for :func:`lambdas.shared.serialize.marshal_item`) and ``from_item()`` (the inverse, accepting
what :func:`lambdas.shared.serialize.unmarshal_item` returns, Decimals included). Timestamps
are epoch seconds (int) everywhere.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any, Final

from lambdas.shared import keys
from lambdas.shared.schema import AVAILABLE_AGENTS, CLEANUP, PARTITION_KEY, SESSIONS_BY_STATUS, SORT_KEY
from lambdas.shared.serialize import plain


class SessionStatus(StrEnum):
    ACTIVE = "active"
    HANDOFF = "handoff"
    DISCONNECTED = "disconnected"
    ARCHIVED = "archived"
    DELETED = "deleted"


# The architecture page: active -> handoff -> active; active|handoff -> disconnected;
# disconnected|deleted -> archived; any -> deleted. Keyed by target: the allowed sources, which
# is exactly what the conditional UpdateItem checks. A status never "moves" to itself: a repeated
# request is refused (InvalidTransition(x, x)) so callers see that nothing changed.
ALLOWED_SOURCES: Final[Mapping[SessionStatus, frozenset[SessionStatus]]] = {
    SessionStatus.ACTIVE: frozenset({SessionStatus.HANDOFF}),
    SessionStatus.HANDOFF: frozenset({SessionStatus.ACTIVE}),
    SessionStatus.DISCONNECTED: frozenset({SessionStatus.ACTIVE, SessionStatus.HANDOFF}),
    SessionStatus.ARCHIVED: frozenset({SessionStatus.DISCONNECTED, SessionStatus.DELETED}),
    SessionStatus.DELETED: frozenset(
        {
            SessionStatus.ACTIVE,
            SessionStatus.HANDOFF,
            SessionStatus.DISCONNECTED,
            SessionStatus.ARCHIVED,
        }
    ),
}

TURN_ACCEPTING: Final = frozenset({SessionStatus.ACTIVE, SessionStatus.HANDOFF})
"""Statuses in which a session accepts turns and WebSocket connections."""

AWAITING_CLEANUP: Final = frozenset({SessionStatus.DISCONNECTED, SessionStatus.DELETED})
"""Statuses that put a session into the sparse CleanupIndex."""


def can_transition(current: str, new: str) -> bool:
    """True when the status machine allows ``current -> new``."""
    return SessionStatus(current) in ALLOWED_SOURCES[SessionStatus(new)]


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    AGENT = "agent"
    SYSTEM = "system"


class HandoffStatus(StrEnum):
    """A handoff's status; a new one is ``queued`` (waiting for an agent) or ``assigned`` (taken at once)."""

    QUEUED = "queued"
    ASSIGNED = "assigned"
    ESCALATED = "escalated"
    COMPLETED = "completed"
    FAILED = "failed"


#: The statuses of a handoff that waits for someone to take it (an agent, or a manager).
WAITING_STATUSES: Final = (HandoffStatus.QUEUED, HandoffStatus.ESCALATED)


class AgentStatus(StrEnum):
    AVAILABLE = "available"
    BUSY = "busy"
    OFFLINE = "offline"
    AWAY = "away"  # signed in but taking no handoffs (the agent's own choice)
    RETIRED = "retired"  # removed from the registry by an admin; kept for the handoffs it served


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        raise ValueError(f"expected a number (given {value!r})")
    return int(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _with_key(pk_sk: keys.Key, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The item: key plus the attributes that are set (``None`` means absent)."""
    item: dict[str, Any] = dict(pk_sk)
    item.update({k: v for k, v in attrs.items() if v is not None})
    return item


@dataclass(frozen=True)
class Session:
    """A chat session: ``SESSION#<id>`` / ``META``."""

    session_id: str
    customer_id: str
    status: SessionStatus
    turn_count: int
    created_at: int
    updated_at: int
    ttl: int
    metadata: Mapping[str, Any] = field(default_factory=dict)
    connection_id: str | None = None
    disconnected_at: int | None = None
    deleted_at: int | None = None
    archived_at: int | None = None
    archive_key: str | None = None
    # Set only while the session waits for cleanup (status disconnected or deleted).
    cleanup_shard: str | None = None
    cleanup_at: int | None = None
    # The customer's verified e-mail from their token when the session began: where notices go
    # while they are away from the chat. Never shown by the API (serialize.INTERNAL_ATTRIBUTES).
    customer_email: str | None = None
    # How often the session was rewound (absent: never): a reply computed before a rewind is
    # stored only while this is still the number it started from.
    rewinds: int = 0
    # The session's newest handoff (absent: none yet); it stays after the handoff ends, so its
    # status says whether the customer still waits (see ``shown_status``).
    current_handoff_id: str | None = None

    def to_item(self) -> dict[str, Any]:
        return _with_key(
            keys.session_key(self.session_id),
            {
                "session_id": self.session_id,
                "customer_id": self.customer_id,
                "status": str(self.status),
                "turn_count": self.turn_count,
                "created_at": self.created_at,
                "updated_at": self.updated_at,
                "ttl": self.ttl,
                "metadata": dict(self.metadata),
                "connection_id": self.connection_id,
                "disconnected_at": self.disconnected_at,
                "deleted_at": self.deleted_at,
                "archived_at": self.archived_at,
                "archive_key": self.archive_key,
                CLEANUP.partition_key: self.cleanup_shard,
                CLEANUP.sort_key: self.cleanup_at,
                "customer_email": self.customer_email,
                # A whole item is written only at creation: the session entered its status then.
                SESSIONS_BY_STATUS.partition_key: keys.status_pk(str(self.status)),
                SESSIONS_BY_STATUS.sort_key: keys.status_sort(self.created_at, self.session_id),
            },
        )

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Session:
        return cls(
            session_id=str(item["session_id"]),
            customer_id=str(item["customer_id"]),
            status=SessionStatus(item["status"]),
            turn_count=_int(item.get("turn_count", 0)),
            created_at=_int(item["created_at"]),
            updated_at=_int(item["updated_at"]),
            ttl=_int(item["ttl"]),
            metadata=plain(item.get("metadata") or {}),
            connection_id=_opt_str(item.get("connection_id")),
            disconnected_at=_opt_int(item.get("disconnected_at")),
            deleted_at=_opt_int(item.get("deleted_at")),
            archived_at=_opt_int(item.get("archived_at")),
            archive_key=_opt_str(item.get("archive_key")),
            cleanup_shard=_opt_str(item.get(CLEANUP.partition_key)),
            cleanup_at=_opt_int(item.get(CLEANUP.sort_key)),
            customer_email=_opt_str(item.get("customer_email")),
            rewinds=_int(item.get("rewinds", 0)),
            current_handoff_id=_opt_str(item.get("current_handoff_id")),
        )


SESSION_SETTABLE_ATTRIBUTES: Final = frozenset(
    {"connection_id", "disconnected_at", "deleted_at", "archived_at", "archive_key"}
)
"""Session attributes ``update_status(..., **attrs)`` may set (``None`` removes one)."""


@dataclass(frozen=True)
class TokenUsage:
    """The tokens a model call used, as the model reported them (ConverseStream's ``metadata.usage``)."""

    input_tokens: int
    output_tokens: int

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class Turn:
    """One chat message: ``SESSION#<id>`` / ``TURN#<number, 10 digits>``.

    ``content`` is text here; the item stores it zlib-compressed as Binary. ``stopped``: why an
    assistant's reply stopped before the model had finished it (``max_tokens``, ``deadline``), so
    the customer may ask for the rest; None for every other turn (and then not stored).
    ``input_tokens`` / ``output_tokens``: on an assistant turn the model wrote, the tokens its call
    used (:attr:`usage`); None on every other turn.
    """

    session_id: str
    turn_number: int
    role: Role
    content: str
    created_at: int
    ttl: int
    stopped: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None

    @property
    def usage(self) -> TokenUsage | None:
        """The tokens the model's call used for this turn, when it wrote it and reported them."""
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return TokenUsage(self.input_tokens, self.output_tokens)

    def to_item(self) -> dict[str, Any]:
        usage = self.usage
        tokens = {}
        if usage is not None:
            tokens = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
        return _with_key(
            keys.turn_key(self.session_id, self.turn_number),
            {
                "session_id": self.session_id,
                "turn_number": self.turn_number,
                "role": str(self.role),
                "content": compress(self.content),
                "created_at": self.created_at,
                "ttl": self.ttl,
                **({"stopped": self.stopped} if self.stopped else {}),
                **tokens,
            },
        )

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Turn:
        raw = item.get("content", b"")
        return cls(
            session_id=str(item["session_id"]),
            turn_number=_int(item["turn_number"]),
            role=Role(item["role"]),
            content=decompress(raw) if isinstance(raw, (bytes, bytearray)) else str(raw),
            created_at=_int(item["created_at"]),
            ttl=_int(item["ttl"]),
            stopped=str(item["stopped"]) if item.get("stopped") else None,
            input_tokens=_opt_int(item.get("input_tokens")),
            output_tokens=_opt_int(item.get("output_tokens")),
        )


def compress(text: str) -> bytes:
    """Turn content as stored: UTF-8, zlib level 6."""
    return zlib.compress(text.encode("utf-8"), 6)


def decompress(blob: bytes | bytearray) -> str:
    return zlib.decompress(bytes(blob)).decode("utf-8")


@dataclass(frozen=True)
class Summary:
    """Rolling summary of turns ``window_start..window_end``: ``SUMMARY#<n, 10 digits>``."""

    session_id: str
    summary_number: int
    summary_text: str
    window_start: int
    window_end: int
    turn_count_at_summary: int
    created_at: int
    ttl: int

    def to_item(self) -> dict[str, Any]:
        return _with_key(
            keys.summary_key(self.session_id, self.summary_number),
            {
                "session_id": self.session_id,
                "summary_number": self.summary_number,
                "summary_text": self.summary_text,
                "window_start": self.window_start,
                "window_end": self.window_end,
                "turn_count_at_summary": self.turn_count_at_summary,
                "created_at": self.created_at,
                "ttl": self.ttl,
            },
        )

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Summary:
        return cls(
            session_id=str(item["session_id"]),
            summary_number=_int(item["summary_number"]),
            summary_text=str(item["summary_text"]),
            window_start=_int(item["window_start"]),
            window_end=_int(item["window_end"]),
            turn_count_at_summary=_int(item["turn_count_at_summary"]),
            created_at=_int(item["created_at"]),
            ttl=_int(item["ttl"]),
        )


@dataclass(frozen=True)
class Handoff:
    """A request to hand a session to a human agent: ``SESSION#<id>`` / ``HANDOFF#<id>``.

    Handoff ids start with the creation time in milliseconds, so SK order is creation order.
    """

    session_id: str
    handoff_id: str
    reason: str
    priority: str
    status: HandoffStatus
    created_at: int
    updated_at: int
    ttl: int
    agent_id: str | None = None
    execution_arn: str | None = None
    # When the current agent was assigned, and when that agent first replied (handoff metrics).
    assigned_at: int | None = None
    first_reply_at: int | None = None

    def to_item(self) -> dict[str, Any]:
        return _with_key(
            keys.handoff_key(self.session_id, self.handoff_id),
            {
                "session_id": self.session_id,
                "handoff_id": self.handoff_id,
                "reason": self.reason,
                "priority": self.priority,
                "status": str(self.status),
                "created_at": self.created_at,
                "updated_at": self.updated_at,
                "ttl": self.ttl,
                "agent_id": self.agent_id,
                "execution_arn": self.execution_arn,
                "assigned_at": self.assigned_at,
                "first_reply_at": self.first_reply_at,
            },
        )

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Handoff:
        return cls(
            session_id=str(item["session_id"]),
            handoff_id=str(item["handoff_id"]),
            reason=str(item["reason"]),
            priority=str(item["priority"]),
            status=HandoffStatus(item["status"]),
            created_at=_int(item["created_at"]),
            updated_at=_int(item.get("updated_at", item["created_at"])),
            ttl=_int(item["ttl"]),
            agent_id=_opt_str(item.get("agent_id")),
            execution_arn=_opt_str(item.get("execution_arn")),
            assigned_at=_opt_int(item.get("assigned_at")),
            first_reply_at=_opt_int(item.get("first_reply_at")),
        )


@dataclass(frozen=True)
class Agent:
    """A human support agent: ``AGENT#<id>`` / ``META``.

    While available, the agent also owns one ``SKILL#<skill>`` row per skill that carries the
    sparse AvailableAgentsIndex keys (see :meth:`skill_items`). ``available_since``,
    ``updated_at`` and ``revision`` are set by the store on every write; ``revision`` is an
    opaque token that changes on every write (optimistic concurrency for reservations). An
    agent is a registry entry, not session data: it has no ``ttl`` unless one was written
    before the registry existed (such an item keeps it until it is written again).
    """

    agent_id: str
    skills: tuple[str, ...]
    status: AgentStatus = AgentStatus.AVAILABLE
    is_manager: bool = False
    current_session_id: str | None = None
    name: str | None = None
    available_since: int | None = None
    updated_at: int = 0
    ttl: int | None = None
    revision: str = ""
    retired_at: int | None = None

    def to_item(self) -> dict[str, Any]:
        return _with_key(
            keys.agent_key(self.agent_id),
            {
                "agent_id": self.agent_id,
                "skills": list(self.skills),
                "status": str(self.status),
                "is_manager": self.is_manager,
                "current_session_id": self.current_session_id,
                "name": self.name,
                "available_since": self.available_since,
                "updated_at": self.updated_at,
                "ttl": self.ttl,
                "revision": self.revision,
                "retired_at": self.retired_at,
            },
        )

    def skill_items(self) -> list[dict[str, Any]]:
        """The AvailableAgentsIndex rows: one per skill while available, none otherwise."""
        if self.status != AgentStatus.AVAILABLE:
            return []
        return [
            _with_key(
                keys.agent_skill_key(self.agent_id, skill),
                {
                    "agent_id": self.agent_id,
                    "skills": list(self.skills),
                    AVAILABLE_AGENTS.partition_key: skill,
                    AVAILABLE_AGENTS.sort_key: self.available_since or self.updated_at,
                    "ttl": self.ttl,
                },
            )
            for skill in self.skills
        ]

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Agent:
        return cls(
            agent_id=str(item["agent_id"]),
            skills=tuple(str(s) for s in item.get("skills") or ()),
            status=AgentStatus(item["status"]),
            is_manager=bool(item.get("is_manager", False)),
            current_session_id=_opt_str(item.get("current_session_id")),
            name=_opt_str(item.get("name")),
            available_since=_opt_int(item.get("available_since")),
            updated_at=_int(item.get("updated_at", 0)),
            ttl=_opt_int(item.get("ttl")),
            revision=str(item.get("revision", "")),
            retired_at=_opt_int(item.get("retired_at")),
        )


@dataclass(frozen=True)
class Connection:
    """A live WebSocket connection: ``CONN#<connection_id>`` / ``META``."""

    connection_id: str
    session_id: str
    customer_id: str
    domain_name: str
    stage: str
    connected_at: int
    ttl: int

    def to_item(self) -> dict[str, Any]:
        return _with_key(
            keys.connection_key(self.connection_id),
            {
                "connection_id": self.connection_id,
                "session_id": self.session_id,
                "customer_id": self.customer_id,
                "domain_name": self.domain_name,
                "stage": self.stage,
                "connected_at": self.connected_at,
                "ttl": self.ttl,
            },
        )

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Connection:
        return cls(
            connection_id=str(item["connection_id"]),
            session_id=str(item["session_id"]),
            customer_id=str(item["customer_id"]),
            domain_name=str(item["domain_name"]),
            stage=str(item["stage"]),
            connected_at=_int(item["connected_at"]),
            ttl=_int(item["ttl"]),
        )


@dataclass(frozen=True)
class CleanupCandidate:
    """A session waiting for cleanup, as the CleanupIndex projects it."""

    session_id: str
    customer_id: str
    status: SessionStatus
    cleanup_at: int

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> CleanupCandidate:
        return cls(
            session_id=str(item["session_id"]),
            customer_id=str(item["customer_id"]),
            status=SessionStatus(item["status"]),
            cleanup_at=_int(item[CLEANUP.sort_key]),
        )


@dataclass(frozen=True)
class StatusListing:
    """A session as the StatusIndex projects it: who, which status, since when."""

    session_id: str
    customer_id: str
    status: SessionStatus
    created_at: int
    #: The epoch second the session entered ``status``.
    status_since: int

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> StatusListing:
        return cls(
            session_id=str(item["session_id"]),
            customer_id=str(item["customer_id"]),
            status=SessionStatus(item["status"]),
            created_at=_int(item["created_at"]),
            status_since=keys.status_since(str(item[SESSIONS_BY_STATUS.sort_key])),
        )


SessionRecord = Session | Turn | Summary | Handoff
"""Any item of a session partition."""

Record = Session | Turn | Summary | Handoff | Agent | Connection


def record_from_item(item: Mapping[str, Any]) -> Record | None:
    """The typed record an item holds, chosen by its key prefixes; ``None`` if unknown.

    Agent ``SKILL#`` rows are index helpers, not records, and also give ``None``. Used by the
    archive and by stream consumers that receive items of every type.
    """
    pk, sk = str(item.get(PARTITION_KEY, "")), str(item.get(SORT_KEY, ""))
    if pk.startswith(keys.SESSION_PREFIX):
        if sk == keys.META_SK:
            return Session.from_item(item)
        if sk.startswith(keys.TURN_PREFIX):
            return Turn.from_item(item)
        if sk.startswith(keys.SUMMARY_PREFIX):
            return Summary.from_item(item)
        if sk.startswith(keys.HANDOFF_PREFIX):
            return Handoff.from_item(item)
        return None
    if sk != keys.META_SK:
        return None
    if pk.startswith(keys.AGENT_PREFIX):
        return Agent.from_item(item)
    if pk.startswith(keys.CONNECTION_PREFIX):
        return Connection.from_item(item)
    return None
