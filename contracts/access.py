"""Who may call which REST route: the one table the API stack, the authorizer and the handlers share.

The API stack adds exactly the methods of :data:`ROUTES` (a public one without the authorizer);
the authorizer turns the table into a least-privilege IAM policy per role (only the methods that
role may call); the session Lambda checks the role again (defence in depth) and then the
ownership of the addressed session, which a policy cannot express. Routes without roles are
public at the gateway (the review links: their HMAC signature is the credential).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

CUSTOMER: Final = "customer"
AGENT: Final = "agent"
ADMIN: Final = "admin"
#: Every role a token may carry: the user pool's groups, and what the verifier accepts.
ROLES: Final = (CUSTOMER, AGENT, ADMIN)


@dataclass(frozen=True)
class Route:
    """One method on one API Gateway resource path, and the roles allowed to call it."""

    method: str
    path: str
    roles: frozenset[str]

    @property
    def public(self) -> bool:
        return not self.roles

    def arn_suffix(self) -> str:
        """``METHOD/path`` as in an execute-api ARN, each ``{param}`` a ``*``."""
        return f"{self.method}/" + re.sub(r"\{[^}/]+\}", "*", self.path.lstrip("/"))


def _r(method: str, path: str, *roles: str) -> Route:
    return Route(method, path, frozenset(roles))


ROUTES: Final[tuple[Route, ...]] = (
    _r("POST", "/sessions", CUSTOMER, ADMIN),
    _r("GET", "/sessions/{id}", CUSTOMER, AGENT, ADMIN),
    _r("DELETE", "/sessions/{id}", CUSTOMER, ADMIN),
    _r("GET", "/sessions/{id}/turns", CUSTOMER, AGENT, ADMIN),
    _r("POST", "/sessions/{id}/handoff", CUSTOMER, ADMIN),
    # Only the session's customer: it is their message that is edited or answered again.
    _r("POST", "/sessions/{id}/rewind", CUSTOMER),
    _r("GET", "/customers/{id}/sessions", CUSTOMER, ADMIN),
    _r("GET", "/executions/{id}", CUSTOMER, ADMIN),
    _r("POST", "/admin/cleanup", ADMIN),
    _r("POST", "/admin/export", ADMIN),
    _r("POST", "/handoffs/{session_id}/accept", AGENT),
    _r("POST", "/handoffs/{session_id}/messages", AGENT),
    _r("POST", "/handoffs/{session_id}/close", AGENT, ADMIN),
    _r("POST", "/agents/me/presence", AGENT),
    _r("GET", "/agents/me/inbox", AGENT),
    _r("POST", "/admin/agents", ADMIN),
    _r("GET", "/admin/agents", ADMIN),
    _r("GET", "/admin/agents/{agent_id}", ADMIN),
    _r("PATCH", "/admin/agents/{agent_id}", ADMIN),
    _r("POST", "/admin/agents/{agent_id}/retire", ADMIN),
    # Agents only with status=handoff: the session Lambda refuses any other status (403).
    _r("GET", "/admin/sessions", AGENT, ADMIN),
    _r("GET", "/reviews/{id}/approve"),
    _r("GET", "/reviews/{id}/reject"),
    _r("POST", "/reviews/{id}/approve"),
    _r("POST", "/reviews/{id}/reject"),
    # Erasure of everything a customer left: an admin names anyone, a customer only themselves.
    _r("DELETE", "/customers/{id}/data", CUSTOMER, ADMIN),
    _r("GET", "/customers/{id}/data/erasure", CUSTOMER, ADMIN),
)


def routes_for(role: str) -> tuple[Route, ...]:
    """The routes ``role`` may call (never a public one: those need no policy)."""
    return tuple(route for route in ROUTES if role in route.roles)


def route(method: str, path: str) -> Route:
    """The table entry of ``method path``; KeyError when the table lacks it."""
    for candidate in ROUTES:
        if candidate.method == method and candidate.path == path:
            return candidate
    raise KeyError(f"{method} {path} is not in contracts.access.ROUTES")
