"""Powertools idempotency on the stage's own table: one store for every function that must act once.

Records live beside the application's items under their own partition,
``idempotency#<function name>``, with the request hash as sort key, so they are never a session,
turn or handoff: the stream router's filter (META, TURN#, SUMMARY#, HANDOFF# sort keys) passes
none of them on, and the cleanup sweep, which walks its own index, never sees them. They expire
with the table's TTL attribute. The record's status and payload use prefixed attribute names so
they cannot be mistaken for, or indexed as, an application item's ``status``.

Powertools' idempotency package is imported on first use, not with this module: the API and chat
functions need it only for a request that carries a key, and their cold start should not pay for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from lambdas.shared import env
from lambdas.shared.errors import Conflict, InvalidInput
from lambdas.shared.schema import PARTITION_KEY, SORT_KEY, TTL_ATTRIBUTE
from lambdas.shared.settings import resource

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer, IdempotencyConfig

T = TypeVar("T")

#: What a client may send as ``Idempotency-Key``: the rule the workflow routes apply too.
KEY_PATTERN: Final = re.compile(r"[A-Za-z0-9_-]{1,80}")
#: How long a request's answer is kept for a retry with the same key.
REQUEST_MEMORY_SECONDS: Final = 24 * 3600
#: The invocation a keyed request belongs to (its remaining time bounds an in-progress record).
_INVOCATION: list[Any] = [None]


def remember_invocation(context: Any) -> None:
    """Note the Lambda context of this invocation for a keyed request; costs nothing without one."""
    _INVOCATION[0] = context


@env.once
def _requests() -> IdempotencyConfig:
    """A request is one per (caller, route, key); its body must be the same on every retry."""
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig

    return IdempotencyConfig(
        event_key_jmespath="[caller, route, key]",
        payload_validation_jmespath="body",
        expires_after_seconds=REQUEST_MEMORY_SECONDS,
    )


class InvalidKey(InvalidInput):
    """The ``Idempotency-Key`` header is not 1-80 letters, digits, ``-`` or ``_``."""

    parameter = True


class KeyReused(Conflict):
    """The ``Idempotency-Key`` answered another request (a different body) of this caller and route."""


class StillRunning(Conflict):
    """A request with this ``Idempotency-Key`` is being handled right now."""


@env.once
def store() -> DynamoDBPersistenceLayer:
    """The container's persistence layer on ``TABLE_NAME`` (created on first use)."""
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

    return DynamoDBPersistenceLayer(
        table_name=resource("TABLE_NAME"),
        key_attr=PARTITION_KEY,
        sort_key_attr=SORT_KEY,
        expiry_attr=TTL_ATTRIBUTE,
        in_progress_expiry_attr="idempotency_in_progress_until",
        status_attr="idempotency_status",
        data_attr="idempotency_data",
        validation_key_attr="idempotency_validation",
    )


def once(function: Callable[..., T], config: IdempotencyConfig | Callable[[], IdempotencyConfig]) -> Callable[..., T]:
    """``function(data, **extra)`` under Powertools' idempotency on this store: once per ``config``'s key of ``data``.

    Only ``data`` is hashed and validated; ``extra`` keyword arguments reach the function as they
    are (collaborators, not part of the request). The wrapped function is built on first call (the
    store needs ``TABLE_NAME``) and forgotten by ``env.reset()``. ``data`` and the result must be
    JSON documents. ``config`` may be a factory, so that building it waits for the first call too.
    """

    @env.once
    def build() -> Callable[..., T]:
        from aws_lambda_powertools.utilities.idempotency import idempotent_function

        resolved = config if not callable(config) else config()

        @idempotent_function(data_keyword_argument="data", persistence_store=store(), config=resolved)
        def run(data: dict[str, Any], **extra: Any) -> T:
            return function(data, **extra)

        return run

    def call(data: dict[str, Any], **extra: Any) -> T:
        return build()(data=data, **extra)

    return call


def _answer(request: dict[str, Any], *, act: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    return act()


_answer_once = once(_answer, _requests)


def replay(caller: str, route: str, key: str | None, body: Any, act: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``act()``'s answer, computed once per ``(caller, route, key)`` and replayed to a retry.

    Without a key (or an empty one) ``act`` simply runs. A key is 1-80 letters, digits, ``-`` or ``_``
    (:class:`InvalidKey` otherwise, a 400); the same key with another body is :class:`KeyReused`, and one whose
    first request is still running is :class:`StillRunning` (both 409). Keys are the caller's own:
    another caller's identical key is another request.
    """
    if not key:  # absent, or sent empty: no key
        return act()
    if not KEY_PATTERN.fullmatch(key):
        raise InvalidKey("header.Idempotency-Key must be 1-80 letters, digits, - or _")
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
        IdempotencyValidationError,
    )

    if _INVOCATION[0] is not None:
        _requests().register_lambda_context(_INVOCATION[0])
    request = {"caller": caller, "route": route, "key": key, "body": body}
    try:
        return _answer_once(request, act=act)
    except IdempotencyValidationError:
        raise KeyReused(f"this Idempotency-Key was used for another {route} request; use a new key") from None
    except IdempotencyAlreadyInProgressError:
        raise StillRunning("a request with this Idempotency-Key is still being handled; retry shortly") from None
