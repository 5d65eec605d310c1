"""What the stream router does with one stream record: plain functions, no AWS calls.

``classify`` turns a DynamoDB stream record into the entries the router sends on (analytics,
audit, a summary trigger, a bus event, a handoff message, as the record needs). It raises
``PoisonRecord`` only when the record itself is malformed, so one bad record is reported alone.

Routing, by the item's sort key:

* ``TURN#`` INSERT whose turn number is a multiple of the interval -> summary trigger. The number
  is read from the turn item itself (its key), so there is no extra read and nothing is invoked
  for the other turns.
* ``META`` of a session: INSERT (a new session, ``old_status`` "none") or MODIFY with a status
  change -> ``SessionStatusChanged`` on the bus.
* ``HANDOFF#`` changes the handoff metrics count (requested, assigned, escalated, first reply,
  completed, failed: :func:`handoff_changes`) -> ``HandoffChanged`` on the bus, with the
  handoff's timestamps; independently of the topic message below.
* ``HANDOFF#`` INSERT with an agent -> handoff topic (``event_type`` handoff, to that agent's
  dashboard); an INSERT without one (a queued handoff) sends nothing: the handoff workflow's
  ``handoff_waiting`` is the one message that tells every agent, and no queue selects a
  ``handoff`` without an agent. MODIFY whose status becomes
  ``escalated`` -> ``escalated`` (the escalation branch pages the managers, the customer is told);
  MODIFY whose status becomes ``completed`` -> ``completed`` with the ``resolution`` and
  ``outcome`` (the customer is told); any other MODIFY that assigns a new agent -> ``assigned``.
  Attributes ``event_type``, ``agent_id`` (only when an agent is set, so the "agent_id exists"
  filter means something), ``reason``.
* REMOVE made by TTL (``userIdentity`` is the DynamoDB service) -> audited as ``expired``.
* Every record -> analytics and audit. Neither carries message content (turn text, summaries):
  the audit bucket is WORM, so it holds keys, the change, changed attribute names and SHA-256
  digests of the images, which prove what was stored without keeping personal data forever. A
  review's line also carries its decision's facts (``REVIEW_DECISION_ATTRIBUTES``: who decided,
  why, the risk score and the threshold), so an automatic export approval is audited with its reason.

Every outgoing entry carries ``event_id`` = the stream record's ``eventID``, so a replayed
record can be recognised downstream.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import (
    DynamoDBRecord,
    DynamoDBRecordEventName,
)
from boto3.dynamodb.types import Binary

from contracts import messages as vocabulary
from contracts.trail import ANALYTICS_ATTRIBUTES as ANALYTICS_ATTRIBUTES
from contracts.trail import REVIEW_DECISION_ATTRIBUTES
from lambdas.events.messages import (
    ATTR_AGENT_ID,
    ATTR_EVENT_TYPE,
    ATTR_REASON,
    EVENT_ASSIGNED,
    EVENT_CLOSED,
    EVENT_ESCALATED,
    EVENT_HANDOFF,
    EVENT_SOURCE,
    NO_STATUS,
    STATUS_CHANGED,
)
from lambdas.shared import keys
from lambdas.shared.records import HandoffStatus
from lambdas.shared.schema import PARTITION_KEY, SORT_KEY
from lambdas.shared.summaries import closes_window

TTL_PRINCIPAL: Final = "dynamodb.amazonaws.com"


class PoisonRecord(ValueError):
    """A stream record the router cannot read; reported alone in batchItemFailures."""


@dataclass(frozen=True)
class Change:
    """The facts of one stream record the routing needs, in plain Python."""

    event_id: str
    event_name: str  # INSERT | MODIFY | REMOVE
    sequence_number: str
    pk: str
    sk: str
    item_type: str
    session_id: str | None
    new_image: Mapping[str, Any]
    old_image: Mapping[str, Any]
    approximate_time: int
    size_bytes: int
    expired: bool


@dataclass(frozen=True)
class Actions:
    """Everything one record sends on. Optional parts are None when the record needs none."""

    change: Change
    analytics: dict[str, Any]
    audit: dict[str, Any]
    summary: dict[str, Any] | None = None
    bus_event: dict[str, Any] | None = None
    handoff: dict[str, Any] | None = None


def parse(record: DynamoDBRecord) -> Change:
    """The Change a stream record describes; PoisonRecord when it is malformed."""
    try:
        ddb = record.dynamodb
        event_name = record.event_name
        if ddb is None or event_name is None or record.event_id is None or ddb.sequence_number is None:
            raise PoisonRecord("stream record lacks dynamodb, eventName, eventID or SequenceNumber")
        key_image = ddb.keys
        pk, sk = key_image[PARTITION_KEY], key_image[SORT_KEY]
        if not isinstance(pk, str) or not isinstance(sk, str):
            raise PoisonRecord("stream record keys are not strings")
        new_image, old_image = ddb.new_image, ddb.old_image
        approximate_time = ddb.approximate_creation_date_time or 0
        size_bytes = ddb.size_bytes or 0
    except PoisonRecord:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise PoisonRecord(f"unreadable stream record: {type(err).__name__} {err}") from None
    identity = record.user_identity
    expired = (
        event_name is DynamoDBRecordEventName.REMOVE
        and identity.get("type") == "Service"
        and identity.get("principalId") == TTL_PRINCIPAL
    )
    session_id = pk[len(keys.SESSION_PREFIX) :] if pk.startswith(keys.SESSION_PREFIX) else None
    return Change(
        event_id=record.event_id,
        event_name=event_name.name,
        sequence_number=ddb.sequence_number,
        pk=pk,
        sk=sk,
        item_type=item_type(pk, sk),
        session_id=session_id or None,
        new_image=new_image,
        old_image=old_image,
        approximate_time=int(approximate_time),
        size_bytes=int(size_bytes),
        expired=expired,
    )


def classify(record: DynamoDBRecord, *, summary_interval: int, bus_name: str) -> Actions:
    """Route one stream record (see the module docstring); PoisonRecord when it is malformed."""
    change = parse(record)
    actions = Actions(change=change, analytics=analytics_line(change), audit=audit_line(change))
    if change.item_type == "turn" and change.event_name == "INSERT":
        return _with(actions, summary=_summary_trigger(change, summary_interval))
    if change.item_type == "session":
        return _with(actions, bus_event=_status_event(change, bus_name))
    if change.item_type == "handoff":
        return _with(actions, handoff=_handoff_message(change), bus_event=_handoff_event(change, bus_name))
    return actions


def item_type(pk: str, sk: str) -> str:
    """The record type the key belongs to (architecture page table); 'other' when unknown."""
    if pk.startswith(keys.SESSION_PREFIX):
        if sk == keys.META_SK:
            return "session"
        for prefix, name in (
            (keys.TURN_PREFIX, "turn"),
            (keys.SUMMARY_PREFIX, "summary"),
            (keys.HANDOFF_PREFIX, "handoff"),
        ):
            if sk.startswith(prefix):
                return name
        return "other"
    if sk != keys.META_SK:
        return "other"
    for prefix, name in (
        (keys.REVIEW_PREFIX, "review"),
        (keys.AGENT_PREFIX, "agent"),
        (keys.CONNECTION_PREFIX, "connection"),
    ):
        if pk.startswith(prefix):
            return name
    return "other"


def change_kind(change: Change) -> str:
    """created | updated | deleted | expired."""
    if change.expired:
        return "expired"
    return {"INSERT": "created", "MODIFY": "updated", "REMOVE": "deleted"}[change.event_name]


def analytics_line(change: Change) -> dict[str, Any]:
    image = change.new_image or change.old_image
    attributes = {a: _json_safe(image[a]) for a in ANALYTICS_ATTRIBUTES.get(change.item_type, ()) if a in image}
    return {
        "event_id": change.event_id,
        "event_name": change.event_name,
        "change": change_kind(change),
        "item_type": change.item_type,
        "session_id": change.session_id,
        "approximate_time": change.approximate_time,
        "size_bytes": change.size_bytes,
        **attributes,
    }


def audit_line(change: Change) -> dict[str, Any]:
    old, new = change.old_image, change.new_image
    changed = sorted(name for name in set(old) | set(new) if old.get(name) != new.get(name))
    line: dict[str, Any] = {
        "event_id": change.event_id,
        "sequence_number": change.sequence_number,
        "event_name": change.event_name,
        "change": change_kind(change),
        "actor": "ttl" if change.expired else "application",
        "item_type": change.item_type,
        "pk": change.pk,
        "sk": change.sk,
        "approximate_time": change.approximate_time,
        "changed_attributes": changed,
        "old_digest": _digest(old) if old else None,
        "new_digest": _digest(new) if new else None,
    }
    if "status" in changed:
        line["old_status"] = _opt_str(old.get("status"))
        line["new_status"] = _opt_str(new.get("status"))
    if change.item_type == "review":  # who decided and why: facts about the decision, no personal data
        line.update({name: _json_safe(new[name]) for name in REVIEW_DECISION_ATTRIBUTES if name in new})
    return line


def _summary_trigger(change: Change, interval: int) -> dict[str, Any] | None:
    try:
        turn_number = int(change.sk[len(keys.TURN_PREFIX) :])
    except ValueError:
        raise PoisonRecord(f"turn key {change.sk!r} has no turn number") from None
    if not closes_window(turn_number, interval):
        return None
    return {"session_id": change.session_id, "turn_number": turn_number, "event_id": change.event_id}


def _status_event(change: Change, bus_name: str) -> dict[str, Any] | None:
    if change.event_name == "REMOVE":
        return None
    new_status = _opt_str(change.new_image.get("status"))
    old_status = _opt_str(change.old_image.get("status")) if change.event_name == "MODIFY" else NO_STATUS
    if new_status is None or old_status == new_status:
        return None
    detail = {
        "session_id": change.session_id,
        "old_status": old_status or NO_STATUS,
        "new_status": new_status,
        "customer_id": _opt_str(change.new_image.get("customer_id")) or "unknown",
        "timestamp": int(_json_safe(change.new_image.get("updated_at")) or change.approximate_time),
        "event_id": change.event_id,
    }
    return {
        "Source": EVENT_SOURCE,
        "DetailType": STATUS_CHANGED,
        "Detail": json.dumps(detail, separators=(",", ":"), sort_keys=True),
        "EventBusName": bus_name,
    }


def _handoff_message(change: Change) -> dict[str, Any] | None:
    new, old = change.new_image, change.old_image
    agent_id = _opt_str(new.get("agent_id"))
    new_status = _opt_str(new.get("status"))
    status_changed = change.event_name == "MODIFY" and new_status != _opt_str(old.get("status"))
    extra: dict[str, Any] = {}
    if change.event_name == "INSERT":
        if agent_id is None:
            return None  # queued: the workflow's handoff_waiting broadcast tells the agents
        event_type = EVENT_HANDOFF
    elif status_changed and new_status == str(HandoffStatus.ESCALATED):
        event_type = EVENT_ESCALATED
    elif status_changed and new_status == str(HandoffStatus.COMPLETED):
        # What the customer is told: how it ended and whether the assistant answers again.
        event_type = EVENT_CLOSED
        extra = {"resolution": _opt_str(new.get("resolution")), "outcome": _opt_str(new.get("outcome"))}
    elif change.event_name == "MODIFY" and agent_id is not None and agent_id != _opt_str(old.get("agent_id")):
        event_type = EVENT_ASSIGNED
    else:
        return None
    reason = _opt_str(new.get("reason")) or "unspecified"
    message = {
        "session_id": change.session_id,
        "handoff_id": _opt_str(new.get("handoff_id")),
        "event_type": event_type,
        "agent_id": agent_id,
        "reason": reason,
        "priority": _opt_str(new.get("priority")) or "normal",
        "event_id": change.event_id,
        **extra,
    }
    attributes = {
        ATTR_EVENT_TYPE: {"DataType": "String", "StringValue": event_type},
        ATTR_REASON: {"DataType": "String", "StringValue": reason},
    }
    if agent_id is not None:
        attributes[ATTR_AGENT_ID] = {"DataType": "String", "StringValue": agent_id}
    return {
        "Subject": "MangaAssist handoff",
        "Message": json.dumps(message, separators=(",", ":"), sort_keys=True),
        "MessageAttributes": attributes,
    }


#: The handoff statuses whose arrival is a change the handoff metrics count.
_STATUS_CHANGES: Final = {
    str(HandoffStatus.ASSIGNED): vocabulary.CHANGE_ASSIGNED,
    str(HandoffStatus.ESCALATED): vocabulary.CHANGE_ESCALATED,
    str(HandoffStatus.COMPLETED): vocabulary.CHANGE_COMPLETED,
    str(HandoffStatus.FAILED): vocabulary.CHANGE_FAILED,
}
_CLOSED: Final = frozenset({str(HandoffStatus.COMPLETED), str(HandoffStatus.FAILED)})


def handoff_changes(change: Change) -> list[str]:
    """What a ``HANDOFF#`` record's change means to the handoff metrics, in order (often nothing).

    A new record is ``requested`` (and ``assigned`` too when an agent was free at once); a status
    reached is ``assigned``, ``escalated``, ``completed`` or ``failed`` (an agent reassigned after
    a re-queue is ``assigned`` again); ``first_reply_at`` appearing is ``first_reply``.
    """
    if change.event_name == "REMOVE":
        return []
    new, old = change.new_image, change.old_image
    status = _opt_str(new.get("status"))
    changes = [vocabulary.CHANGE_REQUESTED] if change.event_name == "INSERT" else []
    if status in _STATUS_CHANGES and (change.event_name == "INSERT" or status != _opt_str(old.get("status"))):
        changes.append(_STATUS_CHANGES[status])
    if new.get("first_reply_at") is not None and old.get("first_reply_at") is None:
        changes.append(vocabulary.CHANGE_FIRST_REPLY)
    return changes


def _handoff_event(change: Change, bus_name: str) -> dict[str, Any] | None:
    """``HandoffChanged`` on the bus with the timestamps the metrics measure; None when nothing counts.

    ``requested_at`` is when the record was first written (the wait for an agent, or the assignment
    when an agent was free at once); ``closed_at`` falls back to the record's last update for a
    handoff failed by the workflow, which writes no ``closed_at``.
    """
    changes = handoff_changes(change)
    if not changes:
        return None
    new = change.new_image
    status = _opt_str(new.get("status"))

    def seconds(name: str) -> int | None:
        value = _json_safe(new.get(name))
        return int(value) if isinstance(value, (int, float)) else None

    closed_at = seconds("closed_at") or (seconds("updated_at") if status in _CLOSED else None)
    detail = {
        "session_id": change.session_id,
        "handoff_id": _opt_str(new.get("handoff_id")),
        "changes": changes,
        "status": status,
        "reason": _opt_str(new.get("reason")) or "unspecified",
        "priority": _opt_str(new.get("priority")) or "normal",
        "requested_at": seconds("created_at"),
        "assigned_at": seconds("assigned_at"),
        "first_reply_at": seconds("first_reply_at"),
        "closed_at": closed_at,
        "timestamp": seconds("updated_at") or change.approximate_time,
        "event_id": change.event_id,
    }
    return {
        "Source": EVENT_SOURCE,
        "DetailType": vocabulary.HANDOFF_CHANGED,
        "Detail": json.dumps(detail, separators=(",", ":"), sort_keys=True),
        "EventBusName": bus_name,
    }


def _with(actions: Actions, **parts: Any) -> Actions:
    return Actions(
        change=actions.change,
        analytics=actions.analytics,
        audit=actions.audit,
        summary=parts.get("summary"),
        bus_event=parts.get("bus_event"),
        handoff=parts.get("handoff"),
    )


def _json_safe(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Binary):
        return {"binary_base64": base64.b64encode(bytes(value.value)).decode()}
    if isinstance(value, (bytes, bytearray)):
        return {"binary_base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((_json_safe(v) for v in value), key=str)
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _digest(image: Mapping[str, Any]) -> str:
    canonical = json.dumps(_json_safe(dict(image)), separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)
